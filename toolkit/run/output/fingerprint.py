"""The fingerprint of a run: a hash of every setting that can change a row's result.

A run directory's manifest keeps it (:mod:`toolkit.run.output.run_directory`): a rerun
with the same fingerprint resumes, one with another is refused (or, with
``--overwrite``, replaces the results), and a retry records it per attempt. Settings
of speed and memory only (:data:`RESULT_NEUTRAL_FIELDS`,
:data:`RESULT_NEUTRAL_ENGINE_KWARGS`) are left out, so a rerun after an
out-of-memory crash with smaller batches still resumes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from toolkit.redaction import redact
from toolkit.spec.models import JobSpec

#: Spec fields that can't change any row's result, so a rerun that changes them
#: still resumes (e.g. smaller batches after an out-of-memory crash). Every other
#: field, including engine_kwargs this list doesn't name, is in the fingerprint.
RESULT_NEUTRAL_FIELDS: tuple[str, ...] = (
    "data.output",
    "data.partitions",
    "engine.batch_size",
    "engine.concurrency",
    "engine.num_cpus",
    "engine.kv_cache_gib",
    "engine.max_restarts",
    # http: how fast and with which credentials rows reach the same server
    "engine.qps",
    "engine.max_retries",
    "engine.retry_wait_s",
    "engine.api_key_env",
    "engine.headers_from_env",
    # batch-api: how rows are cut into the provider's files, and how often it is polled
    "engine.requests_per_file",
    "engine.bytes_per_file",
    "engine.poll_interval_s",
    "engine.max_poll_interval_s",
    # a cascade's small model: its pool, as engine's
    "cascade.batch_size",
    "cascade.concurrency",
    "cascade.num_cpus",
    "compute",
    "strict",
    "stop_loss",
    # where the answer cache is doesn't change an answer (whether there is one does:
    # its rows say answered_by)
    "cache.dir",
    "cache.shared",
)
#: vLLM engine arguments that only change speed or memory, never a token.
RESULT_NEUTRAL_ENGINE_KWARGS: tuple[str, ...] = (
    "gpu_memory_utilization",
    "enable_chunked_prefill",
    "max_num_batched_tokens",
    "max_num_seqs",
    "enable_prefix_caching",
    "swap_space",
    "disable_log_stats",
)


def results_fingerprint(spec: JobSpec) -> str:
    """A hash of every setting that can change a row's result.

    The whole spec counts (job options, prompts, input and rows, model, engine
    kind and engine kwargs, sampling, structured output) except
    :data:`RESULT_NEUTRAL_FIELDS` and :data:`RESULT_NEUTRAL_ENGINE_KWARGS`.
    """
    # Redacted first: a URL's credentials never change a row (rotating a key or a
    # presigned URL's signature still resumes), and no hash of them is stored.
    decisive = redact(spec.model_dump(mode="json"))
    for dotted in RESULT_NEUTRAL_FIELDS:
        *parents, last = dotted.split(".")
        node = decisive
        for part in parents:
            node = node.get(part, {})
        node.pop(last, None)
    # A multi-stage job's earlier stages (stages.NAME) are engine sections too.
    for stage in decisive.get("stages", {}).values():
        for dotted in RESULT_NEUTRAL_FIELDS:
            if dotted.startswith("engine."):
                stage.pop(dotted.removeprefix("engine."), None)
    for section in (decisive.get("engine", {}), *decisive.get("stages", {}).values(),
                    decisive.get("cascade") or {}):
        kwargs = section.get("engine_kwargs") or {}
        for name in RESULT_NEUTRAL_ENGINE_KWARGS:
            kwargs.pop(name, None)
    return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:16]


def changed_fields(before: dict[str, Any], after: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths whose values differ between two spec dumps."""
    changed = []
    for key in sorted(set(before) | set(after)):
        path = f"{prefix}{key}"
        old, new = before.get(key), after.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += changed_fields(old, new, path + ".")
        elif old != new:
            changed.append(path)
    return [c for c in changed if not c.startswith(tuple(RESULT_NEUTRAL_FIELDS))]
