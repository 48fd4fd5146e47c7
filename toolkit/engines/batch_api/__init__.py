"""engine.kind batch-api: any OpenAI-compatible Batch API (OpenAI, Azure OpenAI, Groq,
Together, ``toolkit serve``), at the provider's batch price.

``settings`` (its section of a spec), ``kind`` (its registration and the provider
check before a run), ``request_files`` (rows as request lines, cut into files within
the provider's limits), ``batch_client`` (the Files and Batches API through the official
client, polled with backoff), ``answers`` (output and error lines as the run's
columns), ``provider_stage`` (the stage: Ray tasks that send their rows as provider batches
and wait for them, resumable from
the records it keeps in the run folder).
"""
