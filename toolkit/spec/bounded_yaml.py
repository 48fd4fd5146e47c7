"""YAML from users, parsed with bounds: no alias bomb, no nesting that exhausts the stack.

``yaml.safe_load`` builds nothing dangerous, but aliases are shared references, so
nine nested aliases nine deep ("billion laughs") load instantly as 387 million
values and exhaust memory as soon as anything walks them (validating, merging,
printing the spec). :func:`load_bounded` refuses, before a single value is built,
a document whose aliases expand past :data:`MAX_NODES` values, one that nests
deeper than :data:`MAX_DEPTH` levels, and an alias that contains itself. Job
files, ``-f`` spec files and ``--set`` values all go through it.

Example:
    >>> load_bounded("engine: {batch_size: 64}")
    {'engine': {'batch_size': 64}}
"""

from __future__ import annotations

from typing import Any

import yaml

#: Values a document may hold with every alias expanded. A job file holds hundreds.
MAX_NODES = 100_000
#: Nesting levels (mappings and lists inside each other). A spec holds five or so.
MAX_DEPTH = 64


class YamlTooLarge(yaml.YAMLError):
    """A document past one of the bounds; ``problem`` says which, ``problem_mark`` where."""

    def __init__(self, problem: str, mark: Any = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


class _BoundedLoader(yaml.SafeLoader):
    """A SafeLoader that checks the composed document before constructing it."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self._depth >= MAX_DEPTH:
            raise YamlTooLarge(f"it nests deeper than {MAX_DEPTH} levels",
                               self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: Any) -> Any:
        _check_expanded_size(node)
        return super().construct_document(node)


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expanded_size(root: Any) -> None:
    """Count values as if every alias were copied out; refuse cycles and big counts.

    Depth-first without recursion, each node counted once (memo), so the check
    costs the document's size, not its expanded size.
    """
    sizes: dict[int, int] = {}
    entered: set[int] = set()  # on the current path: meeting one again is a cycle
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            entered.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > MAX_NODES:
                raise YamlTooLarge(
                    f"its aliases (*name) expand to more than {MAX_NODES:,} values",
                    node.start_mark)
            continue
        if key in sizes:
            continue
        entered.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in entered:
                raise YamlTooLarge("an alias (*name) refers to a value that contains it",
                                   child.start_mark)
            if id(child) not in sizes:
                stack.append((child, False))


def load_bounded(text: str) -> Any:
    """``yaml.safe_load`` within :data:`MAX_NODES` and :data:`MAX_DEPTH`.

    Raises:
        YamlTooLarge: past a bound (a :class:`yaml.YAMLError`).
        yaml.YAMLError: not valid YAML.
    """
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except RecursionError:
        raise YamlTooLarge("it nests too deep to read") from None
    finally:
        loader.dispose()
