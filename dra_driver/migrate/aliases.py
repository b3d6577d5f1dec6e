"""YAML anchors and aliases on the nodes a migration edits.

An alias (`*res`) is the *same* ruamel object as its anchor (`&res`), so an edit
in place would change every place that shares it: two containers sharing
`resources: &res` / `*res` would both end up with both containers' claims.
Aliases are plain content sharing (the API server sees two equal copies), so
before editing we replace a shared node on the edit path by a deep copy of its
own; the output is what the API server saw before, with only the intended
edits. Merge keys (`<<: *base`) are different: a map that merges, or is merged
into, another map cannot be edited without changing the other one or having
the merge bring a removed key back, so such input is refused.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from dra_driver.migrate.context import Context
from dra_driver.migrate.report import Action
from dra_driver.sources.workloads import Key, show_path



def _children(node: Any) -> Iterator[Any]:
    if isinstance(node, CommentedMap):
        yield from node.values()  # includes values a merge key brings in: they are shared too
    elif isinstance(node, CommentedSeq):
        yield from node


def _references(root: Any) -> Counter[int]:
    """How many times each collection node is reached from `root` (more than once: an alias or a merge)."""
    counts: Counter[int] = Counter()
    stack = [root]
    while stack:
        node = stack.pop()
        if not isinstance(node, (CommentedMap, CommentedSeq)):
            continue
        counts[id(node)] += 1
        if counts[id(node)] == 1:
            stack.extend(_children(node))
    return counts


def anchor_name(node: Any) -> str | None:
    anchor = getattr(node, "anchor", None)
    return getattr(anchor, "value", None)


def _merge_problem(node: Any) -> str | None:
    """Why `node` cannot be edited in place because of a merge key, or None."""
    if not isinstance(node, CommentedMap):
        return None
    merged_from = [anchor_name(source) for _, source in node.merge]
    if merged_from:
        names = ", ".join(f"*{name}" for name in merged_from if name) or "an anchor"
        return f"is built with a YAML merge key (<<: {names})"
    if getattr(node, "_ref", None):  # ruamel lists here the maps that merge this one
        return f"is merged into another map (<<: *{anchor_name(node) or '?'})"
    return None


def _drop_anchors(node: Any) -> None:
    """A copy must not repeat the original's anchor names (duplicate anchors are invalid for many parsers)."""
    anchor = getattr(node, "anchor", None)  # collections and anchored scalars (ScalarInt, ...) have one
    if anchor is not None and getattr(anchor, "value", None) is not None:
        anchor.value = None
        anchor.always_dump = False
    for child in _children(node):
        _drop_anchors(child)


def _own_copy(node: Any) -> Any:
    duplicate = copy.deepcopy(node)
    _drop_anchors(duplicate)
    return duplicate




class Unaliaser:
    """Makes the nodes one workload's edits touch its own, within one document."""

    def __init__(self, ctx: Context, document_root: Any) -> None:
        self.ctx = ctx
        self.root = document_root
        self.counts = _references(document_root)

    def shared(self, node: Any) -> bool:
        return self.counts[id(node)] > 1

    def own(self, start: Any, base_path: str, keys: tuple[Key, ...]) -> bool:
        """Un-alias every shared node from `start` down `keys`; the last node is about to be edited.

        Returns False (after a refusal naming the place) when a merge key is in the way.
        A missing key ends the walk: there is nothing to edit below it.
        """
        node = start
        for depth, key in enumerate(keys):
            child = _get(node, key)
            if not isinstance(child, (CommentedMap, CommentedSeq)):
                return True
            at = show_path(base_path, keys[: depth + 1])
            if self.shared(child):
                parent_problem = _merge_problem(node)
                if parent_problem is not None:
                    return self._refuse(at, f"{show_path(base_path, keys[:depth]) or 'the object'} {parent_problem}")
                problem = _merge_problem(child)
                if problem is not None:
                    return self._refuse(at, f"{at} {problem}")
                node[key] = _own_copy(child)
                self.ctx.add(Action.NOTE, at, f"&{anchor_name(child) or '?'}",
                             "YAML alias expanded into a copy of its own before editing, so the edit changes only "
                             "this place and every other alias of the anchor keeps its content")
                self.counts = _references(self.root)
            node = node[key]
        problem = _merge_problem(node)
        if problem is not None and keys:
            at = show_path(base_path, keys)
            return self._refuse(at, f"{at} {problem}")
        return True

    def _refuse(self, at: str, problem: str) -> bool:
        self.ctx.refuse(at, f"{problem}; editing it would also change the maps that share it through the merge, or "
                        "the merge would bring removed entries back. Expand the merge key (for example "
                        "`yq 'explode(.)'`) and run again")
        return False


def _get(node: Any, key: Key) -> Any:
    if isinstance(node, CommentedMap):
        return node.get(key)
    if isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
        return node[key]
    return None
