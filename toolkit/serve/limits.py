"""OpenAI's documented Batch API limits, which ``toolkit serve`` holds requests to as OpenAI does.

Code written against this server must also work against OpenAI's, so a batch OpenAI
would refuse is refused here too, with an error naming the parameter:

* an uploaded file over :data:`MAX_FILE_BYTES`: the upload gets 413 (``param: file``);
* ``metadata`` over its limits: ``POST /v1/batches`` gets 400 (``param: metadata``);
* an input file over :data:`MAX_REQUESTS`: the batch is created, then fails in
  ``validating`` with ``errors.data`` naming the limit, as OpenAI's do (its limits on a
  file's contents are checked while the batch validates, not when it is created).
"""

from __future__ import annotations

from toolkit.serve.api_errors import BadRequest

# OpenAI's Batch API docs (https://platform.openai.com/docs/guides/batch): "The file can
# contain up to 50,000 requests, and can be up to 200 MB in size."
#: Requests (non-blank lines) in one batch's input file.
MAX_REQUESTS = 50_000
#: Bytes of one uploaded file.
MAX_FILE_BYTES = 200 * 1024 * 1024

# OpenAI's API reference, Batches > Create batch > metadata
# (https://platform.openai.com/docs/api-reference/batch/create): "Set of 16 key-value
# pairs ... Keys are strings with a maximum length of 64 characters. Values are strings
# with a maximum length of 512 characters."
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512


def check_metadata(metadata: dict[str, str] | None) -> None:
    """Refuse ``metadata`` beyond OpenAI's limits, in OpenAI's words.

    Raises:
        BadRequest: more than 16 pairs, a key over 64 characters or a value over 512
            (``param: metadata``).
    """
    if metadata is None:
        return
    if len(metadata) > MAX_METADATA_PAIRS:
        raise BadRequest(f"Invalid 'metadata': too many properties. Expected an object with at "
                         f"most {MAX_METADATA_PAIRS} properties, but got an object with "
                         f"{len(metadata)} properties instead.",
                         code="object_above_max_properties", param="metadata")
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise BadRequest(f"Invalid 'metadata': key {key[:MAX_METADATA_KEY_CHARS]!r}... is "
                             f"too long. Expected a key with maximum length "
                             f"{MAX_METADATA_KEY_CHARS}, but got one with length {len(key)} "
                             "instead.", code="string_above_max_length", param="metadata")
        if len(value) > MAX_METADATA_VALUE_CHARS:
            raise BadRequest(f"Invalid 'metadata.{key}': string too long. Expected a string "
                             f"with maximum length {MAX_METADATA_VALUE_CHARS}, but got a "
                             f"string with length {len(value)} instead.",
                             code="string_above_max_length", param="metadata")
