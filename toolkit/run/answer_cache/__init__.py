"""The answer cache: answers kept across runs under the hash of everything that decides
them, and one model call per repeated prompt in a run.

- :mod:`~toolkit.run.answer_cache.answer_keys`: what decides an answer (engine kind,
  the model's identity, its settings; per row the prompt as the engine sees it and its
  sampling parameters), hashed into a row's key;
- :mod:`~toolkit.run.answer_cache.entries`: the entries, immutable files written whole,
  one per batch, in a local folder or on object storage;
- :mod:`~toolkit.run.answer_cache.cache_steps`: the two steps around a stage's model
  (look up and collapse repeats before it; answer, expand and store after it);
- :mod:`~toolkit.run.answer_cache.cache_counts`: what the summary says of them;
- :mod:`~toolkit.run.answer_cache.cache_upkeep`: what a cache holds, pruned to a size
  or an age, or cleared (``toolkit cache``).
"""
