"""Build a validated spec from its layers: defaults, job file, spec file, --smoke, flags, --set.

The layers are merged as plain YAML data and validated once at the end, so an
error names the final field path (``data.rows: ...``) whichever layer set it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from toolkit.errors import SpecError
from toolkit.redaction import redact
from toolkit.spec.bounded_yaml import YamlTooLarge, load_bounded
from toolkit.spec.cascade import cascade_problems
from toolkit.spec.engine_settings import other_kinds_settings
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec
from toolkit.spec.quality import StopLossConfig
from toolkit.spec.stages import stage_section_problems

# The toolkit's defaults under every job file: a user's YAML job need only say
# what it changes. The engine matches the seeds' production setup (vLLM on L4s).
TOOLKIT_DEFAULTS: dict[str, Any] = {
    "data": {"format": "auto", "output_format": "parquet"},
    "engine": {
        "kind": "vllm",
        "model": "unsloth/Llama-3.1-8B-Instruct",
        "engine_kwargs": {"max_model_len": 4096},
        "batch_size": 64,
        "concurrency": 1,
        "accelerator_type": "L4",
    },
    "sampling": {"temperature": 0.0, "max_tokens": 256},
}

# What --smoke changes for every job: our own engine on one CPU worker. Each job
# adds its sample input and tiny model through JobDefinition.smoke_overrides.
SMOKE_OVERRIDES: dict[str, Any] = {
    "engine.kind": "transformers",
    "engine.accelerator_type": None,
    "engine.concurrency": 1,
    "engine.batch_size": 64,
    "engine.num_cpus": 1,
    "data.partitions": None,
}


def smoke_stage_overrides(job: JobDefinition[Any]) -> dict[str, Any]:
    """SMOKE_OVERRIDES' engine settings for each of a multi-stage job's earlier stages
    (``stages.NAME.kind``...): every stage on one CPU worker."""
    return {f"stages.{stage.name}.{dotted.removeprefix('engine.')}": value
            for stage in job.earlier_stages
            for dotted, value in SMOKE_OVERRIDES.items() if dotted.startswith("engine.")}


#: A job or spec file is a few KB; anything near this is not one.
MAX_YAML_FILE_BYTES = 4 << 20
#: Levels a dotted key (``--set a.b.c=1``, a job file's ``smoke:`` keys) may have.
MAX_KEY_DEPTH = 32


def read_yaml_file(path: Path, what: str = "Spec file") -> dict[str, Any]:
    """Read a YAML mapping, turning every failure into one clear SpecError.

    Bounded (:mod:`toolkit.spec.bounded_yaml`): aliases that expand past 100,000
    values, nesting past 64 levels and files over 4 MiB are refused, naming the file.
    """
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"{what} {path} is a directory, not a {what.lower()}.",
                        hint="Name a YAML file (my-spec.yaml), not a folder.")
    try:
        size = path.stat().st_size
        if size > MAX_YAML_FILE_BYTES:
            raise SpecError(f"{what} {path} is {size / (1 << 20):,.0f} MiB; a {what.lower()} "
                            "is a few KB of YAML.", hint="Check that this is the file you meant.")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{what} {path} does not exist.", hint="Check the path.")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start}).")
    except OSError as exc:
        raise SpecError(f"Cannot read {what.lower()} {path}: {exc.strerror}.")
    try:
        data = load_bounded(text)
    except YamlTooLarge as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise SpecError(
            f"{what} {path} is refused: {exc.problem}{where}.",
            hint="YAML aliases repeat a value by reference, and nested ones multiply "
            "('billion laughs'); write the values out, or use fewer aliases and levels.",
        ) from None
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(
            f"{what} {path} is not valid YAML{where}: {problem}.",
            hint="Indent nested keys with spaces and quote values that contain ': '.",
        )
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(
            f"{what} {path} must hold a mapping of sections (data:, engine:, ...), "
            f"not a {type(data).__name__}."
        )
    return data


def set_dotted(target: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in nested dicts, creating the intermediate mappings.

    Raises:
        SpecError: the key has more than :data:`MAX_KEY_DEPTH` levels.
    """
    keys = dotted.split(".")
    if len(keys) > MAX_KEY_DEPTH:
        raise SpecError(
            f"Key {_shorten(dotted)} has {len(keys):,} levels; spec keys have at most "
            f"{MAX_KEY_DEPTH} (e.g. engine.engine_kwargs.max_model_len).",
            hint="'toolkit show JOB' lists every key.")
    node = target
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


def parse_set_expression(expression: str) -> tuple[str, Any]:
    """``engine.batch_size=64`` -> ``("engine.batch_size", 64)``; values are YAML scalars."""
    path, sep, raw = expression.partition("=")
    path = path.strip()
    if path.count(".") >= MAX_KEY_DEPTH:
        raise SpecError(
            f"--set {_shorten(path)}=...: the key has {path.count('.') + 1:,} levels; spec "
            f"keys have at most {MAX_KEY_DEPTH} (e.g. engine.engine_kwargs.max_model_len).",
            hint="For example: --set engine.batch_size=64 ('toolkit show JOB' lists every key).",
        )
    if not sep or not path or any(not part for part in path.split(".")):
        raise SpecError(
            f"--set {expression!r} is not of the form section.key=value.",
            hint="For example: --set engine.batch_size=64 --set sampling.temperature=0.2",
        )
    try:
        value = load_bounded(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return path, value


def _shorten(key: str, keep: int = 40) -> str:
    return key if len(key) <= keep else f"{key[:keep]}... ({len(key):,} characters)"


def deep_merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Overlay mappings recursively; lists and scalars in ``overlay`` replace."""
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def format_validation_error(error: ValidationError, source: str) -> str:
    """One line per problem, as ``field.path: message``."""
    lines = [f"Invalid spec for {source}:"]
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key (check the spelling; 'toolkit show JOB' lists every key)"
        elif item["type"] == "missing":
            message = "required, but not set"
        elif "input" in item and item["type"] not in ("value_error",):
            message = f"{message} (got {item['input']!r})"
        lines.append(f"  {path}: {message}")
    return "\n".join(lines)


def validate_spec(job: JobDefinition[Any], data: Mapping[str, Any], source: str) -> JobSpec:
    hint = (f"Fix the fields above in the job file, spec file, flags or --set values "
            f"('toolkit show {job.name}' prints every key with its value).")
    problems = stage_section_problems(job.earlier_stages, data.get("stages"), job.name)
    if problems:
        raise SpecError("\n".join([f"Invalid spec for {source}:", *problems]), hint=hint)
    try:
        spec = job.spec_model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(
            format_validation_error(exc, source), hint=hint,
        ) from None
    check_user_classes(job, spec)
    if spec.cascade is not None:
        from toolkit.spec.row_contract import TASK_CONTRACTS

        problems = cascade_problems(
            spec.cascade, spec.engine, job.name,
            job.main_stage.result_columns(job.options_of(spec)),
            chat=TASK_CONTRACTS[spec.engine.task].chat)
        if problems:
            raise SpecError("\n".join([f"Invalid spec for {source}:", *problems]), hint=hint)
    return spec


def check_user_classes(job: JobDefinition[Any], spec: JobSpec) -> None:
    """Every class the spec names (``model`` of an ``engine.kind: python`` section) is
    the user's own, checked before anything is imported from it.

    Raises:
        SpecError: naming the reference and what a job may name.
    """
    import sys

    from toolkit.spec.jobs.user_classes import check_user_class

    module = sys.modules.get(job.main_stage.preprocess.__module__)
    if module is not None and module.__name__.startswith("toolkit."):
        module = None  # the toolkit's own job code (a predictor or prompt job), not the user's
    projects = [Path.cwd(), *([job.source_dir] if job.source_dir is not None else [])]
    for field, engine in spec.model_stages:
        if engine.user_class is not None:
            check_user_class(engine.user_class, f"{field}.model", projects=projects,
                             job_module=module)


def load_job_spec(
    job: JobDefinition[Any],
    spec_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    sets: Sequence[str] = (),
    smoke: bool = False,
) -> JobSpec:
    """Load a job's spec: defaults -> the job's own -> ``spec_file`` -> smoke -> flags -> ``sets``.

    Args:
        job: The job whose defaults and spec model to use.
        spec_file: A YAML file with the whole spec or just the keys to change.
        overrides: Dotted paths from CLI flags, only those the user gave
            (e.g. ``{"data.rows": "1M"}``); ``None`` values are ignored.
        sets: ``section.key=value`` strings from ``--set``, applied last.
        smoke: Use generated input and a tiny model on one CPU worker.

    Returns:
        The validated spec, an instance of ``job.spec_model``.

    Raises:
        SpecError: any layer is unreadable or the result does not validate;
            the message lists every ``field.path: problem``.
    """
    data = deep_merge(TOOLKIT_DEFAULTS, job.defaults)
    data.setdefault("data", {}).setdefault("output", f"out/{job.name}")
    sources = [f"job {job.name}"]
    if spec_file is not None:
        data = deep_merge(data, read_yaml_file(spec_file))
        sources.append(str(spec_file))
        if data.get("job", job.name) != job.name:
            raise SpecError(
                f"Spec file {spec_file} is for job {data['job']!r}, not {job.name!r}.",
                hint=f"Run 'toolkit run {data['job']} -f {spec_file}' instead.",
            )
    if smoke:
        for dotted, value in {**SMOKE_OVERRIDES, **smoke_stage_overrides(job),
                              **job.smoke_overrides}.items():
            set_dotted(data, dotted, value)
        # Another engine now: settings only the one before takes (vLLM's kv_cache_gib,
        # ...) go with it.
        for section in (data.get("engine"), *(data.get("stages") or {}).values()):
            if isinstance(section, dict):
                for key in other_kinds_settings(section):
                    del section[key]
    for dotted, value in (overrides or {}).items():
        if value is not None:
            set_dotted(data, dotted, value)
    for expression in sets:
        set_dotted(data, *parse_set_expression(expression))
    data["job"] = job.name
    if job.complete_spec is not None:
        job.complete_spec(data, smoke)
    if overrides or sets:
        sources.append("flags")
    spec = validate_spec(job, data, source=" + ".join(sources))
    if smoke and "stop_loss" not in data and free_text_answers(job, spec):
        # The random-weight model never ends a free-text answer, so every one is cut
        # off at max_tokens: a smoke run of such a job proves the pipeline, not answers.
        spec = spec.model_copy(update={"stop_loss": StopLossConfig(failure_rate=None)})
    return spec


def free_text_answers(job: JobDefinition[Any], spec: JobSpec) -> bool:
    """Whether the job's last stage generates text with no shape to keep to (no choice,
    regex or JSON schema)."""
    from toolkit.spec.row_contract import TASK_CONTRACTS

    return (TASK_CONTRACTS[spec.engine.task].chat
            and job.main_stage.structured_output(job.options_of(spec)) is None)


def spec_to_yaml(spec: JobSpec) -> str:
    """The full effective spec as YAML: the job's own sections first, then the shared ones.

    For people (``toolkit show``): credentials in its URLs are redacted.
    """
    dumped = redact(spec.model_dump(mode="json"))
    shared = ("options", *(name for name in JobSpec.model_fields if name not in ("job", "options")))
    ordered = {"job": dumped.pop("job")}
    ordered.update({k: v for k, v in dumped.items() if k not in shared})
    if dumped.get("options"):
        ordered["options"] = dumped["options"]
    ordered.update({k: dumped[k] for k in shared if k != "options" and k in dumped})
    return yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True, width=100)


def read_spec_file(job: JobDefinition[Any], path: Path) -> JobSpec:
    """Load a serialised spec (JSON or YAML) as it is: no defaults are added."""
    path = Path(path)
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SpecError(f"Spec file {path} does not exist.")
        except json.JSONDecodeError as exc:
            raise SpecError(f"Spec file {path} is not valid JSON: {exc}.")
    else:
        data = read_yaml_file(path)
    return validate_spec(job, data, source=str(path))
