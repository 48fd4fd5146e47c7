"""Sample inputs for trying the toolkit without downloads.

``customers`` generates a synthetic copy of the public datablist
"customers-2000000.csv" file (same columns, similar values) of any size, and
``tiny_model`` builds a tiny random-weight Llama-style chat model with its own
byte-level tokenizer, so pipelines can run end to end offline and on CPU.
"""
