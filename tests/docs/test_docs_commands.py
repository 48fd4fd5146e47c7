"""Every shell command in README.md and docs/*.md, run as a user would run it.

Each page is one user's session: its commands run in order through the real ``toolkit``
command, in a folder of their own outside the checkout, under a pseudo-terminal (what a
user sees: stdout and stderr together, the progress line as a terminal gets it). Where
a ``console`` block shows what a command prints, those lines must appear, in order.

A fenced ``bash``/``sh``/``console`` block runs unless the line before it says otherwise:

    <!-- not run: REASON -->           nothing runs (a cluster, a GPU, a server, a big install)
    <!-- spec only: REASON -->         ``toolkit run/submit JOB FLAGS`` is checked as
                                       ``toolkit show JOB FLAGS`` (job, flags and --set keys
                                       valid, no Ray, no model); other commands run
    <!-- covered by: tests/X.py::test_name -->   as ``spec only`` (a ``retry``, ``plan
                                       --tokens`` or ``plan --from-run`` is left out);
                                       that test runs it for real
    <!-- file: NAME -->                the block is a file the next commands read

A block with a command the test can't run offline and no such line fails the test, so a
page can't hold a command nobody checks.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.terminal_session import ANSI, run_on_terminal

CHECKOUT = Path(__file__).resolve().parents[2]
PAGES = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"^<!--\s*(not run|spec only|covered by|file):\s*(\S.*?)\s*-->$")
SHELL = {"bash", "sh", "console"}

# toolkit subcommands that start no Ray, need no network and no model download.
OFFLINE = {"jobs", "new", "show", "plan", "render", "samples", "report", "cache", "--help",
           "--version"}
# These run the pipeline: worth it for a page's few smoke runs, checked as `show` elsewhere.
PIPELINE = {"run", "retry"}
# Flags of run/submit that `show` doesn't take, and whether each takes a value.
NOT_SPEC_FLAGS = {"--overwrite": False, "-v": False, "--verbose": False, "--dashboard": False,
                  "--address": True, "--backend": True, "--follow": False, "--raw": False,
                  "--working-dir": True, "--exclude": True, "--stall-timeout": True,
                  "--fail-on-stall": False, "--timeout": True, "--check-tokens": False}
UNIX = {"cat", "echo", "ls", "head", "mkdir", "cd"}


@dataclass
class Command:
    line: int
    text: str
    shown: list[str] = field(default_factory=list)  # what the page says it prints


@dataclass
class Block:
    page: Path
    line: int
    language: str
    body: list[str]
    mark: str | None = None
    reason: str | None = None

    def where(self) -> str:
        return f"{self.page.relative_to(CHECKOUT)}:{self.line}"

    def commands(self) -> list[Command]:
        commands: list[Command] = []
        lines = iter(enumerate(self.body, start=self.line + 1))
        for number, raw in lines:
            if self.language == "console":
                if not raw.startswith("$ "):
                    if commands:
                        commands[-1].shown.append(raw)
                    continue
                raw = raw[2:]
            elif not raw.strip() or raw.lstrip().startswith("#"):
                continue
            text = raw
            while text.rstrip().endswith("\\"):
                text = text.rstrip()[:-1] + " " + next(lines)[1].strip()
            commands.append(Command(number, text.strip()))
        return commands


def blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        before = next((lines[i].strip() for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        mark = MARK.match(before)
        found.append(Block(page, index + 1, opened.group(1), lines[index + 1:end],
                           *(mark.groups() if mark else (None, None))))
        index = end + 1
    return found


CONTROL = {"&&", "||", ";", "|"}
REDIRECT = {">", ">>", "<", "2>&1", "&"}


def segments(command: str) -> list[list[str]]:
    """A command line's simple commands, comments left out: ``a && b | c`` is a, b, c."""
    found: list[list[str]] = [[]]
    for word in shlex.split(command, comments=True):
        if word in CONTROL:
            found.append([])
        else:
            found[-1].append(word)
    return [argv for argv in found if argv]


def problems(block: Block) -> list[str]:
    """Why the test can't check this block as it is marked (empty: it can)."""
    if block.mark in ("not run", "file"):
        return []
    if block.language not in SHELL:
        if any(line.startswith("$ ") for line in block.body):
            return [f"{block.where()}: a block of commands must be ```console"]
        return []
    found = []
    if block.mark == "covered by":
        path, _, test = block.reason.partition("::")
        if not (CHECKOUT / path).is_file() or f"def {test}(" not in (CHECKOUT / path).read_text():
            found.append(f"{block.where()}: no test {block.reason}")
    for command in block.commands():
        for argv in segments(command.text):
            if argv[0] in UNIX or argv[0] == "toolkit" and argv[1:2] and (
                    argv[1] in OFFLINE or "--help" in argv
                    or argv[1] in PIPELINE and block.mark in (None, "covered by")
                    or argv[1] in ("run", "submit") and block.mark is not None):
                continue
            found.append(f"{block.where()}: can't run `{shlex.join(argv)}` here; mark the "
                         "block <!-- not run: why --> or <!-- spec only: why -->")
    return found


def starts_ray(argv: list[str]) -> bool:
    """A command besides run/submit that works on Ray (``show`` can't stand in for it),
    or on what a run wrote (``plan --from-run``: the runs before it were checked as
    ``show``, so there is no pilot to read; ``cache``: the answers runs stored)."""
    return argv[:2] in (["toolkit", "retry"], ["toolkit", "cache"]) or argv[:2] == [
        "toolkit", "plan"] and ("--tokens" in argv or "--from-run" in argv)


def as_spec_check(command: str) -> str:
    """``toolkit run|submit JOB FLAGS`` as ``toolkit show JOB SPEC-FLAGS``."""
    words = []
    segment: list[str] = []
    for word in [*shlex.split(command, comments=True), ";"]:
        if word not in CONTROL:
            segment.append(word)
            continue
        if segment[:2] in (["toolkit", "run"], ["toolkit", "submit"]):
            kept, rest = ["toolkit", "show"], iter(segment[2:])
            for flag in rest:
                name = flag.split("=", 1)[0]
                if name in NOT_SPEC_FLAGS:
                    if NOT_SPEC_FLAGS[name] and "=" not in flag:
                        next(rest)
                    continue
                kept.append(flag)
            segment = [*kept, ">", "/dev/null"]
        words += [*segment, word]
        segment = []
    return " ".join(w if w in CONTROL | REDIRECT else shlex.quote(w) for w in words[:-1])


def in_terminal(command: str, cwd: Path, timeout_s: float = 600) -> tuple[list[str], int]:
    """Run a shell command line on a pseudo-terminal, as tests/test_terminal_output.py
    runs toolkit; what it printed (one entry per line or per redraw of the live line)
    and its exit code."""
    # `toolkit` is this environment's, and a run starts its own Ray as a user's does.
    env = {**os.environ, "RAY_ADDRESS": "", "TERM": "xterm",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    printed, code = run_on_terminal(["bash", "-c", command], cwd, env, timeout_s)
    text = ANSI.sub("", printed)
    return [line.rstrip() for line in re.split(r"[\r\n]+", text) if line.strip()], code


# Timings, rates and ids change from run to run; counts and words must not.
VARIABLE = re.compile(r"\d[\d,]*\.\d+|\b\d+:\d\d\b|\b\d+[smh]\b"
                      r"|(?<![0-9a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}(?![0-9a-f])")


def pattern(shown: str) -> re.Pattern[str]:
    """A shown line as a pattern: ``...`` stands for anything, timings and ids for any."""
    pieces = []
    for piece in shown.strip().split("..."):
        at, parts = 0, []
        for variable in VARIABLE.finditer(piece):
            parts += [re.escape(piece[at:variable.start()]), r"[\w.,:]+"]
            at = variable.end()
        pieces.append("".join(parts) + re.escape(piece[at:]))
    return re.compile(r"\s*" + ".*".join(pieces) + r"\s*")


def missing(shown: list[str], printed: list[str]) -> list[str]:
    """The shown lines not found, in order, among the printed ones."""
    at, lost = 0, []
    for line in shown:
        if not line.strip() or line.strip() == "...":
            continue
        wanted = pattern(line)
        hit = next((i for i in range(at, len(printed)) if wanted.fullmatch(printed[i])), None)
        if hit is None:
            lost.append(line)
        else:
            at = hit + 1
    return lost


def test_every_command_block_is_run_or_says_why_not():
    found = [problem for page in PAGES for block in blocks(page) for problem in problems(block)]
    assert found == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_the_commands_of_a_page_do_what_it_says(page: Path, tmp_path: Path):
    for block in blocks(page):
        if block.mark == "file":
            (tmp_path / block.reason).write_text("\n".join(block.body) + "\n")
            continue
        if block.mark == "not run" or block.language not in SHELL:
            continue
        assert not problems(block), problems(block)
        for command in block.commands():
            if block.mark == "covered by" and any(map(starts_ray, segments(command.text))):
                continue  # the covering test runs it
            text = command.text if block.mark is None else as_spec_check(command.text)
            printed, code = in_terminal(text, tmp_path)
            where = f"{block.page.name}:{command.line}: `{text}`"
            shown = command.shown if block.mark is None else []  # `show` prints a spec
            fails = any(line.startswith("Error:") for line in shown)
            assert (code != 0) == fails, f"{where} exited {code}:\n" + "\n".join(printed[-40:])
            lost = missing(shown, printed)
            assert not lost, (f"{where} did not print, in this order:\n" + "\n".join(lost)
                              + "\n--- it printed:\n" + "\n".join(printed))
