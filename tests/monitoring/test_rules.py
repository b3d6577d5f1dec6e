"""The alerts and dashboard of deploy/monitoring, checked by the real tools: promtool check/test rules."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.monitoring.manifests import DOC, UNIT_TESTS, alerts, dashboard, promtool, rendered, write_rules


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    result = subprocess.run([promtool(), "check", "rules", str(write_rules(tmp_path))], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_promtool_unit_tests_of_every_alert_pass(tmp_path: Path) -> None:
    write_rules(tmp_path)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    result = subprocess.run([promtool(), "test", "rules", UNIT_TESTS.name], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    cases = [case for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    for alert in alerts():
        name = alert["alert"]
        assert any(c["alertname"] == name and c["exp_alerts"] for c in cases), f"{name}: no unit test where it fires"
        assert any(c["alertname"] == name and not c["exp_alerts"] for c in cases), f"{name}: no unit test where it stays quiet"


def test_every_alert_has_severity_summary_description_and_a_runbook_section() -> None:
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in DOC.read_text().splitlines()
        if line.startswith("#")
    }
    for alert in alerts():
        assert alert["labels"]["severity"] in ("critical", "warning"), alert["alert"]
        annotations = alert["annotations"]
        assert annotations["summary"] and annotations["description"], alert["alert"]
        page, anchor = annotations["runbook"].split("#")
        assert page == "docs/monitoring.md" and anchor == alert["alert"].lower() and anchor in headings, alert["alert"]


def test_monitors_select_the_pods_deploy_runs_and_drop_colliding_target_labels() -> None:
    monitors = {o["metadata"]["name"]: o for o in rendered() if o["kind"] == "PodMonitor"}
    assert set(monitors) == {"dra-driver-kubelet-plugin", "dra-driver-fleet-exporter"}
    for name, monitor in monitors.items():
        assert monitor["metadata"]["namespace"] == "dra-driver"
        assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": name}
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        # The series carry namespace/pod of claims: a target label of the same name would shadow them.
        assert {"action": "labeldrop", "regex": "namespace|pod|container"} in endpoint["relabelings"]


def test_dashboard_is_a_grafana_dashboard_with_a_query_per_panel() -> None:
    board = dashboard()
    assert board["uid"] == "dra-driver" and board["templating"]["list"][0]["type"] == "datasource"
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    assert all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in panels)
    titles = {p["title"] for p in panels}
    assert {"Fleet allocation by class", "Per-node allocation (heat map)", "Per-claim utilization", "Prepare latency"} <= titles
    (latency,) = [p for p in panels if p["title"] == "Prepare latency"]
    assert all("histogram_quantile" in t["expr"] and "dra_driver_request_duration_seconds_bucket" in t["expr"] for t in latency["targets"])
