"""Which classes a job may name: the user's own, never whatever happens to be importable.

A job names a class for its model stage (``predictor: scorer.py:Scorer`` in a YAML
job, which is ``engine.model`` of ``engine.kind: python``). The toolkit constructs
it with the job's ``init_kwargs`` and calls it, so a YAML job, which is data, could
otherwise run any code on the machine (``predictor: subprocess:Popen`` with
``init_kwargs: {args: [...]}``). :func:`check_user_class` allows only:

- a class in a ``.py`` file of the user's project: inside the job file's folder
  (or the folder the command runs from), not in a hidden folder (``.venv``,
  ``.toolkit``), ``site-packages`` or a Python environment kept there (a folder
  with ``pyvenv.cfg`` or ``conda-meta``); ``module:Class`` counts when the
  module's file is such a file (``my_package/models.py`` in the project);
- a class in a module that the user's own Python job file imports (its code is
  the user's already);

and the class must define ``__call__`` in its own body (inheriting it, as every
class inherits ``type.__call__``, doesn't count). Files are checked by reading
their source (``ast``), before anything is imported from them; only a module the
user's job already imported is looked at as a live object.
"""

from __future__ import annotations

import ast
import importlib.machinery
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from toolkit.errors import SpecError

#: Folders inside a project whose files are not the project's code.
_NOT_PROJECT_CODE = ("site-packages", "dist-packages", "node_modules", "__pycache__")

ALLOWED = ("a class defined in a .py file of your project, next to the job file or "
           "below it (my_model.py:MyPredictor, or my_package.models:MyPredictor for "
           "my_package/models.py), or in a module your Python job file imports, with "
           "its own __call__(batch)")


def check_user_class(reference: str, field: str, *, base: Path | None = None,
                     projects: Sequence[Path] = (),
                     job_module: ModuleType | None = None) -> str:
    """Refuse a class reference that names anything but the user's own class.

    Args:
        reference: ``path/to/file.py:Class`` or ``package.module:Class``.
        field: The setting that named it, for messages (``engine.model``).
        base: What a relative file path is relative to (default: the current folder).
        projects: The folders whose code is the user's (default: ``[base]``).
        job_module: The user's Python job module, whose imports are the user's too.

    Returns:
        The reference, a file path in it made relative to the current folder
        (absolute when outside it), which is how the model stage finds it.

    Raises:
        SpecError: (exit code 2) naming the reference and what is allowed.
    """
    base = Path.cwd() if base is None else Path(base)
    roots = [Path(p).resolve() for p in (projects or [base])]
    where, sep, name = reference.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise SpecError(f"{field}: {reference!r} does not name a predictor class.",
                        hint="Write it as my_model.py:MyPredictor or "
                        "my_package.models:MyPredictor.")
    if where.endswith(".py"):
        path = Path(where).expanduser()
        path = path if path.is_absolute() else base / path
        if not path.is_file():
            raise SpecError(f"{field}: predictor file {where} does not exist "
                            f"(looked in {base}).",
                            hint="A path is relative to the job file's folder (to the "
                            "folder you run from when given as a flag).")
        source = path.resolve()
        if not _in_project(source, roots):
            raise _refused(reference, field, roots)
        _check_class_source(source, where, name, field)
        return f"{_shown(source)}:{name}"
    if not all(part.isidentifier() for part in where.split(".")):
        raise SpecError(f"{field}: {reference!r} does not name a predictor class.",
                        hint="Write it as my_model.py:MyPredictor or "
                        "my_package.models:MyPredictor.")
    source = _module_source(where, roots)
    if source is not None:
        _check_class_source(source, where, name, field)
        return reference
    module = _imported_by(job_module, where)
    if module is None:
        raise _refused(reference, field, roots)
    predictor = getattr(module, name, None)
    if not isinstance(predictor, type):
        raise SpecError(f"{field}: {where} has no class {name!r} with __call__(batch).")
    if "__call__" not in vars(predictor):
        raise _inherits_call(where, name, field)
    return reference


def _refused(reference: str, field: str, roots: list[Path]) -> SpecError:
    return SpecError(
        f"{field}: {reference} is not a class of your project, so the toolkit won't "
        f"construct or call it. A job may name only {ALLOWED}.",
        hint=f"Your project here is {', '.join(str(r) for r in roots)}. Write your own "
        "class there (it may wrap a library's model), e.g. scorer.py defining "
        "class Scorer with __init__(**init_kwargs) and __call__(batch).",
    )


def _inherits_call(where: str, name: str, field: str) -> SpecError:
    return SpecError(
        f"{field}: class {name} in {where} does not define __call__(batch) itself; "
        f"a job may name only {ALLOWED}.",
        hint=f"Add def __call__(self, batch) to class {name} (it may call "
        "super().__call__(batch)).",
    )


def _in_project(source: Path, roots: list[Path]) -> bool:
    """``source`` lies in a root, outside hidden folders, installed packages and Python
    environments kept in the project (a virtualenv's ``pyvenv.cfg``, ``conda-meta``)."""
    for root in roots:
        try:
            parts = source.relative_to(root).parts
        except ValueError:
            continue
        if any(part.startswith(".") or part in _NOT_PROJECT_CODE for part in parts):
            continue
        folders = [root.joinpath(*parts[:i]) for i in range(len(parts))]
        if not any((f / "pyvenv.cfg").is_file() or (f / "conda-meta").is_dir() for f in folders):
            return True
    return False


def _shown(source: Path) -> str:
    try:
        return source.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(source)


def _module_source(module: str, roots: list[Path]) -> Path | None:
    """The project file that ``module`` (dotted) is, found without importing anything."""
    parts = module.split(".")
    tops: list[Path] = [root for root in roots] + [root / "src" for root in roots]
    spec = importlib.machinery.PathFinder.find_spec(parts[0])  # searches sys.path, imports nothing
    if spec is not None and spec.origin not in (None, "built-in", "frozen"):
        origin = Path(spec.origin)
        tops.append(origin.parent.parent if origin.name == "__init__.py" else origin.parent)
    for top in tops:
        for candidate in (top.joinpath(*parts).with_suffix(".py"),
                          top.joinpath(*parts, "__init__.py")):
            if candidate.is_file() and _in_project(candidate.resolve(), roots):
                return candidate.resolve()
    return None


def _imported_by(job_module: ModuleType | None, module: str) -> ModuleType | None:
    """``module``, if the user's job module imported it (or something from it)."""
    if job_module is None or module not in sys.modules:
        return None
    for value in vars(job_module).values():
        if isinstance(value, ModuleType):
            if value.__name__ == module or module.startswith(f"{value.__name__}."):
                return sys.modules[module]
        elif getattr(value, "__module__", None) == module:
            return sys.modules[module]
    return None


def _check_class_source(source: Path, where: str, name: str, field: str) -> None:
    """``class name`` is defined at the top of ``source``, with ``__call__`` in its body."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise SpecError(f"{field}: can't read {where}: {exc}") from None
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name]
    if not classes:
        raise SpecError(f"{field}: {where} has no class {name!r} with __call__(batch).")
    body = classes[-1].body
    if not any(_defines_call(statement) for statement in body):
        raise _inherits_call(where, name, field)


def _defines_call(statement: ast.stmt) -> bool:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return statement.name == "__call__"
    if isinstance(statement, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "__call__" for t in statement.targets)
    if isinstance(statement, ast.AnnAssign):
        return isinstance(statement.target, ast.Name) and statement.target.id == "__call__"
    return False


def check_user_function(reference: str, field: str, *, base: Path,
                        projects: Sequence[Path]) -> Path:
    """A function a job names (``checks.custom: my_checks.py:plausible``) is a top-level
    ``def`` in a ``.py`` file of the user's project, checked by reading its source.

    Returns:
        The file, resolved (relative paths are relative to ``base``).

    Raises:
        SpecError: (exit code 2) naming the reference and what is allowed.
    """
    where, sep, name = reference.rpartition(":")
    if not sep or not where.endswith(".py") or not name.isidentifier():
        raise SpecError(f"{field}: {reference!r} does not name a function in a .py file.",
                        hint="Write it as my_checks.py:plausible (a file beside the job file).")
    path = Path(where).expanduser()
    path = (path if path.is_absolute() else base / path).resolve()
    if not path.is_file():
        raise SpecError(f"{field}: {where} does not exist (looked in {base}).",
                        hint="A path is relative to the job file's folder.")
    roots = [Path(p).resolve() for p in projects]
    if not _in_project(path, roots):
        raise SpecError(
            f"{field}: {reference} is not in your project, so the toolkit won't call it.",
            hint=f"Your project here is {', '.join(str(r) for r in roots)}; put the "
            "function in a .py file there.")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise SpecError(f"{field}: can't read {where}: {exc}") from None
    if not any(isinstance(node, ast.FunctionDef) and node.name == name for node in tree.body):
        raise SpecError(f"{field}: {where} has no top-level function {name!r}.",
                        hint=f"Define def {name}(row): returning None when the row passes.")
    return path
