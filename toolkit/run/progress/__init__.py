"""A run's progress: one model, where its figures come from, and its terminal line."""
