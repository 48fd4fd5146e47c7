r"""Structured-output regexes the engines can compile, checked while a spec loads.

vLLM compiles a ``structured_output.regex`` with xgrammar (its default backend), the
transformers engine with llguidance (another of vLLM's backends), from
:func:`engine_regex`'s rewrite of it. xgrammar has no lookaround, backreferences,
word boundaries, conditional, atomic or named groups, possessive quantifiers,
inline flags or comments, no ``\A``/``\Z`` anchors (it reads them as the letters),
no ``\N{...}`` names and no ``{`` but a quantifier's. Python's ``re`` accepts all of
these, so without :func:`regex_problem` a job would load, start its workers, and
fail every row.

Example:
    >>> regex_problem("[0-9]+(?>px)")
    'an atomic group (?>...) is not supported by structured outputs (xgrammar)'
    >>> engine_regex(r"\d{2}-\d{4}")
    '(?:[0-9]){2}\\x{2d}(?:[0-9]){4}'
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_REGEX_OPS = {
    "ASSERT": "lookahead (?=...)",
    "ASSERT_NOT": "negative lookahead (?!...)",
    "GROUPREF": "a backreference (\\1, (?P=name))",
    "GROUPREF_EXISTS": "a conditional group (?(1)...|...)",
    "ATOMIC_GROUP": "an atomic group (?>...)",
    "POSSESSIVE_REPEAT": "a possessive quantifier (a++, a*+, a?+)",
}
_REGEX_AT = {"AT_BOUNDARY": "a word boundary \\b", "AT_NON_BOUNDARY": "a non-boundary \\B"}
_REGEX_FIX = {
    "ASSERT": "match the text itself instead",
    "GROUPREF": "repeat the group's pattern instead",
    "named": "use a plain group (...)",
    "flags": "spell both cases out, e.g. [Yy]es",
    "brace": "escape a literal brace as \\{",
}
#: What xgrammar's own parser rejects, or reads otherwise than Python, in a pattern
#: Python compiles: (what, fix).
_XGRAMMAR_SYNTAX = {
    "comment": ("a comment (?#...)", "leave it out"),
    "A": ("\\A", "leave it out: the whole answer must match anyway"),
    "Z": ("\\Z", "leave it out: the whole answer must match anyway"),
    "N": ("a named character \\N{...}", "write the character itself or \\uXXXX"),
    "bracket": ("a class that opens with ] ([]...] or [^]...])", "escape it as \\]"),
    "brace": ("a { that is not a quantifier {n}, {n,} or {n,m}", _REGEX_FIX["brace"]),
}
_QUANTIFIER = re.compile(r"\{[0-9]+(,[0-9]*)?\}")


def _parsed(pattern: str) -> Any:
    try:
        from re import _parser as parser  # type: ignore[attr-defined]  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse as parser  # type: ignore[no-redef]
    return parser.parse(pattern)


def _ops(sub: Any, kind: type) -> Iterator[tuple[str, Any]]:
    for op, av in sub:
        yield getattr(op, "name", str(op)), av
        stack = [av]
        while stack:
            item = stack.pop()
            if isinstance(item, kind):
                yield from _ops(item, kind)
            elif isinstance(item, (list, tuple)):
                stack.extend(item)


def _syntax_problem(pattern: str) -> str | None:
    """What, in ``pattern``'s text, xgrammar's parser rejects or reads otherwise than
    Python's, or None (what the parse tree shows is :func:`regex_problem`'s)."""
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            letter = pattern[i + 1: i + 2]
            if letter in ("A", "Z", "N"):
                return _XGRAMMAR_SYNTAX[letter]
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            start = i + 2 if pattern[i + 1: i + 2] == "^" else i + 1
            if pattern[start: start + 1] == "]":
                return _XGRAMMAR_SYNTAX["bracket"]
            i = start
            continue
        elif c == "{" and not _QUANTIFIER.match(pattern, i):
            return _XGRAMMAR_SYNTAX["brace"]
        elif pattern.startswith("(?#", i):
            return _XGRAMMAR_SYNTAX["comment"]
        i += 1
    return None


def regex_problem(pattern: str) -> str | None:
    """Why structured outputs can't use ``pattern`` (one that ``re`` compiles), or None."""
    try:
        parsed = _parsed(pattern)
    except Exception:  # noqa: BLE001 - re.compile reports a broken pattern itself
        return None
    syntax = _syntax_problem(pattern)
    if syntax:
        what, fix = syntax
        return f"{what} is not supported by structured outputs (xgrammar); {fix}"
    if parsed.state.groupdict:
        name = next(iter(parsed.state.groupdict))
        return (f"the named group (?P<{name}>...) is not supported by structured outputs "
                f"(xgrammar); {_REGEX_FIX['named']}")
    if parsed.state.flags & ~(re.UNICODE | re.U):
        return ("inline flags such as (?i) are not supported by structured outputs "
                f"(xgrammar); {_REGEX_FIX['flags']}")
    for name, av in _ops(parsed, type(parsed)):
        if name in _REGEX_OPS:
            what = _REGEX_OPS[name]
            if name.startswith("ASSERT") and isinstance(av, tuple) and av and av[0] == -1:
                what = what.replace("ahead (?", "behind (?<")
            fix = _REGEX_FIX.get(name.removesuffix("_NOT"), "")
            return (f"{what} is not supported by structured outputs (xgrammar)"
                    + (f"; {fix}" if fix else ""))
        if name == "AT" and getattr(av, "name", str(av)) in _REGEX_AT:
            return (f"{_REGEX_AT[getattr(av, 'name', str(av))]} is not supported by structured "
                    "outputs (xgrammar)")
        if name == "SUBPATTERN" and isinstance(av, tuple) and len(av) == 4 and (av[1] or av[2]):
            return ("inline flags such as (?i:...) are not supported by structured outputs "
                    f"(xgrammar); {_REGEX_FIX['flags']}")
    return None


# xgrammar's classes (not Python's Unicode ones): ASCII digits and word characters,
# and for \\s the ASCII spaces and U+00A0; as Rust regex class items.
_CATEGORIES = {
    "DIGIT": "0-9",
    "WORD": "0-9A-Za-z_",
    "SPACE": "\\x{9}-\\x{d}\\x{20}\\x{a0}",
}


def _char(code: int) -> str:
    char = chr(code)
    return char if char.isascii() and char.isalnum() else f"\\x{{{code:x}}}"


def _class_item(op: str, av: Any) -> str:
    if op == "LITERAL":
        return _char(av)
    if op == "RANGE":
        return f"{_char(av[0])}-{_char(av[1])}"
    if op == "CATEGORY":
        name = getattr(av, "name", str(av)).removeprefix("CATEGORY_")
        negated = name.startswith("NOT_")
        items = _CATEGORIES.get(name.removeprefix("NOT_"))
        if items is not None:
            return f"[^{items}]" if negated else items
    raise ValueError(f"structured outputs can't compile the class item {op} {av!r}")


def _rust(sub: Any) -> str:
    try:
        from re import _constants as constants  # type: ignore[attr-defined]  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_constants as constants  # type: ignore[no-redef]

    out = []
    for op_code, av in sub:
        op = getattr(op_code, "name", str(op_code))
        if op == "LITERAL":
            out.append(_char(av))
        elif op == "NOT_LITERAL":
            out.append(f"[^{_char(av)}]")
        elif op == "ANY":
            out.append("(?s:.)")  # xgrammar's . matches a newline too
        elif op == "IN":
            names = [(getattr(o, "name", str(o)), a) for o, a in av]
            negate = bool(names) and names[0][0] == "NEGATE"
            items = "".join(_class_item(o, a) for o, a in names[1 if negate else 0:])
            out.append(f"[{'^' if negate else ''}{items}]")
        elif op == "BRANCH":
            out.append("(?:" + "|".join(_rust(alt) for alt in av[1]) + ")")
        elif op == "SUBPATTERN":
            out.append(f"(?:{_rust(av[3])})")
        elif op in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, item = av
            if high == constants.MAXREPEAT:
                count = {0: "*", 1: "+"}.get(low, f"{{{low},}}")
            else:
                count = f"{{{low}}}" if low == high else f"{{{low},{high}}}"
            out.append(f"(?:{_rust(item)}){count}")
        elif op == "AT" and getattr(av, "name", str(av)) in ("AT_BEGINNING", "AT_END"):
            continue  # the whole answer matches anyway; xgrammar ignores them mid-pattern
        else:
            raise ValueError(f"structured outputs can't compile {op} in a regex")
    return "".join(out)


def engine_regex(pattern: str) -> str:
    """``pattern`` as xgrammar (vLLM's default backend) reads it, written in the Rust
    ``regex`` syntax llguidance compiles, so both engines constrain answers alike:
    ``\\d``, ``\\w`` and ``\\s`` are xgrammar's ASCII classes (``\\s`` with U+00A0),
    where Rust's are Unicode; ``.`` matches any character, a newline too; every other
    character is a literal, written as a hex escape unless it is an ASCII letter or digit.

    Raises ValueError for what :func:`regex_problem` names, or a pattern ``re``
    can't compile."""
    problem = regex_problem(pattern)
    if problem:
        raise ValueError(problem)
    try:
        parsed = _parsed(pattern)
    except Exception as exc:  # noqa: BLE001 - re's own message says what is wrong
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
    return _rust(parsed)
