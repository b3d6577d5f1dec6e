"""FleetView -> a picture: a self-contained SVG, or an HTML page with that SVG and the table view's parts.

For a report or a ticket: no server, no script, no stylesheet or font fetched; the HTML page carries its
style inline and the SVG inside it. Every name comes from the cluster (nodes, pools, devices, claims, pods),
so each one goes through `_text`: XML-escaped, and characters XML cannot carry replaced.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator, Sequence

from dra_driver.fleet.model import STATES, DeviceRow, FleetView, GroupRow, State
from dra_driver.fleet.render import sections, totals_line

COLOURS: dict[State, str] = {
    "allocated": "#3366cc",
    "free": "#33a02c",
    "overlapping": "#b2df8a",
    "tainted": "#ff7f00",
    "blocked": "#999999",
}
CELL = 12  # one device's square, gap included
PER_LINE = 48  # devices per line of a group before it wraps
LABEL_WIDTH = 420
LINE_HEIGHT = 18
FONT = "font-family:sans-serif;font-size:12px"
# Characters XML 1.0 cannot carry at all (control characters but tab/newline/CR, surrogates, U+FFFE/U+FFFF).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(value: str) -> str:
    """A name from the cluster as XML/HTML text or attribute value: escaped, never markup."""
    return html.escape(_NOT_XML.sub("\ufffd", value), quote=True)


def _device_title(device: DeviceRow) -> str:
    parts = [f"{device.pool}/{device.device}: {device.state}"]
    parts += [f"{h.label} ({h.request})" + (f" pods {','.join(p.name for p in h.pods)}" if h.pods else "") for h in device.holders]
    parts += [f"taint {t}" for t in device.taints]
    if device.blocked_by:
        parts.append(f"blocked by {device.blocked_by}")
    return "; ".join(parts)


def _group_devices(view: FleetView) -> dict[tuple[str, str, str], list[DeviceRow]]:
    """Devices per group row (node, driver, kind), in state order so each group reads like its counts."""
    grouped: dict[tuple[str, str, str], list[DeviceRow]] = {}
    for device in view.devices:
        grouped.setdefault((device.node, device.driver, device.kind), []).append(device)
    order = {state: i for i, state in enumerate(STATES)}
    for devices in grouped.values():
        devices.sort(key=lambda d: order[d.state])
    return grouped


def _counts_text(group: GroupRow) -> str:
    return f"{group.total} total: " + ", ".join(f"{group.counts[s]} {s}" for s in STATES)


def _group_svg(group: GroupRow, devices: Sequence[DeviceRow], top: int) -> tuple[list[str], int]:
    """One group: its label and counts on a line, then a square per device, coloured by state."""
    out = [
        f'<g class="group" data-node="{_text(group.node)}" data-driver="{_text(group.driver)}" data-kind="{_text(group.kind)}">',
        f'<text x="0" y="{top + 13}" style="{FONT};font-weight:bold">{_text(f"{group.node}  {group.driver}  {group.kind}")}</text>',
        f'<text x="{LABEL_WIDTH}" y="{top + 13}" style="{FONT}">{_text(_counts_text(group))}</text>',
    ]
    top += LINE_HEIGHT
    for i, device in enumerate(devices):
        x, y = (i % PER_LINE) * CELL, top + (i // PER_LINE) * CELL
        out.append(
            f'<rect x="{x}" y="{y}" width="{CELL - 2}" height="{CELL - 2}" fill="{COLOURS[device.state]}" '
            f'data-state="{device.state}"><title>{_text(_device_title(device))}</title></rect>'
        )
    lines = max(1, -(-len(devices) // PER_LINE))
    out.append("</g>")
    return out, top + lines * CELL + 8


def _legend(top: int) -> list[str]:
    out = []
    for i, state in enumerate(STATES):
        x = i * 110
        out.append(f'<rect x="{x}" y="{top}" width="{CELL - 2}" height="{CELL - 2}" fill="{COLOURS[state]}"/>')
        out.append(f'<text x="{x + CELL + 2}" y="{top + 10}" style="{FONT}">{state}</text>')
    return out


def to_svg(view: FleetView) -> str:
    """The allocation view as one SVG document: totals, a legend, and per node, driver and kind a square per device."""
    body = [f'<text x="0" y="14" style="{FONT};font-weight:bold">{_text(totals_line(view))}</text>', *_legend(24)]
    top = 24 + LINE_HEIGHT + 6
    grouped = _group_devices(view)
    for group in view.groups:
        lines, top = _group_svg(group, grouped.get((group.node, group.driver, group.kind), []), top)
        body += lines
    for note in view.notes:
        body.append(f'<text x="0" y="{top + 13}" style="{FONT}">{_text(f"Note: {note}")}</text>')
        top += LINE_HEIGHT
    width = max(LABEL_WIDTH + 360, PER_LINE * CELL)
    head = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + 4}" viewBox="0 0 {width} {top + 4}" role="img">'
    return "\n".join([head, f"<title>{_text(totals_line(view))}</title>", *body, "</svg>"]) + "\n"


def _table_html(header: Sequence[str], rows: Sequence[Sequence[str]]) -> Iterator[str]:
    yield "<table>"
    yield "<tr>" + "".join(f"<th>{_text(cell)}</th>" for cell in header) + "</tr>"
    for row in rows:
        yield "<tr>" + "".join(f"<td>{_text(cell)}</td>" for cell in row) + "</tr>"
    yield "</table>"


STYLE = (
    "body{font-family:sans-serif;margin:1.5em}"
    "table{border-collapse:collapse;margin:.5em 0 1.5em}"
    "th,td{border:1px solid #ccc;padding:2px 8px;text-align:left;font-size:13px}"
    "th{background:#f0f0f0}"
)


def to_html(view: FleetView) -> str:
    """One HTML page: the SVG picture, then every part of the table view as an HTML table, then the notes."""
    title = _text(totals_line(view))
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head><meta charset="utf-8"/>',
        # Nothing may be fetched: no scripts at all, styles and images only from this page itself.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\"/>",
        f"<title>{title}</title><style>{STYLE}</style></head>",
        "<body>",
        f"<h1>{title}</h1>",
        to_svg(view).rstrip("\n"),
    ]
    for part in sections(view):
        if part.heading:
            out.append(f"<h2>{_text(part.heading)}</h2>")
        if part.header:
            out += _table_html(part.header, part.rows)
    out += [f"<p>{_text(f'Note: {note}')}</p>" for note in view.notes]
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"
