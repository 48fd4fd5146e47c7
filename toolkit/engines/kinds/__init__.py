"""The built-in engine kinds, one module each; importing this package registers them
(:mod:`toolkit.spec.engine_kinds` does, the first time its registry is read).

A new kind is one more module here: its settings model, an ``apply`` that adds its
model stage to a dataset, and a :func:`~toolkit.spec.engine_kinds.register_engine`
call, then its name in the import below.
"""

# In this order in --engine's choices and in messages that list kinds.
from toolkit.engines.kinds import vllm, transformers, http, sklearn, python  # noqa: F401, I001
