"""engine.kind vllm: vLLM through Ray Data LLM, on GPUs or vLLM's CPU backend.

``settings`` (its section of a spec), ``engine_args`` (vLLM's argument names),
``kind`` (its registration), ``chat_stage`` (generate), ``task_stages`` (classify,
embed).
"""
