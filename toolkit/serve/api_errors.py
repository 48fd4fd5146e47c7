"""Errors the API answers with, as OpenAI's: a status code and ``{"error": {...}}``."""

from __future__ import annotations


class APIError(Exception):
    """An answer other than success; :mod:`toolkit.serve.app` turns it into the body
    ``{"error": {"message", "type", "param", "code"}}`` that OpenAI's clients raise from."""

    status_code = 400
    type = "invalid_request_error"

    def __init__(self, message: str, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.message, self.code, self.param = message, code, param

    def body(self) -> dict[str, dict[str, str | None]]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


class BadRequest(APIError):
    status_code = 400


class Unauthorized(APIError):
    status_code = 401


class NotFound(APIError):
    status_code = 404

    def __init__(self, kind: str, object_id: str):
        super().__init__(f"No {kind} with id '{shown_id(object_id)}' exists.", code="not_found")


class Conflict(APIError):
    status_code = 409


class FileTooLarge(APIError):
    status_code = 413

    def __init__(self, limit_bytes: int):
        super().__init__(f"File is too large: a file for the Batch API can be at most "
                         f"{limit_bytes // (1024 * 1024)} MB ({limit_bytes:,} bytes). Split "
                         "its requests into several files, one batch each.",
                         code="file_too_large", param="file")


class ServerError(APIError):
    """Something this server didn't expect: the client is told no more than that (the
    details, which may name the server's paths, go to the server's log)."""

    status_code = 500
    type = "server_error"

    def __init__(self) -> None:
        super().__init__("The server had an error while processing your request; its log "
                         "says more.", code="server_error")


def shown_id(object_id: str, limit: int = 64) -> str:
    """An id from a request as an error quotes it: control characters escaped and at
    most ``limit`` characters (the id is the client's, maybe 5,000 NULs)."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in object_id[:limit])
    return text + ("..." if len(object_id) > limit else "")
