"""Structured-output regexes the engines can compile, checked while a spec loads.

Both chat engines compile a ``structured_output.regex`` with xgrammar (vLLM's default
backend), which has no lookaround, backreferences, word boundaries, conditional,
atomic or named groups, possessive quantifiers or inline flags. Python's ``re``
accepts all of these, so without :func:`regex_problem` a job would load, start its
workers, and fail every row.

Example:
    >>> regex_problem("[0-9]+(?>px)")
    'an atomic group (?>...) is not supported by structured outputs (xgrammar)'
"""

from __future__ import annotations

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
}


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


def regex_problem(pattern: str) -> str | None:
    """Why structured outputs can't use ``pattern`` (one that ``re`` compiles), or None."""
    try:
        parsed = _parsed(pattern)
    except Exception:  # noqa: BLE001 - re.compile reports a broken pattern itself
        return None
    if parsed.state.groupdict:
        name = next(iter(parsed.state.groupdict))
        return (f"the named group (?P<{name}>...) is not supported by structured outputs "
                f"(xgrammar); {_REGEX_FIX['named']}")
    import re

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
