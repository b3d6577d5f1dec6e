"""Packages import only downward: the layer table of docs/architecture.md ("Layers"), enforced.

A package may import its own modules and those of packages in lower layers; packages in the same layer
are independent of each other. Imports are read with ast from every module, at module level and inside
functions (tests/packaging/test_import_graph.py's graph), so a late import cannot hide an upward one.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.packaging.test_import_graph import _graph

# Lowest first; docs/architecture.md, "Layers", numbers them from 1.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"dra_driver", "common", "api"}),  # `dra_driver` is the package's own __init__ (__version__)
    frozenset({"model"}),
    frozenset({"ingest"}),
    frozenset({"cel", "kube", "backend"}),
    frozenset({"simulation"}),  # only where a simulated profile is asked for: node/assembly and cli import it lazily
    frozenset({"allocator", "node"}),
    frozenset({"sources"}),
    frozenset({"migrate", "explain"}),
    frozenset({"fleet", "template"}),
    frozenset({"cli", "vendor"}),  # `vendor` is dra_driver/vendor.py, the public face of backend/ for vendor packages
)
ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
# What a command library of layer 9 may ask of explain/, module by module (docs/architecture.md, "Layers"): what the
# tools read (fleet sources, DeviceClasses, input errors) lies below in sources/ and ingest/, so fleet's view asks
# explain nothing and only its exporter asks why claims wait; template checks what it writes with explain's run.
EXPLAIN_USERS: dict[str, frozenset[str]] = {
    "dra_driver.fleet.exporter": frozenset({"dra_driver.explain.pending"}),
    "dra_driver.template": frozenset({"dra_driver.explain", "dra_driver.explain.gates"}),
}


def _package(module: str) -> str:
    """The layer unit of a module: its package right under dra_driver (`dra_driver.node.plugin.x` -> `node`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _layer_of() -> dict[str, int]:
    return {package: level for level, packages in enumerate(LAYERS) for package in packages}


def _upward(graph: dict[str, set[str]], layer_of: dict[str, int]) -> list[str]:
    """Every import of a package in the same or a higher layer than the importer's, as `importer -> imported`."""
    found = []
    for module, deps in sorted(graph.items()):
        mine = _package(module)
        for dep in sorted(deps):
            theirs = _package(dep)
            if theirs != mine and layer_of[theirs] >= layer_of[mine]:
                found.append(f"{module} -> {dep}")
    return found


def _explain_uses(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each module outside explain/ of a package above it that imports explain/, with what it imports there."""
    above = {package for level, packages in enumerate(LAYERS) if level > _layer_of()["explain"] for package in packages} - {"cli", "vendor"}
    uses = {module: {dep for dep in deps if _package(dep) == "explain"} for module, deps in graph.items() if _package(module) in above}
    return {module: found for module, found in uses.items() if found}


def test_the_explain_check_sees_fleet_asking_explain_for_its_readers() -> None:
    graph = {"dra_driver.fleet": {"dra_driver.explain", "dra_driver.sources.fleet_source"}, "dra_driver.fleet.build": {"dra_driver.model.device"}}
    assert _explain_uses(graph) == {"dra_driver.fleet": {"dra_driver.explain"}}


def test_fleet_and_template_ask_explain_only_its_engine() -> None:
    assert _explain_uses(_graph()) == EXPLAIN_USERS


def test_the_checker_sees_an_upward_and_a_sideways_import() -> None:
    graph = {
        "dra_driver.common.x": {"dra_driver.node.y"},  # up
        "dra_driver.fleet.a": {"dra_driver.template.b", "dra_driver.explain.c"},  # sideways, down
        "dra_driver.cli.m": {"dra_driver.common.x"},  # down
    }
    assert _upward(graph, _layer_of()) == ["dra_driver.common.x -> dra_driver.node.y", "dra_driver.fleet.a -> dra_driver.template.b"]


def test_every_package_has_a_layer() -> None:
    assert {_package(module) for module in _graph()} - set(_layer_of()) == set()


def test_no_import_goes_up_or_sideways() -> None:
    assert _upward(_graph(), _layer_of()) == []


def test_the_documented_table_is_this_one() -> None:
    """docs/architecture.md's "Layers" table lists the same packages per layer (numbered from 1, the ground floor)."""
    text = ARCHITECTURE.read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"^\| \d+ \|", line)]
    documented = {int(row.split("|")[1]): frozenset(re.findall(r"`([a-z_]+)/?`", row.split("|")[2])) for row in rows}
    assert documented == dict(enumerate(LAYERS, 1))
