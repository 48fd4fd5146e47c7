"""A run's output: the run directory the toolkit owns, its lock, summary and report."""
