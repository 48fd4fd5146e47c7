"""What a run's summary says of its answer cache: rows answered from it, rows that
repeated an earlier row's prompt, and the tokens neither sent to the model, counted
from the ``answered_by`` the rows were written with."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from toolkit.redaction import redact
from toolkit.run.answer_cache.cache_steps import ANSWER_COLUMNS, BY_CACHE, BY_REPEAT
from toolkit.spec.cascade import ANSWERED_BY_COLUMN

if TYPE_CHECKING:
    from toolkit.spec.models import CacheConfig

_TOKENS = {"input_tokens_saved": "num_input_tokens",
           "output_tokens_saved": "num_generated_tokens"}
assert set(_TOKENS.values()) <= set(ANSWER_COLUMNS)


class CacheSummary(BaseModel):
    """The answer cache's part in a run (``cache:``)."""

    location: str = Field(description="cache.dir, credentials redacted.")
    sampled: bool = Field(description="cache.sampled: sampled answers were cached too.")
    rows_from_cache: int = Field(description="Rows answered from the cache, not the model.")
    rows_repeated: int = Field(
        description="Rows whose prompt an earlier row of their block had: the model "
        "answered it once, for all of them.")
    input_tokens_saved: int | None = Field(
        None, description="Prompt tokens of those rows, which no model read this run.")
    output_tokens_saved: int | None = Field(
        None, description="Tokens those rows' answers hold, which no model generated this run.")


def cache_summary(dataset: Any, cache: "CacheConfig | None") -> CacheSummary | None:
    """The cache's figures from the written rows; None for a run without a cache."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if cache is None or ANSWERED_BY_COLUMN not in dataset.schema.names:
        return None
    names = dataset.schema.names
    table = dataset.to_table(columns=[ANSWERED_BY_COLUMN,
                                      *(c for c in _TOKENS.values() if c in names)])
    by = table[ANSWERED_BY_COLUMN]
    saved = pc.is_in(by, value_set=pa.array([BY_CACHE, BY_REPEAT]))
    saved = pc.fill_null(saved, False)
    tokens = {field: int(pc.sum(pc.filter(table[column], saved)).as_py() or 0)
              for field, column in _TOKENS.items() if column in names}
    return CacheSummary(location=redact(cache.dir), sampled=cache.sampled,
                        rows_from_cache=int(pc.sum(pc.equal(by, BY_CACHE)).as_py() or 0),
                        rows_repeated=int(pc.sum(pc.equal(by, BY_REPEAT)).as_py() or 0),
                        **tokens)


def cache_lines(cache: CacheSummary | None) -> list[str]:
    """The printed summary's line for the cache (none without one)."""
    if cache is None:
        return []
    tokens = ""
    if cache.input_tokens_saved is not None:
        tokens = (f"; {cache.input_tokens_saved:,} tokens in, "
                  f"{cache.output_tokens_saved or 0:,} out not sent to the model")
    sampled = ", sampled answers too" if cache.sampled else ""
    return [f"  answer cache:  {cache.rows_from_cache:,} rows from the cache, "
            f"{cache.rows_repeated:,} repeated prompts answered once{tokens} "
            f"({cache.location}{sampled})"]
