"""Request bodies held to a size as they arrive: an upload over the limit is refused with 413
before it is stored, and nothing is ever buffered whole.

Starlette spools an upload to a temporary file as it parses it (a megabyte in memory,
the rest on disk), so memory stays flat whatever the size; this middleware stops the
spooling itself once a body passes its limit, whether the client said the size up
front (``Content-Length``: refused before reading) or not (chunked: refused when the
count passes it). The endpoint then checks the file part to the byte
(:data:`~toolkit.serve.limits.MAX_FILE_BYTES`).
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkit.serve.api_errors import APIError, FileTooLarge

#: Bytes of a request body other than an upload's (a batch's JSON is a few kB).
MAX_OTHER_BYTES = 1024 * 1024
#: Room around an upload's file in its multipart body (boundaries, part headers, purpose).
UPLOAD_FRAMING_BYTES = 1024 * 1024
#: How much of a refused body is still read (and dropped). Clients send the whole body
#: before they read the answer; one whose upload is cut off can see a reset connection
#: instead of the 413 saying why. Past this, the connection is dropped.
DRAIN_BYTES = 1024 * 1024 * 1024


class BodyTooLarge(HTTPException):
    """Raised from inside a body's reading, where FastAPI lets only HTTP exceptions
    through unchanged; the app answers with :attr:`error`."""

    def __init__(self, error: APIError) -> None:
        super().__init__(status_code=error.status_code, detail=error.message)
        self.error = error


class RequestTooLarge(APIError):
    status_code = 413

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"Request body is too large: at most {limit_bytes:,} bytes here.",
                         code="request_too_large")


class BodyLimit:
    """ASGI middleware: bodies of ``upload_path`` up to ``upload_bytes`` (plus multipart
    framing), every other body up to :data:`MAX_OTHER_BYTES`."""

    def __init__(self, app: ASGIApp, upload_path: str, upload_bytes: int) -> None:
        self.app, self.upload_path, self.upload_bytes = app, upload_path, upload_bytes

    def _limit(self, scope: Scope) -> tuple[int, APIError]:
        if scope["path"] == self.upload_path:
            return self.upload_bytes + UPLOAD_FRAMING_BYTES, FileTooLarge(self.upload_bytes)
        return MAX_OTHER_BYTES, RequestTooLarge(MAX_OTHER_BYTES)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, error = self._limit(scope)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            if declared <= DRAIN_BYTES:
                await _drain(receive, DRAIN_BYTES)
            await JSONResponse(error.body(), status_code=error.status_code)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if message.get("more_body", False):
                        await _drain(receive, DRAIN_BYTES - received)
                    raise BodyTooLarge(error)
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server (uvicorn) refuses such a request itself
    return None


async def _drain(receive: Receive, budget: int) -> None:
    """Read and drop the rest of a body, at most ``budget`` bytes more."""
    while budget > 0:
        message = await receive()
        if message["type"] != "http.request":
            return
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return
