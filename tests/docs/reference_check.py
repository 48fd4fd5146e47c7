"""What the code offers a user against what the docs say it offers, both ways.

From the code: every option of every ``toolkit`` command (the click tree of
``toolkit.cli.main:main``), every exit code (the :class:`~toolkit.errors.ToolkitError`
family and the CLI's own ``sys.exit``/``SystemExit`` codes), every ``TOOLKIT_*``
environment variable the code reads (AST: ``environ.get``/``getenv``/``environ[...]``/
``in environ`` and click's ``envvar=``) and every spec key a user sets (the pydantic
models' field paths, every engine kind's settings under ``engine.``).

From the docs (README.md, docs/*.md): the ``toolkit CMD ... --flag`` lines they show
(fenced blocks and inline code), the flags listed under a heading that names
``toolkit CMD`` (the reference page's sections), every exit-code table
(``| code | meaning |``), every ``TOOLKIT_*`` name and every dotted spec key in inline
code.

Each check returns problems as lines naming the item and where to fix it, so a test
asserts an empty list and shows what is missing. The functions take their inputs
(pages, a click command, a set of codes), so a test can hand them made-up ones.
"""

from __future__ import annotations

import ast
import re
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

CHECKOUT = Path(__file__).resolve().parents[2]
REFERENCE = "docs/reference.md"
HELP_FLAGS = {"-h", "--help"}

Command = tuple[str, ...]  # ("toolkit", "samples", "customers")


@dataclass(frozen=True)
class Page:
    name: str  # as the messages name it: README.md, docs/x.md
    text: str


def doc_pages(root: Path = CHECKOUT) -> list[Page]:
    paths = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return [Page(str(path.relative_to(root)), path.read_text()) for path in paths]


def show(command: Command) -> str:
    return " ".join(command)


# --- the code -----------------------------------------------------------------------

def command_tree(root: click.Command, name: str = "toolkit") -> dict[Command, click.Command]:
    """Every command and group under ``root``, by its words."""
    found: dict[Command, click.Command] = {}

    def walk(command: click.Command, path: Command) -> None:
        found[path] = command
        if isinstance(command, click.Group):
            for sub_name, sub in command.commands.items():
                walk(sub, (*path, sub_name))

    walk(root, (name,))
    return found


def command_flags(root: click.Command) -> dict[Command, set[str]]:
    """Every command's option spellings (``-f``, ``--file``, ``--no-wait``), help left out."""
    return {path: {opt for param in command.params if isinstance(param, click.Option)
                   for opt in (*param.opts, *param.secondary_opts)} - HELP_FLAGS
            for path, command in command_tree(root).items()}


def error_exit_codes(base: type) -> set[int]:
    """The exit codes of ``base`` and every subclass of it."""
    codes, todo = set(), [base]
    while todo:
        cls = todo.pop()
        codes.add(cls.exit_code)
        todo += cls.__subclasses__()
    return codes


def python_files(package: Path) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(package.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def literal_exit_codes(modules: Iterable[tuple[Path, ast.Module]]) -> set[int]:
    """Codes a module exits with directly: ``sys.exit(N)``, ``raise SystemExit(N)``."""
    codes = set()
    for _, tree in modules:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, int)
                    and ast.unparse(node.func) in ("sys.exit", "SystemExit", "exit")):
                codes.add(node.args[0].value)
    return codes


def code_exit_codes(package: Path = CHECKOUT / "toolkit") -> set[int]:
    from toolkit.errors import ToolkitError

    return {0} | error_exit_codes(ToolkitError) | literal_exit_codes(python_files(package))


ENV_NAME = re.compile(r"TOOLKIT_[A-Z0-9_]*[A-Z0-9]")


def read_env_names(modules: Iterable[tuple[Path, ast.Module]]) -> dict[str, str]:
    """``TOOLKIT_*`` variables the code reads -> where (``path:line``).

    A read is ``X.get(NAME)``/``X.pop(NAME)``/``X[NAME]``/``NAME in X`` where X names
    an ``environ``, ``os.getenv(NAME)``, or click's ``envvar=NAME``; NAME is the string
    or a module constant holding it (``API_KEY_ENV = "TOOLKIT_API_KEY"``).
    """
    modules = list(modules)
    constants: dict[str, str] = {}
    for _, tree in modules:
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str) and ENV_NAME.fullmatch(node.value.value)):
                constants.update({target.id: node.value.value for target in node.targets
                                  if isinstance(target, ast.Name)})

    def name_of(node: ast.AST | None) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value if ENV_NAME.fullmatch(node.value) else None
        if isinstance(node, (ast.Name, ast.Attribute)):
            return constants.get(node.id if isinstance(node, ast.Name) else node.attr)
        return None

    def environ(node: ast.AST) -> bool:
        return "environ" in ast.unparse(node)

    found: dict[str, str] = {}
    for path, tree in modules:
        for node in ast.walk(tree):
            names: list[str | None] = []
            if isinstance(node, ast.Call):
                func = node.func
                first = node.args[0] if node.args else None
                if isinstance(func, ast.Attribute) and func.attr in ("get", "pop") and environ(func.value):
                    names.append(name_of(first))
                if ast.unparse(func) in ("os.getenv", "getenv"):
                    names.append(name_of(first))
                names += [name_of(kw.value) for kw in node.keywords if kw.arg == "envvar"]
            elif isinstance(node, ast.Subscript) and environ(node.value):
                names.append(name_of(node.slice))
            elif isinstance(node, ast.Compare) and any(environ(c) for c in node.comparators):
                names.append(name_of(node.left))
            for name in filter(None, names):
                found.setdefault(name, f"{path.relative_to(CHECKOUT)}:{node.lineno}")
    return found


def code_env_names(package: Path = CHECKOUT / "toolkit") -> dict[str, str]:
    return read_env_names(python_files(package))


def models_in(annotation: Any) -> list[type]:
    """The pydantic models an annotation holds as values (not a dict's or list's items:
    ``stages`` and ``engine_kwargs`` are maps a user names the keys of)."""
    from pydantic import BaseModel

    origin = typing.get_origin(annotation)
    if origin is None:
        return [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []
    if origin in (dict, list, tuple, set):
        return []
    return [model for arg in typing.get_args(annotation) for model in models_in(arg)]


def spec_keys(model: type, engine_models: Iterable[type], prefix: str = "") -> set[str]:
    """Every field path of ``model``; an engine section's are those of every engine kind."""
    from toolkit.spec.engine_settings import EngineSettings

    engine_models = list(engine_models)
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        keys.add(path)
        for sub in models_in(info.annotation):
            for each in (engine_models if issubclass(sub, EngineSettings) else [sub]):
                keys |= spec_keys(each, engine_models, path + ".")
    return keys


def code_spec_keys() -> set[str]:
    """The keys users set: every built-in job's spec model and a YAML job's (prompt or
    ``predictor:``), their ``options`` included,
    with every engine kind's settings under ``engine.``, ``stages.NAME.`` and
    ``cascade.`` left as the section name (``stages`` is a map of engine sections)."""
    from toolkit.spec.engine_catalog import engine_catalog
    from toolkit.spec.jobs.catalog import builtin_jobs, load_job

    from toolkit.spec.jobs.predictor_job import PredictorJobSpec
    from toolkit.spec.jobs.prompt_job import PromptJobSpec

    engines = [kind.settings for kind in engine_catalog().kinds().values()]
    models = {load_job(ref).spec_model for ref in builtin_jobs()} | {PromptJobSpec, PredictorJobSpec}
    keys: set[str] = set()
    for model in models:
        keys |= spec_keys(model, engines)
    return keys


# --- the docs -----------------------------------------------------------------------

FENCE = re.compile(r"^\s*```")
HEADING = re.compile(r"^#{1,6}\s")
INLINE = re.compile(r"`([^`\n]+)`")
TOOLKIT_WORD = re.compile(r"(?<![\w./$-])toolkit(?=\s+[-\w])")
FLAG = re.compile(r"^--?[A-Za-z][\w-]*$")
NAME = re.compile(r"[a-z][a-z0-9-]*")  # anything else (COMMAND, run's) is no command's name
SECTION_GLUE = re.compile(r"^[\s,/&]*(?:(?:and|or)[\s,/&]+)?$")
CUT = re.compile(r"\s(?:\||&&|;|#|>|2>)|\s\|")


@dataclass(frozen=True)
class Shown:
    """A ``toolkit ...`` command line a page shows."""

    where: str  # page:line
    words: tuple[str, ...]  # after "toolkit", cut at a pipe, `&&`, `;` or a comment


def page_lines(page: Page) -> Iterator[tuple[int, str, bool]]:
    """Each line with its number and whether it is inside a fenced block."""
    fenced = False
    for number, line in enumerate(page.text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        yield number, line, fenced


def logical_lines(page: Page) -> Iterator[tuple[int, str, bool]]:
    """:func:`page_lines` with a fenced line ending in ``\\`` joined to the next."""
    held: tuple[int, str] | None = None
    for number, line, fenced in page_lines(page):
        if held:
            number, line = held[0], held[1] + " " + line.strip()
            held = None
        if fenced and line.rstrip().endswith("\\"):
            held = (number, line.rstrip()[:-1])
            continue
        yield number, line, fenced


def shown_commands(page: Page) -> list[Shown]:
    """Every ``toolkit ...`` a page shows: in its fenced blocks (commands, console
    transcripts, what they print) and in its inline code."""
    found = []
    for number, line, fenced in logical_lines(page):
        texts = [line.removeprefix("$ ")] if fenced else INLINE.findall(line)
        for text in texts:
            for start in TOOLKIT_WORD.finditer(text):
                rest = text[start.end():]
                cut = CUT.search(rest)
                words = (rest[:cut.start()] if cut else rest).split()
                words = [word.strip("[](){},'\"`") for word in words]
                found.append(Shown(f"{page.name}:{number}", tuple(w for w in words if w)))
    return found


def resolve(shown: Shown, tree: Mapping[Command, click.Command]) -> tuple[Command | None, list[str]]:
    """The command a shown line runs and the flags it gives it; None for a line whose
    command is a placeholder (``toolkit COMMAND --help``)."""
    command: Command = ("toolkit",)
    words = list(shown.words)
    while words and isinstance(tree[command], click.Group) and not words[0].startswith("-"):
        if (*command, words[0]) not in tree:
            return ((*command, words[0]), []) if NAME.fullmatch(words[0]) else (None, [])
        command = (*command, words.pop(0))
    flags = [word.split("=", 1)[0] for word in words]
    return command, [flag for flag in flags if FLAG.match(flag)]


def section_commands(heading: str, tree: Mapping[Command, click.Command]) -> list[Command]:
    """The commands a heading is about: one made of ``toolkit CMD`` spans alone (and
    commas, ``and``), whatever follows a colon (``### `toolkit run`: flags``)."""
    title = heading.lstrip("#").split(":", 1)[0]
    spans = [span for span in INLINE.findall(title) if span.split()[:1] == ["toolkit"]]
    if not spans or not SECTION_GLUE.match(INLINE.sub(" ", title)):
        return []
    named = [resolve(Shown("", tuple(span.split()[1:])), tree)[0] for span in spans]
    return [command for command in named if command in tree]


def section_flags(page: Page, tree: Mapping[Command, click.Command]) -> dict[Command, dict[str, str]]:
    """Flags a page lists under a heading about ``toolkit CMD`` (one or several, see
    :func:`section_commands`): each inline code span outside fenced blocks that starts
    with a flag, up to the next heading. command -> flag -> where."""
    found: dict[Command, dict[str, str]] = {}
    commands: list[Command] = []
    for number, line, fenced in page_lines(page):
        if fenced:
            continue
        if HEADING.match(line):
            commands = section_commands(line, tree)
            continue
        for span in INLINE.findall(line):
            first = span.split()[0].split("=", 1)[0].rstrip(",")
            if FLAG.match(first):
                for command in commands:
                    found.setdefault(command, {})[first] = f"{page.name}:{number}"
    return found


def check_flags(pages: Iterable[Page], root: click.Command) -> list[str]:
    """Every flag of every command named in the docs for that command, and every flag
    the docs give a command one it has."""
    tree, flags = command_tree(root), command_flags(root)
    problems, documented = [], {command: set() for command in tree}
    for page in pages:
        for shown in shown_commands(page):
            command, given = resolve(shown, tree)
            if command is None:
                continue
            if command not in tree:
                problems.append(f"{shown.where}: there is no command `{show(command)}`")
                continue
            for flag in given:
                if flag in flags[command] or flag in HELP_FLAGS:
                    documented[command].add(flag)
                else:
                    problems.append(f"{shown.where}: `{show(command)}` has no flag {flag}")
        for command, listed in section_flags(page, tree).items():
            for flag, where in listed.items():
                if flag in flags[command] or flag in HELP_FLAGS:
                    documented[command].add(flag)
                else:
                    problems.append(f"{where}: `{show(command)}` has no flag {flag}, "
                                    "but its section lists it")
    for command in sorted(tree):
        for flag in sorted(flags[command] - documented[command]):
            problems.append(f"`{show(command)} {flag}` is in no doc: list it in {REFERENCE}'s "
                            f"section `{show(command)}`")
    return problems


TABLE_HEAD = re.compile(r"^\|\s*code\s*\|", re.IGNORECASE)
TABLE_ROW = re.compile(r"^\|\s*`?(\d+)`?\s*\|")
RST_ROW = re.compile(r"^(\d+)\s{2,}\S")


def exit_code_tables(pages: Iterable[Page]) -> dict[str, set[int]]:
    """Each ``| code | ... |`` table of the pages: where it starts -> the codes it lists."""
    tables: dict[str, set[int]] = {}
    for page in pages:
        current: set[int] | None = None
        for number, line, fenced in page_lines(page):
            if not fenced and TABLE_HEAD.match(line):
                current = tables.setdefault(f"{page.name}:{number}", set())
            elif current is not None and line.startswith("|"):
                row = TABLE_ROW.match(line)
                if row:
                    current.add(int(row.group(1)))
            else:
                current = None
    return tables


def rst_exit_codes(text: str) -> set[int]:
    """The codes of an RST table's rows (``toolkit/errors.py``'s docstring)."""
    return {int(row.group(1)) for line in text.splitlines() if (row := RST_ROW.match(line))}


MENTIONED_CODE = re.compile(r"\bexit code (\d+)\b", re.IGNORECASE)


def mentioned_codes(pages: Iterable[Page]) -> dict[str, set[int]]:
    """The codes each page names in its text, outside tables ("exit code 1: ...")."""
    return {page.name: {int(code) for _, line, _ in page_lines(page) if not line.startswith("|")
                        for code in MENTIONED_CODE.findall(line)} for page in pages}


def check_exit_codes(tables: Mapping[str, set[int]], codes: set[int],
                     mentioned: Mapping[str, set[int]] | None = None) -> list[str]:
    """Every exit-code table lists every code there is and no other. A table on a page
    other than the reference may leave out a code its page names in its text
    (``mentioned``: docs/errors.md's table is the error family's, and code 1 is said
    below it)."""
    if not tables:
        return [f"no exit-code table (`| code | meaning |`) in the docs: add one to {REFERENCE}"]
    problems = []
    for where, listed in tables.items():
        page = where.rsplit(":", 1)[0]
        excused = set() if page == REFERENCE else (mentioned or {}).get(page, set())
        problems += [f"{where}: exit code {code} is missing from this table"
                     for code in sorted(codes - listed - excused)]
        problems += [f"{where}: exit code {code} is listed, but nothing exits with it"
                     for code in sorted(listed - codes)]
    return problems


def check_env_names(pages: Iterable[Page], read: Mapping[str, str]) -> list[str]:
    """Every ``TOOLKIT_*`` variable the code reads is named in the docs; every one the
    docs name is read."""
    named: dict[str, str] = {}
    for page in pages:
        for number, line, _ in page_lines(page):
            for name in ENV_NAME.findall(line):
                named.setdefault(name, f"{page.name}:{number}")
    problems = [f"{where}: {name} is named, but the code reads no such variable"
                for name, where in sorted(named.items()) if name not in read]
    problems += [f"{name} (read at {where}) is in no doc: add it to {REFERENCE}'s environment "
                 "variables" for name, where in sorted(read.items()) if name not in named]
    return problems


SPEC_ROOTS = ("data", "engine", "sampling", "compute", "checks", "stop_loss", "cascade",
              "stages", "options", "output", "prompt")
SPEC_KEY = re.compile(r"^(?:--set\s+)?((?:%s)\.[a-z_][a-z0-9_.]*[a-z0-9_])(?:[=:\s]|$)" % "|".join(SPEC_ROOTS))


def doc_spec_keys(pages: Iterable[Page]) -> dict[str, str]:
    """Dotted spec keys the docs name in inline code or after ``--set``: key -> where."""
    named: dict[str, str] = {}
    for page in pages:
        for number, line, fenced in logical_lines(page):
            spans = [part for part in re.split(r"--set[ =]", line)[1:]] if fenced else INLINE.findall(line)
            for span in spans:
                key = SPEC_KEY.match(span.strip().strip("'\""))
                if key:
                    named.setdefault(key.group(1), f"{page.name}:{number}")
    return named


def known_key(key: str, keys: set[str]) -> bool:
    """``key`` is a spec key, or inside a map a user names the keys of
    (``engine.engine_kwargs.max_model_len``, ``stages.sentiment.model``)."""
    parts = key.split(".")
    if parts[0] == "stages" and len(parts) > 2:
        return known_key(".".join(["engine", *parts[2:]]), keys)
    return any(".".join(parts[:n]) in keys and (n == len(parts) or typed_map(".".join(parts[:n])))
               for n in range(len(parts), 0, -1))


def typed_map(key: str) -> bool:
    """Keys whose value is a map of the user's own keys."""
    return key.rsplit(".", 1)[-1] in ("engine_kwargs", "chat_template_kwargs", "headers_from_env",
                                      "stages", "json_schema")


def check_spec_keys(pages: Iterable[Page], keys: set[str],
                    shown_wrong: Iterable[str] = ()) -> list[str]:
    """Every spec key (``stages.NAME.*`` aside: they are ``engine.*``'s) is named in the
    docs; every dotted key the docs name exists, but for ``shown_wrong`` (a page showing
    what a typo gets)."""
    pages = list(pages)
    named = {key: where for key, where in doc_spec_keys(pages).items() if key not in shown_wrong}
    text = "\n".join(page.text for page in pages)
    problems = [f"{where}: `{key}` is not a spec key" for key, where in sorted(named.items())
                if not known_key(key, keys)]
    for key in sorted(keys):
        if key.startswith("stages.") or (key in text and re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", text)):
            continue
        problems.append(f"spec key `{key}` is in no doc: add it to {REFERENCE}'s settings")
    return problems
