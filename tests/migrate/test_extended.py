"""--strategy extended-resource: workloads untouched, one DeviceClass per resource found."""

from __future__ import annotations

import copy

from migrate_testlib import CORPUS, by_kind, run
from dra_driver.migrate import Action, Options, load_catalog, migrate


def _classes(text: str) -> dict[str, dict]:
    return {c["spec"]["extendedResourceName"]: c for c in by_kind(text, "DeviceClass")}


def test_workloads_stay_byte_identical_and_classes_are_appended() -> None:
    text = (CORPUS / "inference-deployment.yaml").read_text()
    result, report = run(text, strategy="extended-resource")
    assert result.output.startswith(text)
    classes = _classes(result.output)
    assert set(classes) == {"nvidia.com/mig-1g.10gb"}  # nvidia.com/gpu: the shipped extended.gpu.nvidia.com serves it
    assert any(f.subject == "nvidia.com/gpu" and "extended.gpu.nvidia.com" in f.reason for f in report.by_action(Action.NOTE))
    mig = classes["nvidia.com/mig-1g.10gb"]
    assert mig["metadata"]["name"] == "extended.mig-1g.10gb.nvidia.com"
    assert 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"' in [s["cel"]["expression"] for s in mig["spec"]["selectors"]]
    assert len(report.by_action(Action.GENERATED)) == 1


def test_custom_operators_are_covered_without_changes() -> None:
    text = (CORPUS / "custom-operators.yaml").read_text()
    result, _ = run(text, strategy="extended-resource")
    assert result.output.startswith(text)
    assert _classes(result.output) == {}  # only nvidia.com/gpu, which a shipped class serves


def test_idempotent_and_one_class_per_resource() -> None:
    text = (CORPUS / "amd.yaml").read_text() + "---\n" + (CORPUS / "gaudi.yaml").read_text()
    first, _ = run(text, strategy="extended-resource")
    assert set(_classes(first.output)) == {"amd.com/cpx_nps4"}  # amd.com/gpu and habana.ai/gaudi have shipped classes
    second, _ = run(first.output, strategy="extended-resource")
    assert second.output == first.output


def test_shared_resources_are_reported_not_classed() -> None:
    result, report = run((CORPUS / "mig.yaml").read_text(), strategy="extended-resource")
    assert "nvidia.com/gpu.shared" not in _classes(result.output)
    assert any(f.subject == "nvidia.com/gpu.shared" for f in report.by_action(Action.NOT_CONVERTED))


def test_a_shipped_class_name_is_never_reused_for_another_resource() -> None:
    """A catalog whose extended.gpu.nvidia.com serves another resource: the generated class must not take its name."""
    catalog = load_catalog()
    taken = copy.deepcopy(catalog.classes["extended.gpu.nvidia.com"])
    taken["spec"]["extendedResourceName"] = "example.com/other"
    catalog.classes["extended.gpu.nvidia.com"] = taken
    text = (CORPUS / "inference-deployment.yaml").read_text()
    [result], report = migrate([("in.yaml", text)], Options(strategy="extended-resource", catalog=catalog))
    names = [c["metadata"]["name"] for c in by_kind(result.output, "DeviceClass")]
    assert "extended.gpu.nvidia.com" not in names
    assert any(f.subject == "nvidia.com/gpu" and "belongs to an existing DeviceClass" in f.reason
               for f in report.by_action(Action.NOT_CONVERTED))


def test_default_options_know_the_shipped_classes() -> None:
    """A library caller that passes no catalog must not get generated classes under shipped names."""
    [result], report = migrate([("in.yaml", (CORPUS / "inference-deployment.yaml").read_text())],
                               Options(strategy="extended-resource"))
    assert "extended.gpu.nvidia.com" not in {c["metadata"]["name"] for c in by_kind(result.output, "DeviceClass")}
    assert any("extended.gpu.nvidia.com" in f.reason for f in report.by_action(Action.NOTE))
