"""The objects of OpenAI's Files and Batches APIs, field for field as its clients read them.

Names and shapes follow the ``openai`` package's ``FileObject``, ``Batch`` and
``SyncCursorPage`` (the tests read every answer through that client), so code
written for OpenAI's Batch API works against ``toolkit serve`` unchanged. Defined
here rather than imported: the server doesn't need the client installed.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field

BatchStatus = Literal["validating", "failed", "in_progress", "finalizing", "completed",
                      "expired", "cancelling", "cancelled"]
#: Statuses a batch never leaves.
TERMINAL_STATUSES: frozenset[str] = frozenset({"failed", "completed", "expired", "cancelled"})


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: Literal["batch", "batch_output"]
    status: Literal["uploaded", "processed", "error"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class DeletedFile(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


class RequestCounts(BaseModel):
    total: int = 0
    completed: int = Field(0, description="Requests answered successfully.")
    failed: int = Field(0, description="Requests written with an error (malformed lines too).")


class TokenDetailsIn(BaseModel):
    cached_tokens: int = 0


class TokenDetailsOut(BaseModel):
    reasoning_tokens: int = 0


class BatchUsage(BaseModel):
    input_tokens: int = 0
    input_tokens_details: TokenDetailsIn = TokenDetailsIn()
    output_tokens: int = 0
    output_tokens_details: TokenDetailsOut = TokenDetailsOut()
    total_tokens: int = 0


class BatchError(BaseModel):
    code: str | None = None
    line: int | None = None
    message: str | None = None
    param: str | None = None


class BatchErrors(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchError] = []


class Batch(BaseModel):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    input_file_id: str
    completion_window: str
    status: BatchStatus
    created_at: int
    model: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: BatchErrors | None = None
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: RequestCounts = RequestCounts()
    usage: BatchUsage | None = None
    metadata: dict[str, str] | None = None


Item = TypeVar("Item", bound=BaseModel)


class Page(BaseModel, Generic[Item]):
    """A list answer: ``has_more`` with ``first_id``/``last_id`` for cursor paging."""

    object: Literal["list"] = "list"
    data: list[Item]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None

    @classmethod
    def of(cls, items: list[Any], has_more: bool) -> "Page[Any]":
        return cls(data=items, has_more=has_more, first_id=items[0].id if items else None,
                   last_id=items[-1].id if items else None)
