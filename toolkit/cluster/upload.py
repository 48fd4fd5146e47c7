"""What a submitted job uploads, measured before anything is sent.

The working dir (the user's project) travels as Ray packs it: every file but what
``.gitignore`` and ``.rayignore`` (in any folder, for the paths below it) and the
job's ``excludes`` leave out, matched as gitignore lines the way Ray's own packer
does (``ray._private.runtime_env.packaging``, with ``pathspec``'s ``gitwildmatch``).
Anyscale packs the same folder with ``.gitignore`` and the excludes only, so the
rendered ``excludes`` carry the project's ``.rayignore`` lines too
(:func:`rayignore_lines`).

A Ray cluster takes an upload of at most :data:`RAY_UPLOAD_LIMIT_BYTES` (its
dashboard's request body limit; a bigger one fails with HTTP 413 after the whole
folder was zipped), so :func:`check_upload` refuses a bigger one up front, naming
the largest entries and the ways out. It counts bytes before compression: a
project that would only just squeeze under the limit zipped is refused too, which
keeps the rule one a user can check with ``du``.

Nothing here imports Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import SpecError

#: A Ray dashboard takes request bodies of at most this many bytes
#: (``ray._private.ray_constants.DASHBOARD_CLIENT_MAX_SIZE``): the zipped working dir.
RAY_UPLOAD_LIMIT_BYTES = 100 * 2**20
#: Anyscale uploads to cloud storage and sets no such limit; past this a submit
#: still works but is slow every time, so it is a warning there.
ANYSCALE_UPLOAD_WARN_BYTES = 100 * 2**20
IGNORE_FILES = (".gitignore", ".rayignore")
_SHOWN = 5


@dataclass(frozen=True)
class Upload:
    """A working dir as it would travel."""

    working_dir: Path
    total_bytes: int
    #: Bytes per top-level entry of the working dir (``data`` for ``data/x.csv``).
    entries: dict[str, int] = field(default_factory=dict)
    #: The largest files, largest first, relative to the working dir.
    largest_files: list[tuple[str, int]] = field(default_factory=list)
    #: Every file that travels, relative to the working dir (POSIX form).
    files: frozenset[str] = frozenset()

    def carries(self, path: Path) -> bool:
        """Whether the file at ``path`` (absolute) travels with the job."""
        try:
            relative = Path(path).resolve().relative_to(self.working_dir).as_posix()
        except ValueError:
            return False
        return relative in self.files


def measure_upload(working_dir: Path, excludes: Sequence[str],
                   ignore_files: Sequence[str] = IGNORE_FILES) -> Upload:
    """What of ``working_dir`` travels with ``excludes`` and the ignore files found in it.

    Links are measured as Ray packs them: followed, a linked folder's files counted
    (each real folder once, so a loop of links ends).
    """
    root = Path(working_dir).resolve()
    rules: list[tuple[Path, Callable[[str], bool]]] = [(root, _matcher(list(excludes)))]
    sizes: dict[str, int] = {}
    entries: dict[str, int] = {}

    def excluded(path: Path) -> bool:
        return any(path != base and match(path.relative_to(base).as_posix())
                   for base, match in rules)

    seen: set[Path] = set()

    def visit(folder: Path) -> None:
        real = folder.resolve()
        if real in seen:
            return
        seen.add(real)
        added = 0
        for name in ignore_files:
            ignore = folder / name
            if ignore.is_file():
                lines = ignore.read_text(encoding="utf-8", errors="replace").splitlines()
                rules.append((folder, _matcher(lines)))
                added += 1
        try:
            children = sorted(folder.iterdir())
        except OSError:
            children = []
        for child in children:
            if excluded(child):
                continue
            if child.is_dir():
                visit(child)
            elif child.is_file():
                relative = child.relative_to(root).as_posix()
                size = child.stat().st_size
                sizes[relative] = size
                top = relative.split("/", 1)[0]
                entries[top] = entries.get(top, 0) + size
        del rules[len(rules) - added:]

    visit(root)
    largest = sorted(sizes.items(), key=lambda item: (-item[1], item[0]))[:_SHOWN]
    return Upload(working_dir=root, total_bytes=sum(sizes.values()), entries=entries,
                  largest_files=largest, files=frozenset(sizes))


def _matcher(lines: list[str]) -> Callable[[str], bool]:
    """A gitignore matcher as Ray's packer builds it (``gitwildmatch``, which newer
    pathspec calls deprecated; the same rules are what the upload really follows)."""
    import warnings

    import pathspec

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return pathspec.PathSpec.from_lines("gitwildmatch", lines).match_file


def mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB" if size >= 2**20 else f"{size / 2**10:,.0f} KiB"


def _weighty(sizes: list[tuple[str, int]], total: int) -> list[tuple[str, int]]:
    """The largest of ``sizes`` that weigh something (a MiB, or a hundredth of
    ``total``), at most :data:`_SHOWN`; the largest one at least."""
    ranked = sorted(sizes, key=lambda item: (-item[1], item[0]))
    weighty = [item for item in ranked if item[1] >= max(2**20, total // 100)]
    return (weighty or ranked[:1])[:_SHOWN]


def describe_largest(upload: Upload) -> str:
    """``data/ (180 MiB), big.bin (12 MiB)``: the entries that weigh most."""
    root = upload.working_dir
    return ", ".join(f"{name}{'/' if (root / name).is_dir() else ''} ({mib(size)})"
                     for name, size in _weighty(list(upload.entries.items()),
                                                upload.total_bytes))


def check_upload(upload: Upload, limit: int = RAY_UPLOAD_LIMIT_BYTES,
                 where: str = "a Ray cluster", input_path: Path | None = None) -> None:
    """Refuse an upload over ``limit`` before anything is sent.

    Args:
        input_path: The run's input file, when the upload carries it: named as such.

    Raises:
        SpecError: naming the size, the largest entries and files, and the ways out.
    """
    if upload.total_bytes <= limit:
        return
    files = ", ".join(f"{name} ({mib(size)})"
                      for name, size in _weighty(upload.largest_files, upload.total_bytes)[:3])
    top = sorted(upload.entries.items(), key=lambda item: -item[1])[0][0]
    carried = ""
    if input_path is not None and upload.carries(input_path):
        carried = (f" The run's input {input_path.name} "
                   f"({mib(Path(input_path).stat().st_size)}) is part of it: a cluster reads "
                   "data best from object storage (--input s3://bucket/"
                   f"{input_path.name}).")
    raise SpecError(
        f"The job would upload {mib(upload.total_bytes)} of {upload.working_dir} (before "
        f"compression), more than {where} takes in one upload ({mib(limit)}); nothing was "
        f"sent. The largest entries: {describe_largest(upload)}; the largest files: "
        f"{files}.{carried}",
        hint=f"Leave data out of the upload: add it to {upload.working_dir}/.rayignore "
        f"(a line '{top}{'/' if (upload.working_dir / top).is_dir() else ''}') or pass "
        "--exclude PATTERN; read input data from object storage (--input s3://bucket/"
        "file.csv) or, on Anyscale, /mnt/cluster_storage; or submit from a smaller folder "
        "with --working-dir.",
    )


def rayignore_lines(working_dir: Path) -> list[str]:
    """The patterns of the project's top-level ``.rayignore`` (comments and blank lines
    left out), for a packer that reads only ``.gitignore`` (Anyscale's)."""
    path = Path(working_dir) / ".rayignore"
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def upload_size_warning(upload: Upload, limit: int = ANYSCALE_UPLOAD_WARN_BYTES) -> str | None:
    """A warning naming the biggest entries when the upload is over ``limit``."""
    if upload.total_bytes <= limit:
        return None
    return (
        f"The working dir {upload.working_dir} is about {mib(upload.total_bytes)}, over "
        f"{mib(limit)}; every submit uploads it. Biggest entries: {describe_largest(upload)}. "
        "Move data and models out of it (read them from s3:// or shared storage), or leave "
        "them out with .rayignore or --exclude."
    )
