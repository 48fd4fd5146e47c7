"""Ray as a run meets it: the connection, its auth, its own output, the cluster's fit."""
