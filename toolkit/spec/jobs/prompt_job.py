"""Prompt jobs: a job written as YAML (a prompt and an output shape), no Python.

The ``prompt`` section is two Jinja2 templates over the row's columns; the
``output`` section says what the answer must look like (one of a list, a regular
expression, a JSON object, or free text) and which columns it becomes. The hooks
here are the same row functions a Python job writes, so the pipeline runs both
alike. Templates run in Jinja's immutable sandbox with limits on output, values and
steps (:mod:`toolkit.spec.jobs.template_sandbox`): a job file is user input, and a
template that would build gigabytes or loop for hours makes error rows instead.
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
from pydantic import ConfigDict, Field, field_validator, model_validator

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.jobs.template_sandbox import (
    BOUNDED_ENV,
    RenderLimits,
    TemplateLimitError,
    render_bounded,
)
from toolkit.spec.models import JobSpec, Regex, StrictModel
from toolkit.spec.row_contract import ERROR_COLUMN, GENERATED_TEXT_COLUMN, MESSAGES_COLUMN
from toolkit.spec.row_contract import GENERATED_LOGPROB_COLUMN
from toolkit.spec.row_contract import SAMPLING_PARAMS_COLUMN, plain

_ENV = BOUNDED_ENV
#: A rendered prompt may hold engine_kwargs.max_model_len x this many characters:
#: generous (English runs about 4 characters a token), so only a prompt that could
#: never fit the model is cut short.
CHARS_PER_TOKEN_CAP = 8
#: The cap's token count when the spec sets no engine_kwargs.max_model_len.
DEFAULT_CAP_TOKENS = 131_072
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
            problems = schema_problems(schema)
            if problems:
                raise ValueError("; ".join(problems))
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


_SCHEMA_TYPES = ("string", "integer", "number", "boolean", "object", "array", "null")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains",
               "propertyNames", "additionalItems", "unevaluatedItems", "unevaluatedProperties")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def _type_problems(schema: Any, path: str) -> list[str]:
    if not isinstance(schema, dict):
        return []
    problems = []
    if "type" in schema:
        declared = schema["type"]
        for name in declared if isinstance(declared, list) else [declared]:
            if name not in _SCHEMA_TYPES:
                problems.append(f"{path}.type: {name!r} is not a JSON schema type; use one of "
                                f"{', '.join(_SCHEMA_TYPES)}")
    children: list[tuple[str, Any]] = []
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            children += [(f"{key}.{name}", sub) for name, sub in schema[key].items()]
    for key in _SUBSCHEMAS:
        items = schema.get(key)
        if isinstance(items, dict):
            children.append((key, items))
        elif isinstance(items, list):  # the older tuple form of items
            children += [(f"{key}.{i}", sub) for i, sub in enumerate(items)]
    for key in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            children += [(f"{key}.{i}", sub) for i, sub in enumerate(schema[key])]
    for where, sub in children:
        problems += _type_problems(sub, f"{path}.{where}" if path else where)
    return problems


def schema_problems(schema: dict[str, Any]) -> list[str]:
    """What is wrong with a JSON schema, checked when the job loads, not per row.

    Every ``type`` is checked by hand (for a clear message), then the whole schema
    against its JSON Schema meta-schema where ``jsonschema`` is installed (Ray
    depends on it).
    """
    problems = [p.lstrip(".") for p in _type_problems(schema, "")]
    if problems:
        return problems
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - Ray requires it
        return []
    checker = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    error = jsonschema.exceptions.best_match(checker(checker.META_SCHEMA).iter_errors(schema))
    if error is None:
        return []
    where = ".".join(str(part) for part in error.absolute_path)
    return [f"{where + ': ' if where else ''}{error.message} (not a valid JSON schema)"]


class PromptJobSettings(StrictModel):
    """A prompt job's own settings (``options:`` in its file, ``--set options.KEY=...``)."""

    max_prompt_chars: int | None = Field(
        None,
        gt=0,
        exclude_if=lambda value: value is None,  # unset: specs keep their hash
        description=(
            "Most characters a row's rendered prompt (system + user) may hold; a row past "
            "it becomes an error row at once, before it reaches the model. Unset: "
            f"engine.engine_kwargs.max_model_len x {CHARS_PER_TOKEN_CAP} (a prompt longer "
            "than that can't fit the model anyway). The template itself is also bounded "
            "(values it builds, loop steps), so a runaway template fails its rows quickly "
            "instead of hanging a worker."
        ),
    )


class PromptJobSpec(JobSpec):
    """A YAML job: the shared sections plus ``prompt`` and ``output``."""

    options: PromptJobSettings = Field(
        default_factory=PromptJobSettings, description="The prompt job's own settings.")
    prompt: PromptConfig
    output: OutputConfig = Field(default_factory=OutputConfig)


class PromptJobOptions(StrictModel):
    """What the hooks receive on the workers: the prompt, the output shape and the
    prompt's size cap (with where it comes from, for error rows)."""

    model_config = ConfigDict(frozen=True)

    prompt: PromptConfig
    output: OutputConfig
    max_prompt_chars: int = DEFAULT_CAP_TOKENS * CHARS_PER_TOKEN_CAP
    max_prompt_chars_from: str = ""


def prompt_char_cap(spec: PromptJobSpec) -> tuple[int, str]:
    """(characters a rendered prompt may hold, where that number comes from)."""
    if spec.options.max_prompt_chars is not None:
        return spec.options.max_prompt_chars, "options.max_prompt_chars"
    tokens = spec.engine.engine_kwargs.get("max_model_len")
    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
        return tokens * CHARS_PER_TOKEN_CAP, (
            f"engine.engine_kwargs.max_model_len {tokens} x {CHARS_PER_TOKEN_CAP}; "
            "options.max_prompt_chars sets another cap")
    return DEFAULT_CAP_TOKENS * CHARS_PER_TOKEN_CAP, (
        f"{DEFAULT_CAP_TOKENS:,} tokens x {CHARS_PER_TOKEN_CAP} without "
        "engine.engine_kwargs.max_model_len; options.max_prompt_chars sets another cap")


def prompt_options(spec: PromptJobSpec) -> PromptJobOptions:
    """Pick the hooks' options out of a validated prompt-job spec."""
    cap, source = prompt_char_cap(spec)
    return PromptJobOptions(prompt=spec.prompt, output=spec.output, max_prompt_chars=cap,
                            max_prompt_chars_from=source)


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
    row_text = sum(len(v) for v in values.values() if isinstance(v, str))
    used = 0
    messages = []
    for role, source in (("system", options.prompt.system), ("user", options.prompt.user)):
        if source is not None:
            limits = RenderLimits(max_chars=options.max_prompt_chars,
                                  value_chars=options.max_prompt_chars + row_text,
                                  why=options.max_prompt_chars_from, used=used)
            try:
                content = _rendered_once(source, context["choices"], limits)
                if content is None:
                    content = render_bounded(_template(source), context, limits)
            except TemplateLimitError as exc:
                raise ValueError(f"prompt.{role}: {exc}"
                                 f"{_longest_column(values, options.max_prompt_chars)}"
                                 ) from None
            except jinja2.TemplateError as exc:
                raise ValueError(f"{role} template: {exc}") from None
            used += len(content)
            messages.append({"role": role, "content": content})
    return {"messages": messages}


def _rendered_once(source: str, choices: list[str], limits: RenderLimits) -> str | None:
    """The text of a template that reads nothing of the row (a system prompt, usually):
    the same on every row, so rendered once per worker. None for any other template."""
    if not _row_free(source):
        return None
    return _row_free_text(source, tuple(choices), limits.max_chars, limits.why, limits.used)


#: What a template may read and still render the same on every row (not ``lipsum``).
_SAME_ON_EVERY_ROW = frozenset({"choices", "range", "dict", "namespace"})


@functools.lru_cache(maxsize=64)
def _row_free(source: str) -> bool:
    return jinja2.meta.find_undeclared_variables(_ENV.parse(source)) <= _SAME_ON_EVERY_ROW


@functools.lru_cache(maxsize=64)
def _row_free_text(source: str, choices: tuple[str, ...], max_chars: int, why: str,
                   used: int) -> str | None:
    """Rendered under the tightest limits a row can bring (no row text: ``value_chars``
    is ``max_chars``), so what passes here passes on every row; None where it fails, and
    each row then renders it and says why."""
    limits = RenderLimits(max_chars=max_chars, value_chars=max_chars, why=why, used=used)
    try:
        return render_bounded(_template(source), {"choices": list(choices)}, limits)
    except (TemplateLimitError, jinja2.TemplateError):
        return None


def _longest_column(values: Mapping[str, Any], cap: int) -> str:
    """Which column alone holds more than the prompt may: '' when none does."""
    sizes = {name: len(v) for name, v in values.items() if isinstance(v, str) and len(v) > cap}
    if not sizes:
        return ""
    name = max(sizes, key=sizes.__getitem__)
    return f"; column {name!r} alone is {sizes[name]:,} characters"


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
    if output.choice is not None:  # a classification: how sure the model was, too
        return {output.column: "string", confidence_column(output.column): "double"}
    if output.json_schema is None:
        return {output.column: "string"}
    properties = output.json_schema["properties"]
    return {name: _property_types(schema)[0] for name, schema in properties.items()}


def confidence_column(column: str) -> str:
    """``<column>_confidence``: the model's probability of the answer it gave."""
    return f"{column}_confidence"


def answer_confidence(row: Mapping[str, Any]) -> float | None:
    """The probability of the generated answer, from the engine's summed token
    log-probabilities (under the choice constraint's mask, so over the choices);
    None where the engine reports none (an HTTP server that sent no logprobs)."""
    logprob = row.get(GENERATED_LOGPROB_COLUMN)
    if not isinstance(logprob, (int, float)) or math.isnan(logprob):
        return None
    return min(1.0, max(0.0, math.exp(logprob)))


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
    if output.choice is not None:
        if answer not in output.choice:
            raise ValueError(f"model answered {answer!r}, which is not one of the choices")
        return {output.column: answer, confidence_column(output.column): answer_confidence(row)}
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

