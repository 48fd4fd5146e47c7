"""batch-llm-toolkit: offline LLM and vision-LLM batch inference on Ray in one command."""

__version__ = "0.1.0"
