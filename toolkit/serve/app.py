"""The HTTP endpoints: OpenAI's Files and Batches APIs under ``/v1``.

Each endpoint checks its input, asks the store or the supervisor, and answers with
an :mod:`.openai_objects` object; every error is an OpenAI error body with its
status code (400 bad request, 401 wrong key, 404 unknown id, 409 can't cancel).
"""

from __future__ import annotations

import hmac
from typing import Literal

from fastapi import FastAPI, File, Form, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException

from toolkit.serve.api_errors import APIError, BadRequest, Conflict, NotFound, Unauthorized
from toolkit.serve.openai_objects import Batch, DeletedFile, FileObject, Page
from toolkit.serve.store import Store
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
        if store.file_in_use(file_id):  # its run reads it when it starts, or again on resume
            raise Conflict(f"File '{file_id}' is the input of a batch that hasn't finished; "
                           "cancel the batch or wait for it.", code="file_in_use")
        if not store.delete_file(file_id):
            raise NotFound("file", file_id)
        return DeletedFile(id=file_id)

    @app.get("/v1/files/{file_id}/content")
    def file_content(file_id: str) -> FileResponse:
        file = _file(file_id)
        return FileResponse(store.file_path(file_id), media_type="application/jsonl",
                            filename=file.filename)

    def _file(file_id: str) -> FileObject:
        file = store.get_file(file_id)
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
        batch = store.get_batch(batch_id)
        if batch is None:
            raise NotFound("batch", batch_id)
        return batch

    @app.post("/v1/batches/{batch_id}/cancel")
    def cancel_batch(batch_id: str) -> Batch:
        return supervisor.cancel(batch_id)

    return app
