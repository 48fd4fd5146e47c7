"""engine.kind http: an OpenAI-compatible server, through Ray Data LLM's HTTP processor.

``settings`` (its section of a spec), ``kind`` (its registration and the server
check before a run), ``chat_stage`` (the requests and answers).
"""
