"""Write a changed document back by splicing re-dumped blocks into its original text.

Re-dumping a whole document re-indents and re-spaces lines the migration never
touched (three-space indentation, `image:  x`, flow sequences, block scalars).
Instead we compare the edited tree with a fresh parse of the original text and
rewrite only what differs, at the smallest block-style level that can be
replaced by whole lines:
- a mapping key whose value changed (other than by changes inside a block
  collection we can descend into) has its lines replaced by a dump of `key: value`;
- a key that disappeared has its lines deleted (full-line comments inside them stay, at the key's column);
- keys that were added are dumped after the mapping's last line.
Trailing comment and blank lines of a block stay in the text (ruamel files them
under the block's last scalar, so they are cut from the dumped fragment again).
Anything this cannot express (an edit inside a flow collection whose parent is
flow too, a removed first key of a sequence item, a changed sequence length in
a list of lists) falls back to a full dump, and every spliced result is parsed
again and compared with the edited tree: on any difference the full dump wins.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

_BLOCK_SCALAR_START = re.compile(r"(?:^|[:\-]\s)\s*[|>][-+0-9]*\s*(?:#.*)?$")


class _Unsplicable(Exception):
    """An edit the line-based splice cannot express; the caller dumps the whole document."""


@dataclass(frozen=True)
class _Op:
    start: int  # first line replaced (an insertion has start == end)
    end: int  # line after the last one replaced
    text: str  # replacement lines, each ending in "\n"


def _plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def _flow(node: Any) -> bool:
    return isinstance(node, (CommentedMap, CommentedSeq)) and bool(node.fa.flow_style())


def _inserted(node: Any) -> bool:
    """A node the migration created (it has no position in the original text)."""
    return isinstance(node, (CommentedMap, CommentedSeq)) and node.lc.line is None


def _appended(old: CommentedSeq, new: CommentedSeq) -> bool:
    """`new` is `old` with items added at the end (and none of the old ones changed)."""
    return len(new) > len(old) and all(_plain(a) == _plain(b) for a, b in zip(old, new))


def _anchored(node: Any) -> bool:
    """An anchor's text is shared by its aliases, so editing its lines would change them too."""
    return getattr(getattr(node, "anchor", None), "value", None) is not None


def _block_scalar_lines(lines: list[str]) -> set[int]:
    """Line indexes inside block scalars (`|`, `>`), where a leading '#' is content, not a comment."""
    inside: set[int] = set()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.lstrip().startswith("#") or not _BLOCK_SCALAR_START.search(line.rstrip("\n")):
            continue
        header_indent = len(line) - len(line.lstrip(" "))
        while index < len(lines):
            text = lines[index]
            if text.strip() and len(text) - len(text.lstrip(" ")) <= header_indent:
                break
            inside.add(index)
            index += 1
    return inside


class _Splicer:
    def __init__(self, text: str, yaml: YAML) -> None:
        self.lines = text.splitlines(keepends=True)
        if self.lines and not self.lines[-1].endswith("\n"):
            self.lines[-1] += "\n"
        self.content = _block_scalar_lines(self.lines)
        self.yaml = yaml
        self.ops: list[_Op] = []

    def _trivia(self, index: int) -> bool:
        if index in self.content:
            return False
        stripped = self.lines[index].strip()
        return not stripped or stripped.startswith("#")

    def _content_end(self, start: int, bound: int) -> int:
        """One past the last line in [start, bound) that is not a trailing comment or blank line."""
        end = bound
        while end > start + 1 and self._trivia(end - 1):
            end -= 1
        return end

    def _kept_comments(self, start: int, end: int, column: int) -> str:
        """Full-line comments inside a deleted block, moved to the deleted key's column (they describe what follows)."""
        kept = [self.lines[i].strip() for i in range(start + 1, end) if i not in self.content
                and self.lines[i].lstrip().startswith("#")]
        return "".join(" " * column + comment + "\n" for comment in kept)

    def _fragment(self, key: Any, value: Any, parent: CommentedMap | None, column: int, first_prefix: str) -> str:
        """`key: value` dumped and indented to `column`; the first line starts with `first_prefix`."""
        holder = CommentedMap()
        holder[key] = value
        if parent is not None and key in parent.ca.items:
            holder.ca.items[key] = parent.ca.items[key]
        out = io.StringIO()
        self.yaml.dump(holder, out)
        dumped = out.getvalue().splitlines(keepends=True)
        while dumped and (not dumped[-1].strip() or dumped[-1].lstrip().startswith("#")):
            dumped.pop()  # trailing comments stay in the original text
        lines = [first_prefix + dumped[0]] if dumped else []
        lines += [(" " * column + line) if line.strip() else line for line in dumped[1:]]
        return "".join(lines)

    def _key_bounds(self, old: CommentedMap, bound: int) -> dict[Any, tuple[int, int, int]]:
        """key -> (line, column, bound) of each key of `old`; bound is where the next key starts."""
        keys = list(old.keys())
        found = {}
        for position, key in enumerate(keys):
            line, column = old.lc.key(key)
            following = old.lc.key(keys[position + 1])[0] if position + 1 < len(keys) else bound
            found[key] = (line, column, following)
        return found

    def mapping(self, old: CommentedMap, new: CommentedMap, bound: int) -> None:
        if _flow(old) or _flow(new) or not old:
            raise _Unsplicable("flow or empty mapping changed")
        if old.merge or _anchored(old):
            raise _Unsplicable("a changed mapping takes part in a YAML anchor or merge key")
        places = self._key_bounds(old, bound)
        for key, (line, column, following) in places.items():
            if key not in new:
                if self.lines[line][:column].strip():
                    raise _Unsplicable("removed first key of a sequence item")
                end = self._content_end(line, following)
                self.ops.append(_Op(line, end, self._kept_comments(line, end, column)))
            elif _plain(old[key]) != _plain(new[key]) or type(old[key]) is not type(new[key]):
                self.value(old, new, key, line, column, following)
        added = [key for key in new if key not in old]
        if added:
            last_line, column, last_bound = places[list(old.keys())[-1]]
            at = self._content_end(last_line, last_bound)
            text = "".join(self._fragment(key, new[key], new, column, " " * column) for key in added)
            self.ops.append(_Op(at, at, text))

    def value(self, old_parent: CommentedMap, new_parent: CommentedMap, key: Any, line: int, column: int, bound: int) -> None:
        old, new = old_parent[key], new_parent[key]
        # an empty mapping (`rayStartParams: {}`) has no lines of its own to descend into: its key is rewritten
        if isinstance(old, CommentedMap) and isinstance(new, CommentedMap) and old and not (_flow(old) or _flow(new)):
            self.mapping(old, new, bound)
            return
        if (isinstance(old, CommentedSeq) and isinstance(new, CommentedSeq) and old and not (_flow(old) or _flow(new))
                and (len(new) - len(old) == sum(1 for item in new if _inserted(item)) or _appended(old, new))):
            self.sequence(old, new, bound)
            return
        end = self._content_end(line, bound)
        self.ops.append(_Op(line, end, self._fragment(key, new, new_parent, column, self.lines[line][:column])))

    def sequence(self, old: CommentedSeq, new: CommentedSeq, bound: int) -> None:
        """Items changed in place are descended into; items the migration inserted are dumped before their successor."""
        if _anchored(old):
            raise _Unsplicable("a changed sequence is a YAML anchor")
        if _appended(old, new):
            at = self._content_end(old.lc.item(len(old) - 1)[0], bound)
            column = self._dash_column(old)
            self.ops.append(_Op(at, at, "".join(self._item_fragment(item, column) for item in new[len(old):])))
            return
        kept = [item for item in new if not _inserted(item)]
        if len(kept) != len(old):
            raise _Unsplicable("sequence items removed or replaced")
        for index, (before, after) in enumerate(zip(old, kept)):
            if _plain(before) == _plain(after) and type(before) is type(after):
                continue
            if not (isinstance(before, CommentedMap) and isinstance(after, CommentedMap)):
                raise _Unsplicable("a sequence item other than a mapping changed")
            following = old.lc.item(index + 1)[0] if index + 1 < len(old) else bound
            self.mapping(before, after, following)
        position = 0
        for item in new:
            if not _inserted(item):
                position += 1
                continue
            if position < len(old):
                at = old.lc.item(position)[0]
            else:
                at = self._content_end(old.lc.item(len(old) - 1)[0], bound)
            self.ops.append(_Op(at, at, self._item_fragment(item, self._dash_column(old))))

    def _dash_column(self, seq: CommentedSeq) -> int:
        line, column = seq.lc.item(0)
        dash = self.lines[line][:column].rfind("-")
        if dash < 0:
            raise _Unsplicable("no dash before the first item")
        return dash

    def _item_fragment(self, item: Any, dash_column: int) -> str:
        out = io.StringIO()
        self.yaml.dump(CommentedSeq([item]), out)
        dumped = out.getvalue().splitlines(keepends=True)
        first = next(line for line in dumped if line.lstrip().startswith("-"))
        shift = len(first) - len(first.lstrip(" "))
        return "".join(" " * dash_column + line[shift:] if line.strip() else line for line in dumped)

    def result(self) -> str:
        out: list[str] = []
        cursor = 0
        for op in sorted(self.ops, key=lambda o: (o.start, o.end)):
            if op.start < cursor:
                raise _Unsplicable("overlapping edits")
            out.extend(self.lines[cursor:op.start])
            out.append(op.text)
            cursor = op.end
        out.extend(self.lines[cursor:])
        return "".join(out)


def splice(original_body: str, new_data: Any, yaml: YAML) -> str | None:
    """`original_body` with only the blocks that differ from `new_data` rewritten; None when that is not possible."""
    try:
        old_data = yaml.load(original_body)
        if not (isinstance(old_data, CommentedMap) and isinstance(new_data, CommentedMap)):
            return None
        splicer = _Splicer(original_body, yaml)
        splicer.mapping(old_data, new_data, len(splicer.lines))
        text = splicer.result()
        reparsed = yaml.load(text)
    except (_Unsplicable, YAMLError):
        return None  # the spliced text must mean exactly the edited tree, or the whole document is dumped
    if _plain(reparsed) != _plain(new_data):
        return None
    if not original_body.endswith("\n"):
        text = text.removesuffix("\n")
    return text
