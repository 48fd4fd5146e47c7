"""The run's figures as Ray metrics (``ray.util.metrics``), for Prometheus, the Ray
Dashboard's Metrics view, Grafana and the Anyscale console.

:mod:`~toolkit.run.metrics.instruments` names every metric once (its tags and what it
counts); :mod:`~toolkit.run.metrics.write_figures` counts a write's committed result
files the way the summary counts the folder; :mod:`~toolkit.run.metrics.recorder`
records them from the driver while a run goes and once more when it ends;
:mod:`~toolkit.run.metrics.dashboard` is the Grafana dashboard over them.
"""
