"""The HTTP endpoints: OpenAI's Files and Batches APIs under ``/v1``.

Each endpoint checks its input, asks the store or the supervisor, and answers with
an :mod:`.openai_objects` object; every error is an OpenAI error body with its
status code (400 bad request, 401 wrong key, 404 unknown id, 409 can't cancel, 413
too large, 500 for anything unexpected, whose details stay in the server's log).

Every request is untrusted data: an id in a path that doesn't have the shape this
server issues is unknown (404) before anything else is done with it, and bodies are
held to OpenAI's sizes as they arrive (:mod:`.body_limit`, :mod:`.limits`).
"""

from __future__ import annotations

import hmac
from typing import Literal

from fastapi import FastAPI, File, Form, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException

from toolkit.serve.api_errors import (
    APIError,
    BadRequest,
    Conflict,
    FileTooLarge,
    NotFound,
    ServerError,
    Unauthorized,
)
from toolkit.serve.body_limit import BodyLimit, BodyTooLarge
from toolkit.serve.limits import MAX_FILE_BYTES
from toolkit.serve.openai_objects import Batch, DeletedFile, FileObject, Page
from toolkit.serve.store import BATCH_PREFIX, FILE_PREFIX, Store, is_issued_id
from toolkit.serve.supervisor import Supervisor


class CreateBatch(BaseModel):
    """``POST /v1/batches``: fields OpenAI's client sends and this server doesn't use
    (``output_expires_after``) are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")

    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None


def create_app(store: Store, supervisor: Supervisor, api_key: str | None) -> FastAPI:
    """The API over ``store`` and ``supervisor``; with ``api_key``, every request must
    carry ``Authorization: Bearer <api_key>``."""
    app = FastAPI(title="toolkit serve: OpenAI Batch API", docs_url=None, redoc_url=None,
                  openapi_url=None)
    # Added first, so it runs inside the key check: no body is read for a wrong key.
    app.add_middleware(BodyLimit, upload_path="/v1/files", upload_bytes=MAX_FILE_BYTES)

    @app.middleware("http")
    async def check_key(request: Request, call_next):  # type: ignore[no-untyped-def]
        if api_key is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                error = Unauthorized("Incorrect API key provided: this server needs the key "
                                     "in its TOOLKIT_API_KEY as 'Authorization: Bearer KEY'.",
                                     code="invalid_api_key")
                return JSONResponse(error.body(), status_code=error.status_code)
        return await call_next(request)

    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError) -> JSONResponse:
        return JSONResponse(error.body(), status_code=error.status_code)

    @app.exception_handler(BodyTooLarge)
    async def too_large(request: Request, error: BodyTooLarge) -> JSONResponse:
        return JSONResponse(error.error.body(), status_code=error.error.status_code)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        # Starlette still logs the traceback; the client gets JSON without its details.
        return JSONResponse(ServerError().body(), status_code=ServerError.status_code)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return JSONResponse(BadRequest(f"{param or 'request'}: {first.get('msg', 'invalid')}",
                                       code="invalid_request", param=param).body(),
                            status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        body = APIError(str(error.detail), code=None).body()
        return JSONResponse(body, status_code=error.status_code)

    # -- files ---------------------------------------------------------------------------

    @app.post("/v1/files")
    def upload_file(file: UploadFile = File(...), purpose: str = Form(...)) -> FileObject:
        if purpose != "batch":
            raise BadRequest(f"purpose '{purpose}' is not supported here; upload batch "
                             "request files with purpose 'batch'.", code="invalid_value",
                             param="purpose")
        # BodyLimit stopped anything much larger; this is the file itself, to the byte
        # (Starlette counts it as it spools it).
        if (file.size or 0) > MAX_FILE_BYTES:
            raise FileTooLarge(MAX_FILE_BYTES)
        return store.add_file(file.filename or "upload.jsonl", purpose, file.file)

    @app.get("/v1/files")
    def list_files(purpose: str | None = None, limit: int = Query(10000, ge=1, le=10000),
                   after: str | None = None,
                   order: Literal["asc", "desc"] = "desc") -> Page[FileObject]:
        items, more = store.list_files(limit, after, purpose, newest_first=order == "desc")
        return Page[FileObject].of(items, more)

    @app.get("/v1/files/{file_id}")
    def get_file(file_id: str) -> FileObject:
        return _file(file_id)

    @app.delete("/v1/files/{file_id}")
    def delete_file(file_id: str) -> DeletedFile:
        outcome = store.delete_file(_file_id(file_id))
        if outcome == "in_use":  # its run reads it when it starts, or again on resume
            raise Conflict(f"File '{file_id}' is the input of a batch that hasn't finished; "
                           "cancel the batch or wait for it.", code="file_in_use")
        if outcome == "missing":
            raise NotFound("file", file_id)
        return DeletedFile(id=file_id)

    @app.get("/v1/files/{file_id}/content")
    def file_content(file_id: str) -> FileResponse:
        file = _file(file_id)
        path = store.file_path(file.id)
        if not path.is_file():  # listed, but its bytes are gone (deleted by hand)
            raise NotFound("file", file_id)
        return FileResponse(path, media_type="application/jsonl", filename=file.filename)

    def _file_id(file_id: str) -> str:
        """``file_id`` if it has the shape of this server's ids, else 404: no other
        string goes near the store's folder."""
        if not is_issued_id(FILE_PREFIX, file_id):
            raise NotFound("file", file_id)
        return file_id

    def _file(file_id: str) -> FileObject:
        file = store.get_file(_file_id(file_id))
        if file is None:
            raise NotFound("file", file_id)
        return file

    # -- batches -------------------------------------------------------------------------

    @app.post("/v1/batches")
    def create_batch(request: CreateBatch) -> Batch:
        return supervisor.create(request.input_file_id, request.endpoint,
                                 request.completion_window, request.metadata)

    @app.get("/v1/batches")
    def list_batches(limit: int = Query(20, ge=1, le=100),
                     after: str | None = None) -> Page[Batch]:
        items, more = store.list_batches(limit, after)
        return Page[Batch].of(items, more)

    @app.get("/v1/batches/{batch_id}")
    def get_batch(batch_id: str) -> Batch:
        batch = store.get_batch(_batch_id(batch_id))
        if batch is None:
            raise NotFound("batch", batch_id)
        return batch

    @app.post("/v1/batches/{batch_id}/cancel")
    def cancel_batch(batch_id: str) -> Batch:
        return supervisor.cancel(_batch_id(batch_id))

    def _batch_id(batch_id: str) -> str:
        if not is_issued_id(BATCH_PREFIX, batch_id):
            raise NotFound("batch", batch_id)
        return batch_id

    return app
