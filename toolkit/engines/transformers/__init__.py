"""engine.kind transformers: Ray Data actor pools over Hugging Face transformers.

``settings`` (its section of a spec and the engine_kwargs it accepts), ``kind`` (its
registration), ``chat_engine`` and ``prompt_prefix`` (generate), ``vision_engine``
(generate with images), ``text_stages`` (classify, embed), ``image_stage``
(image-classify).
"""
