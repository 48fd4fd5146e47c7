"""Job entrypoints: one module per job, run on the cluster as ``python -m jobs.<job> --spec FILE``."""
