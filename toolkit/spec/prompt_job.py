"""Prompt jobs: a job written as YAML (a prompt and an output shape), no Python.

The ``prompt`` section is two Jinja2 templates over the row's columns; the
``output`` section says what the answer must look like (one of a list, a regular
expression, a JSON object, or free text) and which columns it becomes. The hooks
here are the same row functions a Python job writes, so the pipeline runs both
alike. Templates run in Jinja's immutable sandbox: a job file is user input.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import ConfigDict, Field, field_validator, model_validator

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec, Regex, StrictModel
from toolkit.spec.row_contract import ERROR_COLUMN, GENERATED_TEXT_COLUMN, MESSAGES_COLUMN
from toolkit.spec.row_contract import SAMPLING_PARAMS_COLUMN, plain

_ENV = ImmutableSandboxedEnvironment(
    undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False
)
# Names the templates get besides the columns; never input columns themselves.
_CONTEXT_NAMES = frozenset({"row", "choices"}) | frozenset(_ENV.globals)
_RESERVED_COLUMNS = {ERROR_COLUMN, GENERATED_TEXT_COLUMN, MESSAGES_COLUMN, SAMPLING_PARAMS_COLUMN}
_JSON_TYPES = {"string": "string", "integer": "int64", "number": "double", "boolean": "bool"}

_TEMPLATE_HELP = (
    " Every input column is a variable ({{ review }}); `row` is the whole row, for "
    'column names that are not identifiers ({{ row["Subscription Date"] }}); `choices` '
    "is output.choice ({{ choices | join(', ') }}). A name that is not an input column "
    "is an error before any model loads, and a row where a named column is null or "
    'blank becomes an error row; read a column as row.get("notes") to make it optional.'
)


class PromptConfig(StrictModel):
    system: str | None = Field(
        None,
        description="Jinja2 template for the system message (instructions), or unset for none."
        + _TEMPLATE_HELP,
    )
    user: str = Field(
        description="Jinja2 template for the user message, rendered once per row."
        + _TEMPLATE_HELP
    )

    @field_validator("system", "user")
    @classmethod
    def _compiles(cls, source: str | None) -> str | None:
        if source is not None:
            try:
                _ENV.parse(source)
            except jinja2.TemplateSyntaxError as exc:
                raise ValueError(
                    f"template syntax error at line {exc.lineno}: {exc.message}"
                ) from None
        return source


class OutputConfig(StrictModel):
    column: str = Field(
        "result",
        description="Result column for a choice, regex or free-text answer. Not used with "
        "json_schema, where each property becomes its own column.",
    )
    choice: list[str] | None = Field(
        None,
        min_length=2,
        description="The answer must be exactly one of these (enforced while generating, "
        "so no row is wasted on an answer off the list). Short, distinct names work best.",
    )
    regex: Regex | None = Field(
        None,
        description="Regular expression the whole answer must match (enforced while "
        "generating). It fixes the answer's shape, not whether it is right.",
    )
    json_schema: dict[str, Any] | None = Field(
        None,
        description="JSON schema of an object; the answer is generated to fit it and each "
        "top-level property becomes a typed column (string, integer -> int64, number -> "
        "double, boolean -> bool; arrays and objects -> a string of compact JSON). Unset "
        "(with choice and regex unset too) means free text into `column`.",
    )

    @field_validator("choice")
    @classmethod
    def _distinct_choices(cls, choices: list[str] | None) -> list[str] | None:
        if choices is not None:
            # The answer is stripped before it is compared, so padded choices never match.
            if any(not c.strip() or c != c.strip() for c in choices):
                raise ValueError("choices must be non-empty, without leading or trailing spaces")
            if len(set(choices)) != len(choices):
                raise ValueError("choices must be distinct")
        return choices

    @field_validator("json_schema")
    @classmethod
    def _object_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            properties = schema.get("properties")
            if schema.get("type") != "object" or not isinstance(properties, dict) or not properties:
                raise ValueError("json_schema must be {type: object, properties: {...}}")
            if not all(isinstance(p, dict) for p in properties.values()):
                raise ValueError("each json_schema property must be a schema (a mapping)")
            unknown = set(schema.get("required", [])) - set(properties)
            if unknown:
                raise ValueError(f"json_schema requires undeclared properties {sorted(unknown)}")
        return schema

    @model_validator(mode="after")
    def _one_shape(self) -> OutputConfig:
        given = [k for k in ("choice", "regex", "json_schema") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of choice, regex and json_schema, not {given}")
        if self.json_schema is not None and "column" in self.model_fields_set:
            raise ValueError("column is not used with json_schema: each property is a column")
        clash = _RESERVED_COLUMNS.intersection(_columns_of(self))
        if clash:
            raise ValueError(f"result column {sorted(clash)} is reserved by the pipeline")
        return self


class PromptJobSpec(JobSpec):
    """A YAML job: the shared sections plus ``prompt`` and ``output``."""

    prompt: PromptConfig
    output: OutputConfig = Field(default_factory=OutputConfig)


class PromptJobOptions(StrictModel):
    """What the hooks receive on the workers: just the prompt and the output shape."""

    model_config = ConfigDict(frozen=True)

    prompt: PromptConfig
    output: OutputConfig


def prompt_options(spec: PromptJobSpec) -> PromptJobOptions:
    """Pick the hooks' options out of a validated prompt-job spec."""
    return PromptJobOptions(prompt=spec.prompt, output=spec.output)


# Keyed by source, so each worker process compiles a template once, and the
# options that travel to it stay plain data.
@functools.lru_cache(maxsize=64)
def _template(source: str) -> jinja2.Template:
    return _ENV.from_string(source)


@functools.lru_cache(maxsize=64)
def _named_columns(source: str) -> frozenset[str]:
    ast = _ENV.parse(source)
    names = set(jinja2.meta.find_undeclared_variables(ast)) - _CONTEXT_NAMES
    for item in ast.find_all(jinja2.nodes.Getitem):
        if (
            isinstance(item.node, jinja2.nodes.Name)
            and item.node.name == "row"
            and isinstance(item.arg, jinja2.nodes.Const)
            and isinstance(item.arg.value, str)
        ):
            names.add(item.arg.value)
    return frozenset(names)


def required_columns(options: PromptJobOptions) -> list[str]:
    """The input columns the templates name, sorted; the pipeline checks them up front."""
    sources = [options.prompt.user, options.prompt.system or ""]
    return sorted(set().union(*(_named_columns(s) for s in sources)))


def _is_blank(value: Any) -> bool:
    return (
        value is None
        or (isinstance(value, float) and math.isnan(value))
        or (isinstance(value, str) and not value.strip())
    )


def preprocess(row: dict[str, Any], options: PromptJobOptions) -> dict[str, Any]:
    """The chat messages for one row; a blank named column makes it an error row."""
    values = {k: plain(v) for k, v in row.items()}
    for name in required_columns(options):
        if name not in values:
            raise ValueError(f"column {name!r} is missing")
        if _is_blank(values[name]):
            raise ValueError(f"column {name!r} is empty")
    context = {**values, "row": values, "choices": list(options.output.choice or [])}
    messages = []
    for role, source in (("system", options.prompt.system), ("user", options.prompt.user)):
        if source is not None:
            try:
                content = _template(source).render(context)
            except jinja2.TemplateError as exc:
                raise ValueError(f"{role} template: {exc}") from None
            messages.append({"role": role, "content": content})
    return {"messages": messages}


def structured_output(options: PromptJobOptions) -> dict[str, Any] | None:
    """The constraint both engines enforce while generating, or None for free text."""
    output = options.output
    if output.choice is not None:
        return {"choice": list(output.choice)}
    if output.regex is not None:
        return {"regex": output.regex}
    if output.json_schema is not None:
        return {"json": output.json_schema}
    return None


def _property_types(schema: Mapping[str, Any]) -> tuple[str, bool]:
    """(Arrow type alias, accepts null) for one json_schema property."""
    declared = schema.get("type")
    types = declared if isinstance(declared, list) else [declared]
    concrete = [t for t in types if t != "null"]
    alias = _JSON_TYPES.get(concrete[0], "string") if len(concrete) == 1 else "string"
    return alias, "null" in types


def _columns_of(output: OutputConfig) -> dict[str, str]:
    if output.json_schema is None:
        return {output.column: "string"}
    properties = output.json_schema["properties"]
    return {name: _property_types(schema)[0] for name, schema in properties.items()}


def result_columns(options: PromptJobOptions) -> dict[str, str]:
    """The columns postprocess returns, with their Arrow types."""
    return _columns_of(options.output)


def _coerce(name: str, value: Any, alias: str) -> Any:
    try:
        if alias == "bool":
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
            if isinstance(value, bool):
                return value
        elif alias == "int64" and not isinstance(value, bool):
            if isinstance(value, int):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, str):
                return int(value.strip())
        elif alias == "double" and not isinstance(value, bool):
            return float(value)
        elif alias == "string":
            if isinstance(value, str):
                return value
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        pass
    kind = {"bool": "a boolean", "int64": "an integer", "double": "a number"}[alias]
    raise ValueError(f"property {name!r}: expected {kind}, got {value!r}")


def _parse_json(text: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"model answer is not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(answer, dict):
        raise ValueError(f"model answer is JSON but not an object: {text[:80]!r}")
    required = set(schema.get("required", []))
    columns = {}
    for name, prop in schema["properties"].items():
        alias, nullable = _property_types(prop)
        value = answer.get(name)
        if value is None and name in required and not nullable:
            raise ValueError(f"model answer lacks required property {name!r}")
        columns[name] = None if value is None else _coerce(name, value, alias)
    return columns


def postprocess(row: dict[str, Any], options: PromptJobOptions) -> dict[str, Any]:
    """The model's answer as result columns; an answer off the declared shape is an error."""
    output = options.output
    text = str(row[GENERATED_TEXT_COLUMN])
    if output.json_schema is not None:
        return _parse_json(text, output.json_schema)
    answer = text.strip()
    if output.choice is not None and answer not in output.choice:
        raise ValueError(f"model answered {answer!r}, which is not one of the choices")
    if output.regex is not None and not re.fullmatch(output.regex, answer):
        raise ValueError(f"model answered {answer!r}, which does not match {output.regex!r}")
    return {output.column: answer}


def prompt_job_definition(
    name: str,
    description: str,
    defaults: Mapping[str, Any],
    smoke_overrides: Mapping[str, Any] | None = None,
) -> JobDefinition[PromptJobOptions]:
    """The pipeline contract for a YAML prompt job named ``name``.

    ``smoke_overrides`` defaults to the tiny offline model only: a prompt job's
    columns are its own, so the generated sample rows would not fit it.
    """
    return JobDefinition(
        name=name,
        description=description,
        spec_model=PromptJobSpec,
        preprocess=preprocess,
        postprocess=postprocess,
        required_columns=required_columns,
        structured_output=structured_output,
        result_columns=result_columns,
        defaults=defaults,
        smoke_overrides=(
            {"engine.model": "sample:tiny-chat"} if smoke_overrides is None else smoke_overrides
        ),
        options_of=prompt_options,
    )

