"""Jinja's immutable sandbox with limits: a prompt template can't hang a worker or fill its memory.

Jinja's sandbox keeps a template away from Python's internals, not from work:
``{{ 'x' * 50000000 }}`` builds 50 MB per row, two nested ``range(100000)`` loops
run ten billion steps, and a worker stuck in either never writes its rows. Here
every render has three limits (:class:`RenderLimits`), and an overrun raises
:class:`TemplateLimitError` at once, naming the limit, instead of hanging:

- **output**: the rendered text may hold ``max_chars`` characters; rendering
  stops as soon as it passes them.
- **values**: no string or list the template builds on the way (``*``, ``+``,
  ``~``, ``%``, a filter, a method such as ``str.ljust``, all ``{{ }}`` output
  together) may exceed ``value_chars``: the output limit plus the row's own
  text, so a template may pass a long column through a filter and cut it down.
  Where one operation multiplies its input (``s * n``, ``center(width)``,
  ``replace``, ``join``, format widths), the size is checked before it is built.
- **steps**: loop iterations plus calls (filters, macros, methods, functions)
  at most :data:`MAX_STEPS` per render. Counting steps, not seconds, keeps a
  row's result the same on a fast machine and a slow one.

Example:
    >>> template = BOUNDED_ENV.from_string("{{ word * times }}")
    >>> render_bounded(template, {"word": "ab", "times": 3}, RenderLimits(100, 100))
    'ababab'
"""

from __future__ import annotations

import contextvars
import functools
import re
import string
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import TemplateRuntimeError
from jinja2.sandbox import ImmutableSandboxedEnvironment

#: Loop iterations plus calls one render may take. A prompt template arranges a
#: row's columns; a few-shot loop over a list column takes hundreds.
MAX_STEPS = 50_000
#: The largest whole number a template may compute (bits); Python would otherwise
#: spend minutes and gigabytes on ``10 ** 10 ** 10``.
MAX_INT_BITS = 1 << 16
#: Outside a render (Jinja folding constants while it compiles): a fixed bound.
_COMPILE_TIME_CHARS = 1 << 20


class TemplateLimitError(TemplateRuntimeError):
    """A render went past one of its limits; the message says which and by how much."""


@dataclass(frozen=True)
class RenderLimits:
    """The limits of one render.

    Args:
        max_chars: Characters the rendered text may hold (with ``used``).
        value_chars: Characters any value built on the way may hold (and all
            ``{{ }}`` output together); at least ``max_chars``.
        steps: Loop iterations plus calls.
        why: Where ``max_chars`` comes from, for the messages (``"options.max_prompt_chars"``).
        used: Characters already taken by what comes before this text (the system
            message, before the user message), counted against ``max_chars``.
    """

    max_chars: int
    value_chars: int
    steps: int = MAX_STEPS
    why: str = ""
    used: int = 0


@dataclass
class _Budget:
    limits: RenderLimits
    steps_left: int = 0
    printed: int = 0
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.steps_left = self.limits.steps


_ACTIVE: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "toolkit_template_budget", default=None)


def _limit() -> int:
    budget = _ACTIVE.get()
    return budget.limits.value_chars if budget is not None else _COMPILE_TIME_CHARS


def _too_big(what: str, size: int) -> TemplateLimitError:
    budget = _ACTIVE.get()
    if budget is None:
        return TemplateLimitError(f"{what} would be {size:,} characters")
    limits = budget.limits
    why = f" ({limits.why})" if limits.why else ""
    return TemplateLimitError(
        f"template output exceeds {limits.max_chars:,} characters{why}: {what} would build "
        f"{size:,} characters")


def _tick() -> None:
    budget = _ACTIVE.get()
    if budget is None:
        return
    budget.steps_left -= 1
    if budget.steps_left < 0:
        raise TemplateLimitError(
            f"template takes more than {budget.limits.steps:,} steps (loop iterations and "
            "calls) for one row; a prompt template should only arrange the row's columns "
            "(nested loops over range()?). Move heavy logic into a Python job (python: FILE.py)")


def _size(value: Any, memo: dict[int, int] | None = None) -> int:
    """Characters a value holds, counting a string that a list repeats each time."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple, dict)):
        memo = {} if memo is None else memo
        key = id(value)
        if key not in memo:
            memo[key] = 0  # the immutable sandbox can't build cycles; don't loop if given one
            items: Iterable[Any] = (
                (k for pair in value.items() for k in pair) if isinstance(value, dict) else value)
            memo[key] = len(value) + sum(_size(item, memo) for item in items)
        return memo[key]
    return 1


def _check_size(what: str, size: int) -> None:
    if size > _limit():
        raise _too_big(what, size)


def _check_result(what: str, value: Any) -> Any:
    if isinstance(value, str):
        _check_size(what, len(value))
    elif isinstance(value, (list, tuple, dict)):
        _check_size(what, _size(value))
    return value


def _check_int(what: str, bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateLimitError(
            f"{what} would be a number of about {bits:,} bits, more than the {MAX_INT_BITS:,} "
            "a template may compute")


_PERCENT_SPEC = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_format_spec(what: str, fmt: str, args: Iterable[Any]) -> None:
    """Widths and precisions in a format string (or taken from its arguments) are sizes."""
    numbers = [int(n) for n in re.findall(r"\d+", fmt) if len(n) < 12] + [
        10 ** 12 for n in re.findall(r"\d{12,}", fmt)]
    nested = "*" in fmt or "{" in fmt
    if nested:  # a width from the arguments: '%*d' % (10**9, 1), '{:{}}'.format(1, 10**9)
        numbers += [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
    if numbers and max(numbers) > _limit():
        raise _too_big(f"{what} with a width of {max(numbers):,}", max(numbers))


def _percent_format(fmt: str, args: Any) -> None:
    values = args if isinstance(args, tuple) else (
        list(args.values()) if isinstance(args, Mapping) else [args])
    specs = "".join(m.group(0) for m in _PERCENT_SPEC.finditer(fmt))
    _check_format_spec("'%' formatting", specs, values)


def _brace_format(fmt: str, args: Iterable[Any]) -> None:
    try:
        specs = "".join(spec or "" for _, _, spec, _ in string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format raises its own error
    _check_format_spec("str.format", specs, args)


# -- what one call may build, checked before it runs -------------------------------


def _arg(args: tuple[Any, ...], kwargs: Mapping[str, Any], index: int, name: str,
         default: Any = None) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, default)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _replace_size(text: str, old: Any, new: Any, count: Any = None) -> int:
    old, new = str(old), str(new)
    hits = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * max(0, len(new) - len(old))


def _join_size(items: Any, separator: str) -> int:
    if not isinstance(items, (list, tuple)):
        return 0
    return sum(_size(item) for item in items) + len(separator) * max(0, len(items) - 1)


def _width(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


#: Filter name -> the characters it would build from (value, *args, **kwargs).
_FILTER_SIZES: dict[str, Any] = {
    "center": lambda v, *a, **k: max(len(str(v)), _width(_arg(a, k, 0, "width", 80))),
    "indent": lambda v, *a, **k: len(_text(v)) + (_text(v).count("\n") + 1) * (
        len(w) if isinstance(w := _arg(a, k, 0, "width", 4), str) else _width(w)),
    "replace": lambda v, *a, **k: _replace_size(
        str(v), _arg(a, k, 0, "old", ""), _arg(a, k, 1, "new", ""), _arg(a, k, 2, "count")),
    "join": lambda v, *a, **k: _join_size(v, str(_arg(a, k, 0, "d", ""))),
    "wordwrap": lambda v, *a, **k: len(_text(v)) * (1 + len(str(_arg(a, k, 2, "wrapstring")
                                                                 or "\n"))),
    "urlize": lambda v, *a, **k: len(_text(v)) * (1 + len(str(_arg(a, k, 3, "target") or ""))
                                                    + len(str(_arg(a, k, 4, "rel") or ""))),
    "batch": lambda v, *a, **k: _width(_arg(a, k, 0, "linecount", 0)),
    "slice": lambda v, *a, **k: _width(_arg(a, k, 0, "slices", 0)),
    "tojson": lambda v, *a, **k: _size(v) * (6 + _width(_arg(a, k, 0, "indent", 0))),
    "pprint": lambda v, *a, **k: _size(v) * 3,
    "string": lambda v, *a, **k: _size(v) * 3,
}
#: str methods that may build more than they are given: name -> size from (text, args, kwargs).
_METHOD_SIZES: dict[str, Any] = {
    "ljust": lambda s, a, k: max(len(s), _width(_arg(a, k, 0, "width", 0))),
    "rjust": lambda s, a, k: max(len(s), _width(_arg(a, k, 0, "width", 0))),
    "center": lambda s, a, k: max(len(s), _width(_arg(a, k, 0, "width", 0))),
    "zfill": lambda s, a, k: max(len(s), _width(_arg(a, k, 0, "width", 0))),
    "expandtabs": lambda s, a, k: len(s) + s.count("\t") * _width(_arg(a, k, 0, "tabsize", 8)),
    "replace": lambda s, a, k: _replace_size(s, _arg(a, k, 0, "old", ""),
                                             _arg(a, k, 1, "new", ""), _arg(a, k, 2, "count")),
    "join": lambda s, a, k: _join_size(_arg(a, k, 0, "iterable"), s),
}


def _bounded_filter(name: str, function: Any) -> Any:
    sizer = _FILTER_SIZES.get(name)
    passes_arg = getattr(function, "jinja_pass_arg", None) is not None

    @functools.wraps(function)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        own = args[1:] if passes_arg else args
        if own and sizer is not None:
            _check_size(f"the {name} filter", sizer(*own, **kwargs))
        if own and name == "format":
            _percent_format(_text(own[0]), tuple(own[1:]) or kwargs)
        return _check_result(f"the {name} filter", function(*args, **kwargs))

    return bounded


def _bounded_lipsum(function: Any) -> Any:
    @functools.wraps(function)
    def lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> Any:
        _check_size("lipsum()", _width(n) * _width(max) * 12)
        return function(n, html, min, max)

    return lipsum


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator, routing loops and ``~`` through the environment's limits."""

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        if not getattr(node, "_bounded", False):
            node.iter = nodes.Call(nodes.EnvironmentAttribute("bounded_iter"), [node.iter],
                                   [], None, None, lineno=node.lineno)
            node._bounded = True  # type: ignore[attr-defined]
        super().visit_For(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.visit_Call(nodes.Call(nodes.EnvironmentAttribute("bounded_concat"),
                                   list(node.nodes), [], None, None, lineno=node.lineno), frame)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with the limits of the render in progress enforced.

    Outside :func:`render_bounded` only a fixed size bound applies (Jinja folds
    constant expressions while compiling).
    """

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(finalize=self._count_output, **options)
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}
        self.globals["lipsum"] = _bounded_lipsum(self.globals["lipsum"])

    @staticmethod
    def _count_output(value: Any) -> Any:
        """Every ``{{ }}`` output, also inside ``{% set %}`` blocks and macros."""
        budget = _ACTIVE.get()
        if budget is not None:
            budget.printed += len(value) if isinstance(value, str) else _size(value)
            if budget.printed > budget.limits.value_chars:
                raise _too_big("its {{ }} output", budget.printed)
        return value

    def bounded_iter(self, iterable: Iterable[Any]) -> Iterator[Any]:
        for item in iterable:
            _tick()
            yield item

    def bounded_concat(self, *parts: Any) -> str:
        _check_size("'~'", sum(len(p) if isinstance(p, str) else 0 for p in parts))
        return _check_result("'~'", "".join(str(p) for p in parts))

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any,
                   right: Any) -> Any:
        what = f"'{operator}'"
        ints = (isinstance(left, int) and isinstance(right, int))
        if operator == "*":
            if ints:
                _check_int(what, left.bit_length() + right.bit_length())
            elif isinstance(right, int) and isinstance(left, (str, list, tuple)):
                _check_size(f"{type(left).__name__} * {right}", _size(left) * max(right, 0))
            elif isinstance(left, int) and isinstance(right, (str, list, tuple)):
                _check_size(f"{left} * {type(right).__name__}", _size(right) * max(left, 0))
        elif operator == "**" and ints and right > 0 and abs(left) > 1:
            _check_int(f"{left} ** {right}", right * left.bit_length())
        elif operator == "+" and isinstance(left, (str, list, tuple)) and type(left) is type(right):
            _check_size(what, _size(left) + _size(right))
        elif operator == "%" and isinstance(left, str):
            _percent_format(left, right)
        return _check_result(what, super().call_binop(context, operator, left, right))

    def call(self, context: jinja2.runtime.Context, obj: Any, /, *args: Any,
             **kwargs: Any) -> Any:
        _tick()
        method = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
        owner = getattr(method, "__self__", None)
        name = getattr(method, "__name__", "")
        if isinstance(owner, str):
            sizer = _METHOD_SIZES.get(name)
            if sizer is not None:
                _check_size(f"str.{name}()", sizer(owner, args, kwargs))
            elif name == "format":
                _brace_format(owner, (*args, *kwargs.values()))
            elif name == "format_map" and args and isinstance(args[0], Mapping):
                _brace_format(owner, args[0].values())
        return _check_result(f"{name or 'a call'}()", super().call(context, obj, *args, **kwargs))


BOUNDED_ENV = BoundedSandbox(
    undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)


def render_bounded(template: jinja2.Template, context: Mapping[str, Any],
                   limits: RenderLimits) -> str:
    """Render ``template`` within ``limits``.

    Raises:
        TemplateLimitError: the output, a value or the steps went past their limit.
        jinja2.TemplateError: anything else the template got wrong.
    """
    token = _ACTIVE.set(_Budget(limits))
    try:
        parts: list[str] = []
        total = 0
        for chunk in template.generate(context):
            total += len(chunk)
            if total + limits.used > limits.max_chars:
                why = f" ({limits.why})" if limits.why else ""
                before = f" (with the {limits.used:,} before it)" if limits.used else ""
                raise TemplateLimitError(
                    f"template output{before} exceeds {limits.max_chars:,} characters{why}")
            parts.append(chunk)
        return "".join(parts)
    finally:
        _ACTIVE.reset(token)
