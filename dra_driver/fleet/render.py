"""FleetView -> a table for people, or JSON/YAML for tools (everything, every device)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.fleet.model import STATES, DeviceRow, FleetView, Holder

DEVICE_NAMES = 6  # free devices named per row in the class section of the table


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart, no trailing blanks."""
    table = [list(header), *[list(r) for r in rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in table]


def _pods(holder: Holder) -> str:
    return ",".join(f"{p.name}({p.phase})" if p.phase and p.phase != "Running" else p.name for p in holder.pods) or "-"


def _device_rows(view: FleetView) -> list[list[str]]:
    """-o wide: every device with its pool, memory, state, holders and their pods, and why it is not free."""
    rows = []
    for d in sorted(view.devices, key=lambda d: (d.node, d.driver, d.pool)):  # the summary's order; stable within a pool
        claims = ",".join(dict.fromkeys(h.label for h in d.holders)) or "-"
        pods = ",".join(p for p in (_pods(h) for h in d.holders) if p != "-") or "-"
        why = ",".join([*d.taints, *([f"blocked by {d.blocked_by}"] if d.blocked_by else [])]) or "-"
        rows.append([d.node, d.pool, d.driver, d.device, d.kind, d.memory or "-", d.state, claims, pods, why])
    return rows


def _holder_rows(view: FleetView) -> list[list[str]]:
    rows = []
    for device in view.devices:
        for holder in device.holders:
            request = holder.request + (" (admin)" if holder.admin_access else "")
            rows.append([device.node, device.driver, device.device, holder.label, request, _pods(holder)])
    return rows


def _free_by_group(devices: Sequence[DeviceRow]) -> list[list[str]]:
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for device in devices:
        if device.state == "free":
            grouped.setdefault((device.node, device.driver, device.kind), []).append(device.device)
    rows = []
    for (node, driver, kind), names in sorted(grouped.items()):
        shown = ", ".join(names[:DEVICE_NAMES]) + (f", ... (+{len(names) - DEVICE_NAMES})" if len(names) > DEVICE_NAMES else "")
        rows.append([node, driver, kind, str(len(names)), shown])
    return rows


def totals_line(view: FleetView) -> str:
    totals = {state: sum(g.counts[state] for g in view.groups) for state in STATES}
    line = f"Fleet: {', '.join(view.sources)}: {sum(totals.values())} devices on {view.nodes} nodes"
    line += " (" + ", ".join(f"{totals[s]} {s}" for s in STATES) + ")"
    return line + (f"; only devices of class {view.device_class}" if view.device_class else "")


@dataclass(frozen=True)
class Section:
    """One part of the table view: a heading (empty for the first part) and its rows."""

    heading: str
    header: tuple[str, ...]
    rows: list[list[str]]


GROUP_HEADER = ("NODE", "DRIVER", "KIND", "TOTAL", "ALLOCATED", "FREE", "OVERLAPPING", "TAINTED", "BLOCKED")


DEVICE_HEADER = ("NODE", "POOL", "DRIVER", "DEVICE", "KIND", "MEMORY", "STATE", "CLAIMS", "PODS", "WHY")


def sections(view: FleetView, wide: bool = False) -> list[Section]:
    """The parts of the table view in order; the table, HTML and SVG outputs all show these.

    `wide` (-o wide) adds, after the summary, one row per device with what the summary leaves out.
    """
    parts = [Section("", GROUP_HEADER, [[g.node, g.driver, g.kind, str(g.total), *(str(g.counts[s]) for s in STATES)] for g in view.groups])]
    if wide and view.devices:
        parts.append(Section("Devices:", DEVICE_HEADER, _device_rows(view)))
    used = [c for c in view.counters if c.in_use]
    if used:
        rows = [[c.node, c.pool, c.counter_set, c.counter, c.total, c.used, c.left] for c in used]
        parts.append(
            Section(
                "Shared counters in use (-o json lists every counter):", ("NODE", "POOL", "COUNTER SET", "COUNTER", "TOTAL", "USED", "LEFT"), rows
            )
        )
    shared = [
        [d.node, d.driver, d.device, s.capacity, s.total, s.used, s.left, str(len(d.holders))] for d in view.devices if d.holders for s in d.shared
    ]
    if shared:
        parts.append(
            Section(
                "Shared devices in use (several claims each take part of a capacity):",
                ("NODE", "DRIVER", "DEVICE", "CAPACITY", "TOTAL", "USED", "LEFT", "CLAIMS"),
                shared,
            )
        )
    holders = _holder_rows(view)
    if holders:
        parts.append(Section("Held devices:", ("NODE", "DRIVER", "DEVICE", "CLAIM", "REQUEST", "PODS"), holders))
    if view.unpublished:
        rows = [[u.driver, u.pool, u.device, u.holder.label] for u in view.unpublished]
        parts.append(
            Section("Allocations naming devices no slice publishes (removed devices or stale pools):", ("DRIVER", "POOL", "DEVICE", "CLAIM"), rows)
        )
    if view.device_class:
        free = _free_by_group(view.devices)
        heading = f"Free devices matching class {view.device_class}:" if free else f"No free device matches class {view.device_class}."
        parts.append(Section(heading, ("NODE", "DRIVER", "KIND", "FREE", "DEVICES") if free else (), free))
    return parts


def to_table(view: FleetView, wide: bool = False) -> str:
    lines = [totals_line(view)]
    for part in sections(view, wide):
        lines += ["", part.heading] if part.heading else [""]
        if part.header:
            lines += format_table(part.header, part.rows)
    lines += [f"Note: {note}" for note in view.notes]
    return "\n".join(lines) + "\n"


def _holder_json(holder: Holder) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": holder.namespace,
        "claim": holder.claim,
        "request": holder.request,
        "pods": [{"name": p.name, **({"phase": p.phase} if p.phase else {})} for p in holder.pods],
    }
    if holder.admin_access:
        out["adminAccess"] = True
    return out


def _device_json(device: DeviceRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "node": device.node,
        "driver": device.driver,
        "pool": device.pool,
        "device": device.device,
        "kind": device.kind,
        "vendor": device.vendor,
        "state": device.state,
    }
    if device.memory:
        out["memory"] = device.memory
    if device.holders:
        out["holders"] = [_holder_json(h) for h in device.holders]
    if device.taints:
        out["taints"] = device.taints
    if device.blocked_by:
        out["blockedBy"] = device.blocked_by
    if device.shared:
        out["shared"] = [{"capacity": s.capacity, "total": s.total, "used": s.used, "left": s.left} for s in device.shared]
    return out


def to_data(view: FleetView) -> dict[str, Any]:
    """The whole view as plain data (camelCase keys), for -o json and -o yaml."""
    return {
        "sources": view.sources,
        "deviceClass": view.device_class,
        "summary": [{"node": g.node, "driver": g.driver, "kind": g.kind, "total": g.total, **g.counts} for g in view.groups],
        "counters": [
            {
                "node": c.node,
                "driver": c.driver,
                "pool": c.pool,
                "counterSet": c.counter_set,
                "counter": c.counter,
                "total": c.total,
                "used": c.used,
                "left": c.left,
            }
            for c in view.counters
        ],
        "devices": [_device_json(d) for d in view.devices],
        "unpublishedAllocations": [{"driver": u.driver, "pool": u.pool, "device": u.device, **_holder_json(u.holder)} for u in view.unpublished],
        "notes": view.notes,
    }
