"""A picture of a plan: its nodes x GPUs, each GPU coloured by the components that hold it (`rlplace plan
--svg`, `rlplace show --svg`).

A per-process table of a 36,864-process plan is unreadable; its picture is read at once because nodes are
folded: consecutive nodes (in node rank order) of one node group whose every GPU is held by the same
components, with the same processes off the GPUs, are one row with their count (`node-0 .. node-511, x512`),
as `kubectl rlplace get` folds its grid. A GPU held by several components (collocated, or a shared GPU) is
split into one stripe per component; a GPU no process holds is drawn empty; processes that hold no GPU (an
env on a CPU node, a robot, a whole-node placement) are counted at the end of their row. The SVG is
self-contained (no script, no external font or style), so a browser, an image viewer and a docs page show it
alike, and each cell carries a tooltip saying which nodes and components it stands for.
"""

from __future__ import annotations

import colorsys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from placement_core.plan import Plan

#: Okabe and Ito's colour-blind-safe palette, then evenly spaced hues for plans of more components.
PALETTE = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999")

CELL = 16
GAP = 3
ROW = CELL + 6
#: Pixels per character of the 12 px font (for the label column's width and the legend's spacing).
CHAR = 7
MARGIN = 16
FONT_FAMILY = "DejaVu Sans, Helvetica, Arial, sans-serif"


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One row of the picture: one node, or consecutive nodes of one group that look the same."""

    group: str
    first_node: str
    last_node: str
    count: int
    gpus: tuple[tuple[str, ...], ...]
    """Per local GPU, the components holding it on each of these nodes, in the plan's component order."""
    off_gpu: tuple[tuple[str, int], ...]
    """Per component with processes here that hold no GPU: its name and processes per node."""

    @property
    def label(self) -> str:
        if self.count == 1:
            return self.first_node
        return f"{self.first_node} .. {self.last_node}, x{self.count}"


def plan_rows(plan: Plan, gpus_per_node: Mapping[int, int] | None = None) -> list[NodeRow]:
    """The picture's rows in node rank order. `gpus_per_node` (node rank -> GPUs) draws the GPUs no process
    holds too; without it (a stored plan) a node shows up to its highest GPU held."""
    order = {name: index for index, name in enumerate(plan.names)}
    held: dict[int, dict[int, set[str]]] = {}
    off: dict[int, dict[str, int]] = {}
    names: dict[int, str] = {}
    groups: dict[int, str] = {}
    for component in plan.components:
        for process in component.processes:
            node = process.node_rank
            names.setdefault(node, process.node_name)
            groups.setdefault(node, process.placement.node_group_label)
            gpus = process.held_gpus
            if gpus:
                for gpu in gpus:
                    held.setdefault(node, {}).setdefault(gpu, set()).add(component.name)
            else:
                counts = off.setdefault(node, {})
                counts[component.name] = counts.get(component.name, 0) + 1
    rows: list[NodeRow] = []
    for node in sorted(names):
        on_node = held.get(node, {})
        width = (gpus_per_node or {}).get(node, 0)
        width = max(width, max(on_node, default=-1) + 1)
        gpus = tuple(tuple(sorted(on_node.get(gpu, ()), key=order.__getitem__)) for gpu in range(width))
        off_gpu = tuple(sorted(off.get(node, {}).items(), key=lambda item: order[item[0]]))
        last = rows[-1] if rows else None
        if last is not None and (last.group, last.gpus, last.off_gpu) == (groups[node], gpus, off_gpu):
            rows[-1] = NodeRow(last.group, last.first_node, names[node], last.count + 1, gpus, off_gpu)
        else:
            rows.append(NodeRow(groups[node], names[node], names[node], 1, gpus, off_gpu))
    return rows


def component_colours(names: Sequence[str]) -> dict[str, str]:
    """A colour per component, in plan order: the palette, then evenly spaced hues."""
    colours = {}
    extra = max(len(names) - len(PALETTE), 0)
    for index, name in enumerate(names):
        if index < len(PALETTE):
            colours[name] = PALETTE[index]
        else:
            red, green, blue = colorsys.hls_to_rgb((index - len(PALETTE)) / max(extra, 1), 0.55, 0.6)
            colours[name] = f"#{round(red * 255):02X}{round(green * 255):02X}{round(blue * 255):02X}"
    return colours


def plan_svg(plan: Plan, rows: Sequence[NodeRow], title: str = "") -> str:
    """The plan, drawn as its `plan_rows`, as a self-contained SVG document (see the module docstring)."""
    colours = component_colours(plan.names)
    columns = max((len(row.gpus) for row in rows), default=0)
    grid_width = columns * (CELL + GAP)
    labels = [12 + len(row.label) for row in rows] + [len(f"node group {row.group}") for row in rows]
    label_width = CHAR * max(labels, default=0) + 24
    off_width = max((len(_off_text(row)) for row in rows), default=0) * CHAR
    width = MARGIN * 2 + label_width + grid_width + 24 + off_width
    parts: list[str] = []
    y = MARGIN
    processes = sum(component.world_size for component in plan.components)
    nodes = sum(row.count for row in rows)
    heading = title or f"{plan.mode} plan"
    parts.append(_text(MARGIN, y + 14, f"{heading}: {processes:,} processes on {nodes:,} nodes", bold=True))
    y += 26
    # legend: one swatch per component, with its processes
    x = MARGIN
    for component in plan.components:
        label = f"{component.name} ({component.world_size:,})"
        parts.append(_rect(x, y, CELL, CELL, colours[component.name], component.name))
        parts.append(_text(x + CELL + 5, y + 12, label))
        x += CELL + 5 + CHAR * len(label) + 18
    width = max(width, x + MARGIN)
    y += CELL + 14
    if columns:
        parts.append(_text(MARGIN + label_width, y + 10, "GPU", size=10))
        for gpu in range(columns):
            parts.append(_text(MARGIN + label_width + gpu * (CELL + GAP) + 3, y + 22, str(gpu), size=9))
        y += 26
    group = None
    for row in rows:
        if row.group != group:
            group = row.group
            parts.append(_text(MARGIN, y + 13, f"node group {group}", bold=True))
            y += ROW
        parts.append(_text(MARGIN + 12, y + 12, row.label))
        for gpu, holders in enumerate(row.gpus):
            parts.append(_cell(MARGIN + label_width + gpu * (CELL + GAP), y, holders, colours, row, gpu))
        if row.off_gpu:
            parts.append(_text(MARGIN + label_width + grid_width + 12, y + 12, _off_text(row)))
        y += ROW
    height = y + MARGIN
    head = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}'>\n<title>{escape(heading)}</title>\n"
        f"<rect width='{width}' height='{height}' fill='white'/>\n"
    )
    return head + "\n".join(parts) + "\n</svg>\n"


def _off_text(row: NodeRow) -> str:
    """What the row's nodes run off the GPUs: `off GPU: env x4, reward x1` (processes per node)."""
    if not row.off_gpu:
        return ""
    return "off GPU: " + ", ".join(f"{name} x{count}" for name, count in row.off_gpu)


def _cell(x: int, y: int, holders: tuple[str, ...], colours: Mapping[str, str], row: NodeRow, gpu: int) -> str:
    where = row.first_node if row.count == 1 else f"{row.count} nodes {row.first_node} .. {row.last_node}"
    tip = f"{where}, GPU {gpu}: {', '.join(holders) if holders else 'no process'}"
    if not holders:
        return (
            f"<rect x='{x}' y='{y}' width='{CELL}' height='{CELL}' fill='white' stroke='#BBBBBB'>"
            f"<title>{escape(tip)}</title></rect>"
        )
    stripe = CELL / len(holders)
    stripes = "".join(
        f"<rect x='{x + index * stripe:.2f}' y='{y}' width='{stripe:.2f}' height='{CELL}' fill='{colours[name]}'/>"
        for index, name in enumerate(holders)
    )
    return f"<g><title>{escape(tip)}</title>{stripes}<rect x='{x}' y='{y}' width='{CELL}' height='{CELL}' fill='none' stroke='#333333' stroke-width='0.5'/></g>"


def _rect(x: int, y: int, w: int, h: int, fill: str, tip: str) -> str:
    return f"<rect x='{x}' y='{y}' width='{w}' height='{h}' fill='{fill}'><title>{escape(tip)}</title></rect>"


def _text(x: float, y: float, text: str, *, bold: bool = False, size: int = 12) -> str:
    weight = " font-weight='bold'" if bold else ""
    font = f"font-family='{FONT_FAMILY}' font-size='{size}'"
    return f"<text x={quoteattr(str(x))} y={quoteattr(str(y))} {font}{weight}>{escape(text)}</text>"


#: What a grid cell shows for a GPU no process holds.
FREE = "."


def component_letters(names: Sequence[str]) -> dict[str, str]:
    """One capital letter per component, in plan order: its first letter not taken yet (actor A, rollout R,
    reward E), else the first free letter of the alphabet, else a lower-case one."""
    letters: dict[str, str] = {}
    pool = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    for name in names:
        taken = set(letters.values())
        wanted = [c.upper() for c in name if c.isalpha()] + pool
        letters[name] = next((c for c in wanted if c not in taken), "?")
    return letters


def plan_grid(plan: Plan, rows: Sequence[NodeRow]) -> str:
    """The plan as text, one line per row of `plan_rows`: a letter per GPU for the component holding it, a digit
    for a combination of components sharing it (named under the grid), `.` for a free GPU, and what runs off the
    GPUs at the end of the line. Readable for a 1,024-node job on one screen when its nodes fold."""
    letters = component_letters(plan.names)
    shared: dict[tuple[str, ...], str] = {}
    symbols = [str(d) for d in range(1, 10)] + [chr(c) for c in range(ord("a"), ord("z") + 1)]

    def symbol(holders: tuple[str, ...]) -> str:
        if not holders:
            return FREE
        if len(holders) == 1:
            return letters[holders[0]]
        if holders not in shared:
            shared[holders] = symbols[len(shared)] if len(shared) < len(symbols) else "*"
        return shared[holders]

    cells = [" ".join(symbol(holders) for holders in row.gpus) for row in rows]
    # the column the GPUs start at: after the widest node label and the widest group heading with "GPU "
    start = max([2 + len(row.label) + 4 for row in rows] + [len(f"node group {row.group}") + 5 for row in rows])
    grid_width = max((len(cell) for cell in cells), default=0)
    columns = max((len(row.gpus) for row in rows), default=0)
    lines = ["  ".join(f"{letters[c.name]} {c.name} ({c.world_size})" for c in plan.components)]
    header = " ".join(str(gpu % 10) for gpu in range(columns))
    group = None
    for row, cell in zip(rows, cells, strict=True):
        if row.group != group:
            group = row.group
            gpus = max(len(r.gpus) for r in rows if r.group == group)
            numbers = "GPU " + header[: 2 * gpus - 1] if gpus else ""
            lines.append((f"node group {group}".ljust(start - 4) + numbers).rstrip())
        off = f"   {_off_text(row)}" if row.off_gpu else ""
        lines.append((f"  {row.label}".ljust(start) + cell.ljust(grid_width) + off).rstrip())
    if shared:
        lines.append("shared GPUs: " + ", ".join(f"{s} = {'+'.join(h)}" for h, s in shared.items()))
    return "\n".join(lines) + "\n"
