"""The ``toolkit`` command (:mod:`toolkit.cli.main`): thin click commands over the library,
their output, and the cluster-side entrypoint (:mod:`toolkit.cli.entrypoint`)."""
