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
        super().__init__(f"No {kind} with id '{object_id}' exists.", code="not_found")


class Conflict(APIError):
    status_code = 409
