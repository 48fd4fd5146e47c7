"""Function calling in a batch: a chat body's ``tools`` with ``tool_choice`` ``required``
or a named function, answered as a call whose arguments the engine holds to the
function's ``parameters`` schema (the chat engines take no ``tools``)."""

from __future__ import annotations

import json
from typing import Any

from toolkit.run.input.openai_batch.line_shapes import (
    FunctionDefinition,
    function_tools,
    tool_choice,
)


class ToolCall:
    """How a request's ``tool_choice`` is answered: the JSON schema its answer is held to
    (the named function's ``parameters``; for ``required`` over several functions,
    ``{"name", "parameters"}`` of one of them, as vLLM constrains it) and the system
    message that tells the model the functions (the chat engines take no ``tools``)."""

    def __init__(self, functions: list[FunctionDefinition], named: str | None,
                 argument_max_chars: int | None = None) -> None:
        self.functions = {f.name: f for f in functions}
        #: The function every answer calls, or None: the answer names one of several.
        self.name = named or (functions[0].name if len(functions) == 1 else None)
        if self.name is not None:
            self.schema: dict[str, Any] = _parameters(self.functions[self.name])
        else:
            self.schema = {"anyOf": [{
                "type": "object",
                "properties": {"name": {"type": "string", "enum": [f.name]},
                               "parameters": _parameters(f)},
                "required": ["name", "parameters"]} for f in functions]}
        if argument_max_chars is not None:
            # Compact JSON too (arguments are re-serialised anyway): whitespace allowed
            # between every token lets a weak model fill max_tokens with it. llguidance
            # reads this key; the schema a real model gets is the function's as given.
            self.schema = {**_bounded(self.schema, argument_max_chars),
                           "x-guidance": {"whitespace_flexible": False}}
        listed = "\n".join(
            f"- {f.name}: {f.description or ''} parameters: "
            f"{json.dumps(_parameters(f), ensure_ascii=False)}" for f in functions)
        self.instructions = (
            f"Call the function {self.name} by answering with its arguments as a JSON object."
            if self.name is not None else
            'Call one of the functions by answering {"name": ..., "parameters": {...}} in JSON.'
        ) + f"\nFunctions:\n{listed}"

    def answer(self, text: str) -> tuple[str, str]:
        """(the function called, its arguments as JSON text) from an answer.

        Raises:
            ValueError: the answer is not the JSON the schema asks for (cut off).
        """
        value = json.loads(text)
        if self.name is not None:
            if not isinstance(value, dict):
                raise ValueError(f"the arguments of {self.name} are not a JSON object")
            return self.name, json.dumps(value, ensure_ascii=False)
        if not isinstance(value, dict) or value.get("name") not in self.functions:
            raise ValueError("the answer names none of the request's functions")
        return str(value["name"]), json.dumps(value.get("parameters") or {},
                                              ensure_ascii=False)


def _parameters(function: FunctionDefinition) -> dict[str, Any]:
    return function.parameters or {"type": "object", "properties": {}}


def _bounded(schema: Any, chars: int) -> Any:
    """``schema`` with a ``maxLength`` of ``chars`` on each string it leaves unbounded,
    and numbers it leaves unbounded kept to ``chars`` digits (answers it allows are
    still valid against the schema as given)."""
    if isinstance(schema, list):
        return [_bounded(item, chars) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: (_bounded(value, chars) if key in ("items", "anyOf", "oneOf", "allOf",
                                                   "additionalProperties") else value)
           for key, value in schema.items()}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: _bounded(value, chars)
                             for name, value in out["properties"].items()}
    types = out.get("type") if isinstance(out.get("type"), list) else [out.get("type")]
    if "string" in types and "maxLength" not in out and "enum" not in out \
            and "pattern" not in out and "format" not in out:
        out["maxLength"] = chars
    if ("integer" in types or "number" in types) and "enum" not in out:
        out.setdefault("minimum", -(10 ** chars) + 1)
        out.setdefault("maximum", 10 ** chars - 1)
    return out


def function_call(tools: list[Any] | None, choice: str | None,
                  argument_max_chars: int | None = None) -> ToolCall | None:
    """The call validated ``tools`` and ``tool_choice`` ask for (:func:`tool_choice`'s
    answer), or None for a plain answer."""
    if tools is None or choice is None:
        return None
    return ToolCall([tool.function for tool in tools], choice or None, argument_max_chars)


def tool_call(body: dict[str, Any], argument_max_chars: int | None = None) -> ToolCall | None:
    """The function call a chat body asks for, or None for a plain answer.

    ``tool_choice`` ``"required"`` or ``{"type": "function", "function": {"name"}}``
    calls a function of ``tools``; ``"none"`` (or no tools) answers as plain chat.

    Raises:
        RequestError: a malformed tool or choice; ``"auto"`` (OpenAI's default when
            tools are given), which would need the model to decide in free text.
    """
    tools = function_tools(body.get("tools"))
    return function_call(tools, tool_choice(body.get("tool_choice"), tools),
                         argument_max_chars)
