"""`dra-driver fleet -o html` / `-o svg`: well-formed, self-contained, escaped, and the same view as the table."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from dra_driver.cli.main import main
from dra_driver.fleet import Filters, build_view
from dra_driver.fleet.model import STATES
from dra_driver.fleet.picture import to_html, to_svg
from dra_driver.fleet.render import sections, totals_line
from dra_driver.sources import fleet as fleets

NV = "gpu.nvidia.com"
SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert("x")</script>&\x01'


def held_fleet(tmp_path: Path, pod: str = "web-0", namespace: str = "web") -> Path:
    """Two L4 nodes; a claim on node-1's gpu-0 reserved for `pod`; a tainted gpu-1 on node-0."""
    fleet = fleets.simulated("l4", 2)
    fleet.slices[0]["spec"]["devices"][0]["taints"] = [{"key": f"{NV}/xid", "value": "79", "effect": "NoSchedule"}]
    result = {"request": "gpu", "driver": NV, "pool": "node-1", "device": "gpu-0"}
    claim = {
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": namespace},
        "status": {"allocation": {"devices": {"results": [result]}}, "reservedFor": [{"resource": "pods", "name": pod, "uid": "u"}]},
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([*fleet.slices, claim]))
    return path


def render(capsys: pytest.CaptureFixture[str], path: Path, output: str) -> str:
    assert main(["fleet", "--fleet", str(path), "-o", output]) == 0
    return capsys.readouterr().out


def test_svg_is_well_formed_and_shows_each_device_in_its_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = held_fleet(tmp_path)
    root = ET.fromstring(render(capsys, path, "svg"))
    assert root.tag == f"{SVG}svg"
    data = json.loads(render(capsys, path, "json"))
    groups = root.findall(f"{SVG}g")
    assert [(g.get("data-node"), g.get("data-kind")) for g in groups] == [(s["node"], s["kind"]) for s in data["summary"]]
    for group, summary in zip(groups, data["summary"]):
        states = [r.get("data-state") for r in group.findall(f"{SVG}rect")]
        assert {s: states.count(s) for s in STATES} == {s: summary[s] for s in STATES}
        assert f"{summary['total']} total" in "".join(group.itertext())
    titles = ["".join(t.itertext()) for t in root.iter(f"{SVG}title")]
    assert any("node-1/gpu-0: allocated; web/c (gpu) pods web-0" == t for t in titles)
    assert any(t.startswith("node-0/gpu-0: tainted; taint gpu.nvidia.com/xid=79:NoSchedule") for t in titles)


def test_html_page_carries_every_part_of_the_table_view(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = held_fleet(tmp_path)
    page = render(capsys, path, "html")
    root = ET.fromstring(page.removeprefix("<!DOCTYPE html>\n"))  # the page is well-formed XML as well as HTML
    table = render(capsys, path, "table")
    tables = root.findall(".//table")
    cells = [[["".join(c.itertext()) for c in tr] for tr in t.findall("tr")] for t in tables]
    # Every row of every part of the table output is a row of the page, cell for cell.
    text_rows = [line.split() for line in table.splitlines()[2:] if line and not line.endswith(":")]
    page_rows = [" ".join(cell).split() for t in cells for cell in t]
    assert text_rows == page_rows
    assert root.findtext(".//h1") == table.splitlines()[0]
    assert [h.text for h in root.findall(".//h2")] == ["Held devices:"]


def test_names_from_the_cluster_are_escaped_never_markup() -> None:
    """Names the input layer and the API server would refuse, straight into the view (a library caller, a
    server that validates less): text in the picture and page, never a tag, never a character XML cannot carry."""
    fleet = fleets.simulated("l4", 1)
    device = fleet.slices[0]["spec"]["devices"][0]
    device["name"] = HOSTILE
    result = {"request": "gpu", "driver": NV, "pool": "node-0", "device": HOSTILE}
    reserved = [{"resource": "pods", "name": "<img src=x onerror=alert(1)>", "uid": "u"}]
    fleet.claims = [
        {
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": 'ns"><b>'},
            "status": {"allocation": {"devices": {"results": [result]}}, "reservedFor": reserved},
        }
    ]
    view = build_view(fleet, Filters())
    assert [d.device for d in view.devices if d.state == "allocated"] == [HOSTILE]
    for out in (to_svg(view), to_html(view)):
        assert "<script" not in out and "<b>" not in out and "<img" not in out and "\x01" not in out
        root = ET.fromstring(out.removeprefix("<!DOCTYPE html>\n"))
        assert not [e for e in root.iter() if e.tag.split("}")[-1] in ("script", "b", "img")]
        text = "".join(root.itertext())
        assert '<script>alert("x")</script>&\ufffd' in text and 'ns"><b>/c' in text and "<img src=x onerror=alert(1)>" in text


class _Fetches(HTMLParser):
    """Every attribute that would make a browser fetch something, or run something."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "link", "img", "iframe", "object", "embed"):
            self.found.append((tag, ""))
        self.found += [(tag, name) for name, value in attrs if name in ("src", "href") or name.startswith("on")]


def test_the_page_fetches_and_runs_nothing() -> None:
    view = build_view(fleets.simulated("dgx-h100", 2, "dynamic"), Filters())
    page = to_html(view)
    parser = _Fetches()
    parser.feed(page)
    assert parser.found == []
    assert "default-src 'none'" in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    # Overlapping MIG placements are drawn as such, and the counts agree with the view.
    root = ET.fromstring(to_svg(view))
    states = [r.get("data-state") for g in root.findall(f"{SVG}g") for r in g.findall(f"{SVG}rect")]
    assert states.count("overlapping") == sum(g.counts["overlapping"] for g in view.groups) > 0
    assert len(states) == len(view.devices)
    assert root.findtext(f"{SVG}title") == totals_line(view)
    assert [p.heading for p in sections(view)] == [""]
