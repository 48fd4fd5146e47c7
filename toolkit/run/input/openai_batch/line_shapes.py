"""The shapes of a Batch API request line and of each endpoint's body, as typed models
(vLLM's ``run_batch.py`` reads a line as its ``BatchRequestInput`` the same way).

A body is validated by its endpoint's model: :class:`ChatBody`, :class:`CompletionBody`,
:class:`EmbeddingBody`. Each refuses the fields this toolkit can't honour
(``extra="forbid"``: they would change the answer), and its validators say what is
wrong in the words the Batch API's error lines carry, naming the field first
(``body.n 2: ...``). Fields are declared in the order they are checked, so a body with
several faults is refused for the first, and :func:`validated` turns pydantic's errors
into that one :class:`RequestError`.
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator
from pydantic_core.core_schema import ValidationInfo
from typing_extensions import TypedDict

CHAT_COMPLETIONS_URL = "/v1/chat/completions"
COMPLETIONS_URL = "/v1/completions"
EMBEDDINGS_URL = "/v1/embeddings"
#: The endpoints a run answers, each with the ``engine.task`` that answers it: a run
#: is one model doing one task, so it serves the endpoints of its task and answers
#: the other lines of a mixed file with an error line (400) naming why.
ENDPOINT_TASKS: dict[str, str] = {CHAT_COMPLETIONS_URL: "generate", COMPLETIONS_URL: "generate",
                                  EMBEDDINGS_URL: "embed"}
#: The endpoints whose lines hold several texts, each its own row (``input_index``).
SPLIT_ENDPOINTS = (EMBEDDINGS_URL, COMPLETIONS_URL)
#: Texts one embeddings request may hold (OpenAI's limit for ``input``).
MAX_EMBEDDING_INPUTS = 2048
#: OpenAI's and vLLM's max_tokens of a completion that does not say.
COMPLETION_DEFAULT_MAX_TOKENS = 16
#: The most prompts one completions line may hold.
MAX_COMPLETION_PROMPTS = 2048
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
#: The sampling fields' bounds: (lowest, highest, whole numbers only).
_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "max_completion_tokens": (1, 1e9, True), "max_tokens": (1, 1e9, True),
    "temperature": (0, 2, False), "top_p": (1e-9, 1, False),
    "seed": (-(2 ** 63), 2 ** 63 - 1, True)}
_TOOL_SHAPE = '{"type": "function", "function": {"name", "parameters"}}'


class RequestError(ValueError):
    """Why a request can't be run as given, with the HTTP status the Batch API answers
    it with (400: bad, 404: a model not served). Its message names the field first
    (``body.n ...``, ``url ...``), which the error line reports as its ``param``."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def validated(model: type[BaseModel], body: dict[str, Any] | str) -> Any:
    """``body`` (a dict, or JSON text) as ``model``; pydantic's errors become the one
    :class:`RequestError` the line is answered with: the fields the model doesn't know
    (all named), else the first field's fault, in the order fields are checked.

    Raises:
        RequestError: naming the body field that is wrong or unsupported.
    """
    try:
        if isinstance(body, str):
            return model.model_validate_json(body)
        return model.model_validate(body)
    except ValidationError as invalid:
        errors = invalid.errors(include_url=False)
        unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
        if unknown:
            raise RequestError(f"body.{unknown[0]} is not supported by this toolkit"
                               + (f" (nor {', '.join(unknown[1:])})" if unknown[1:] else "")
                               + "; remove it from the request") from None
        first = errors[0]
        cause = (first.get("ctx") or {}).get("error")
        if isinstance(cause, RequestError):
            raise cause from None
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}"
                        for part in first["loc"])
        raise RequestError(f"body{where}: {first['msg']}") from None


def number(name: str, value: Any) -> Any:
    """``body[name]`` checked against its bounds (:data:`_BOUNDS`): an int for a whole
    number, else a float; None stays None (the spec's value)."""
    if value is None:
        return None
    low, high, integer = _BOUNDS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            integer and not float(value).is_integer()) or not math.isfinite(value):
        raise RequestError(f"body.{name} must be {'a whole number' if integer else 'a number'}, "
                           f"not {value!r}")
    if not low <= value <= high:
        raise RequestError(f"body.{name} must be between {low:g} and {high:g}, not {value!r}")
    return int(value) if integer else float(value)


def texts(value: Any, field: str, noun: str, limit: int, blank: bool, what: str = "") -> list[str]:
    """``value``, a string or a list of them (at most ``limit``), as a list; a
    whitespace-only one allowed where ``blank``. Token arrays are refused."""
    listed = [value] if isinstance(value, str) else value
    if isinstance(listed, list) and listed and all(
            isinstance(v, int) or isinstance(v, list) for v in listed):
        raise RequestError(f"body.{field}: token arrays are not supported; send the text")
    if not isinstance(listed, list) or not listed or not all(
            isinstance(v, str) and (v if blank else v.strip()) for v in listed):
        raise RequestError(f"body.{field} must be a non-empty string or a list of them{what}")
    if len(listed) > limit:
        raise RequestError(f"body.{field} holds {len(listed):,} {noun}; at most {limit:,} a "
                           "request")
    return listed


class RequestLine(BaseModel):
    """One line of a request file: ``{custom_id, method, url, body}``. Other keys are
    passed over; what the line asks is checked against the run by
    :func:`~toolkit.run.input.openai_batch.request_rows.parse_request_line`."""

    model_config = ConfigDict(extra="ignore")

    custom_id: Any = None
    method: Any = "POST"
    url: Any = None
    body: Any = None

    def asked_model(self) -> str | None:
        """The ``body.model`` the line names, where it names one as text."""
        asked = self.body.get("model") if isinstance(self.body, dict) else None
        return asked if isinstance(asked, str) and asked else None


class ChatMessage(TypedDict):
    """A chat message as the engines read it: ``developer`` is a ``system`` message,
    text content parts are joined (a dict: the engines take it as it is)."""

    role: Literal["system", "user", "assistant"]
    content: str


class FunctionDefinition(BaseModel):
    """A tool's function: its name, what it does, its arguments' JSON schema."""

    name: StrictStr
    description: Any = None
    parameters: dict[str, Any] = {}


class FunctionTool(BaseModel):
    """One of ``body.tools``: only functions."""

    type: Literal["function"]
    function: FunctionDefinition


def function_tools(value: Any) -> list[FunctionTool] | None:
    """``body.tools`` as functions (None: no tools)."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise RequestError(f"body.tools must be a non-empty list of {_TOOL_SHAPE}")
    tools = []
    for i, tool in enumerate(value):
        try:
            tools.append(FunctionTool.model_validate(tool))
        except ValidationError as invalid:
            if invalid.errors()[0]["loc"] == ("function", "parameters"):
                raise RequestError(f"body.tools[{i}].function.parameters must be a JSON "
                                   "schema object") from None
            raise RequestError(f"body.tools[{i}] must be {_TOOL_SHAPE}") from None
    return tools


def tool_choice(choice: Any, tools: list[FunctionTool] | None) -> str | None:
    """The function every answer calls, ``""`` for one of several (``required``), or
    None for a plain answer (``none``, or no tools).

    Raises:
        RequestError: a choice without tools, a function not in them; ``"auto"``
            (OpenAI's default when tools are given), which would need the model to
            decide in free text.
    """
    if tools is None:
        if choice not in (None, "none"):
            raise RequestError("body.tool_choice needs body.tools, the functions it calls")
        return None
    if choice == "none":
        return None
    if choice == "required":
        return ""
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not any(tool.function.name == name for tool in tools):
            raise RequestError(f"body.tool_choice names the function {name!r}, which is not "
                               "in body.tools")
        return str(name)
    if choice in (None, "auto"):
        raise RequestError("body.tool_choice 'auto' (the default with tools) is not "
                           "supported: this toolkit answers a function call only when the "
                           "request requires one; set tool_choice to 'required', "
                           '{"type": "function", "function": {"name": ...}} or \'none\'')
    raise RequestError(f"body.tool_choice {choice!r} is not supported; use 'required', 'none' "
                       'or {"type": "function", "function": {"name": ...}}')


class _OneAnswer(BaseModel):
    """What chat and completions bodies share: one answer (no streaming, ``n`` 1) and
    the sampling fields, in vLLM's names, checked against their bounds."""

    model_config = ConfigDict(extra="forbid")
    #: What one answer is given for: ``n`` > 1 is refused naming it.
    answers_per: ClassVar[str] = "request"
    #: Fields refused when given at all, not only when true.
    refused_unless_null: ClassVar[tuple[str, ...]] = ()

    stream: Any = None
    n: Any = 1

    @field_validator("stream", "logprobs", check_fields=False)
    @classmethod
    def _refused_when_set(cls, value: Any, info: ValidationInfo) -> Any:
        if value or (value is not None and info.field_name in cls.refused_unless_null):
            raise RequestError("body.stream: true is not supported in a batch; remove it"
                               if info.field_name == "stream" else
                               "body.logprobs is not supported; remove it")
        return value

    @field_validator("n")
    @classmethod
    def _one_answer(cls, value: Any) -> Any:
        if value != 1:
            raise RequestError(f"body.n {value!r}: one answer per {cls.answers_per} only (n: 1)")
        return value

    @field_validator(*_BOUNDS, mode="before", check_fields=False)
    @classmethod
    def _bounded(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name == "max_tokens" and info.data.get("max_completion_tokens") is not None:
            return None  # max_completion_tokens wins, max_tokens is not read
        return number(str(info.field_name), value)


class ChatBody(_OneAnswer):
    """A ``/v1/chat/completions`` body: messages, sampling fields, function calling,
    ``response_format``; ``model``, ``user`` and the like are accepted and change nothing."""

    logprobs: Any = None
    messages: list[ChatMessage] = Field(None, validate_default=True)  # type: ignore[assignment]
    tools: list[FunctionTool] | None = None
    #: After validation: :func:`tool_choice`'s answer.
    tool_choice: Any = Field(None, validate_default=True)
    response_format: dict[str, Any] | None = None
    max_completion_tokens: int | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    model: Any = None
    user: Any = None
    metadata: Any = None
    store: Any = None
    service_tier: Any = None
    parallel_tool_calls: Any = None

    @field_validator("messages", mode="before")
    @classmethod
    def _messages(cls, value: Any) -> list[ChatMessage]:
        if not isinstance(value, list) or not value:
            raise RequestError("body.messages must be a non-empty list of {role, content}")
        return [_message(i, message) for i, message in enumerate(value)]

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> list[FunctionTool] | None:
        return function_tools(value)

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, value: Any, info: ValidationInfo) -> str | None:
        return tool_choice(value, info.data.get("tools"))

    @field_validator("response_format", mode="before")
    @classmethod
    def _response_format(cls, value: Any, info: ValidationInfo) -> dict[str, Any] | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise RequestError("body.response_format must be an object")
        kind = value.get("type")
        if kind == "json_schema":
            described = value.get("json_schema")
            schema = described.get("schema") if isinstance(described, dict) else None
            if not isinstance(schema, dict):
                raise RequestError("body.response_format.json_schema.schema must be a JSON "
                                   "schema object")
        elif kind not in ("text", "json_object"):
            raise RequestError(f"body.response_format.type {kind!r} is not supported; use "
                               "text, json_object or json_schema")
        if kind != "text" and info.data.get("tool_choice") is not None:
            raise RequestError("body.response_format can't be given with a tool_choice that "
                               "calls a function (the call's arguments are the answer's "
                               "shape); remove one")
        return value

    def structured_outputs(self) -> dict[str, str] | None:
        """``response_format`` as vLLM's ``structured_outputs`` (the schema as JSON text)."""
        kind = (self.response_format or {}).get("type")
        if kind == "json_object":
            return {"json": json.dumps({"type": "object"})}
        if kind == "json_schema":
            schema = self.response_format["json_schema"]["schema"]  # type: ignore[index]
            return {"json": json.dumps(schema, separators=(",", ":"), ensure_ascii=False)}
        return None


def _message(i: int, message: Any) -> ChatMessage:
    if not isinstance(message, dict):
        raise RequestError(f"body.messages[{i}] is not an object")
    role = _ROLES.get(str(message.get("role")))
    if role is None:
        raise RequestError(f"body.messages[{i}].role {message.get('role')!r} is not "
                           "supported; use system, developer, user or assistant")
    content = message.get("content")
    if isinstance(content, list):  # content parts: text only
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestError(f"body.messages[{i}].content: {kind!r} parts are not "
                                   "supported; only text")
            parts.append(str(part.get("text", "")))
        content = "".join(parts)
    if not isinstance(content, str):
        raise RequestError(f"body.messages[{i}].content must be text")
    return {"role": role, "content": content}  # type: ignore[typeddict-item]


class CompletionBody(_OneAnswer):
    """A ``/v1/completions`` body (OpenAI's legacy endpoint): ``prompt`` as written and
    the sampling fields; ``echo``, ``suffix``, ``stop``, ``best_of``... are refused."""

    answers_per: ClassVar[str] = "prompt"
    refused_unless_null = ("logprobs",)

    logprobs: Any = None
    prompt: list[str] = Field(None, validate_default=True)  # type: ignore[assignment]
    max_tokens: int | None = COMPLETION_DEFAULT_MAX_TOKENS
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    model: Any = None
    user: Any = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompts(cls, value: Any) -> list[str]:
        return texts(value, "prompt", "prompts", MAX_COMPLETION_PROMPTS, blank=True)

    @field_validator("max_tokens")
    @classmethod
    def _default_length(cls, value: int | None) -> int:
        return COMPLETION_DEFAULT_MAX_TOKENS if value is None else value


class EmbeddingBody(BaseModel):
    """A ``/v1/embeddings`` body: ``input`` is embedded; the rest don't change the vector
    (``encoding_format`` float only; ``dimensions`` refused: the model's own size)."""

    model_config = ConfigDict(extra="forbid")

    encoding_format: Any = "float"
    input: list[str] = Field(None, validate_default=True)  # type: ignore[assignment]
    model: Any = None
    user: Any = None

    @field_validator("encoding_format")
    @classmethod
    def _floats(cls, value: Any) -> Any:
        if value != "float":
            raise RequestError(f"body.encoding_format {value!r} is not supported; only float")
        return value

    @field_validator("input", mode="before")
    @classmethod
    def _texts(cls, value: Any) -> list[str]:
        return texts(value, "input", "texts", MAX_EMBEDDING_INPUTS, blank=False,
                     what=" (the texts to embed)")


#: Each endpoint's body.
BODIES: dict[str, type[BaseModel]] = {CHAT_COMPLETIONS_URL: ChatBody,
                                      COMPLETIONS_URL: CompletionBody,
                                      EMBEDDINGS_URL: EmbeddingBody}
