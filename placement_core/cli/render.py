"""Text renderers for `rlplace` output that stay fast and exact at any size.

rich lays out a table in about 7 ms, so a plan of 20,000 components would take minutes; and Python's json
module encodes in pure Python as soon as `indent` is given (about 1 s per 10,000 processes). These write
the same layouts directly: tables in rich's heavy-head box style, and JSON indented for its outer levels
with every deeper value on one line from the C encoder. Text is written as given: never wrapped, cut or
interpreted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from rich.cells import cell_len


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """A box-drawn table; columns listed in `right` are right-aligned. Cells never wrap."""
    widths = [cell_len(h) for h in headers]
    for row in rows:
        for index, cell in enumerate(row):
            size = cell_len(cell)
            if size > widths[index]:
                widths[index] = size

    def line(cells: Sequence[str], bar: str) -> str:
        padded = []
        for index, cell in enumerate(cells):
            gap = " " * (widths[index] - cell_len(cell))
            padded.append(f" {gap}{cell} " if index in right else f" {cell}{gap} ")
        return bar + bar.join(padded) + bar

    def rule(left: str, fill: str, cross: str, end: str) -> str:
        return left + cross.join(fill * (w + 2) for w in widths) + end

    out = [rule("┏", "━", "┳", "┓"), line(headers, "┃"), rule("┡", "━", "╇", "┩")]
    out.extend(line(row, "│") for row in rows)
    out.append(rule("└", "─", "┴", "┘"))
    return "\n".join(out) + "\n"


def indented_json(data: object, levels: int) -> str:
    """`data` as JSON with its outer `levels` of objects and arrays of objects indented by two spaces, deeper
    values and lists of plain values compact on one line each (the C encoder's speed, one line per process)."""
    return _encode(data, levels, 0, json.JSONEncoder(ensure_ascii=False, check_circular=False).encode)


def _encode(value: object, levels: int, depth: int, compact: Callable[[object], str]) -> str:
    # Lists of plain values (ranks, labels) stay on one line at any depth.
    flat_list = isinstance(value, list) and not all(isinstance(item, dict) for item in value)
    if depth >= levels or not isinstance(value, dict | list) or not value or flat_list:
        return compact(value)
    inner = "  " * (depth + 1)
    if isinstance(value, dict):
        items = [
            f"{inner}{compact(str(key))}: {_encode(item, levels, depth + 1, compact)}" for key, item in value.items()
        ]
        opening, closing = "{", "}"
    else:
        if depth + 1 >= levels:  # the common case, one line per process: no recursion per item
            items = [inner + line for line in map(compact, value)]
        else:
            items = [f"{inner}{_encode(item, levels, depth + 1, compact)}" for item in value]
        opening, closing = "[", "]"
    return opening + "\n" + ",\n".join(items) + "\n" + "  " * depth + closing
