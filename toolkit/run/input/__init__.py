"""A run's input: opened, checked before any model loads, staged for resume; formats."""
