"""Running a job: input, the Ray Data pipeline, the run directory and its summary.

Imports the spec and engine layers below it; never the cluster or CLI layers.
"""
