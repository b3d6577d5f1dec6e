"""Conflicts the engine refuses, with every problem listed."""

from __future__ import annotations

import pytest
import yaml

from dra_driver.migrate import Action, MigrationError, Options, load_catalog, migrate

POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: a
    image: busybox
    resources:
      limits:
{limits}
"""


def _pod(name: str, limits: str) -> str:
    return POD.format(name=name, limits="\n".join(f"        {line}" for line in limits.splitlines()))


def _migrate(*texts: str) -> None:
    migrate([(f"f{i}.yaml", t) for i, t in enumerate(texts)], Options(catalog=load_catalog()))


def test_amd_gpu_and_partition_in_one_container_is_refused() -> None:
    with pytest.raises(MigrationError, match="amd.com/gpu, amd.com/cpx_nps4") as caught:
        _migrate(_pod("x", "amd.com/gpu: 1\namd.com/cpx_nps4: 1"))
    assert "amd.com/spx_" in str(caught.value)  # the fix: the whole-GPU name under the mixed naming strategy


def test_whole_gpu_and_mig_in_one_container_convert_as_under_the_mixed_strategy() -> None:
    results, report = migrate([("f.yaml", _pod("x", "nvidia.com/gpu: 1\nnvidia.com/mig-1g.10gb: 2"))],
                              Options(catalog=load_catalog()))
    template, pod = yaml.safe_load_all(results[0].output)
    requests = {r["name"]: r["exactly"] for r in template["spec"]["spec"]["devices"]["requests"]}
    assert requests["a-gpu"]["deviceClassName"] == "gpu.nvidia.com" and requests["a-gpu"]["count"] == 1
    assert requests["a-mig-1g-10gb"]["count"] == 2 and "mig" in requests["a-mig-1g-10gb"]["deviceClassName"]
    claims = pod["spec"]["containers"][0]["resources"]["claims"]
    assert sorted(c["request"] for c in claims) == ["a-gpu", "a-mig-1g-10gb"]
    assert any("mixed strategy" in f.reason for f in report.by_action(Action.NOTE))


def test_different_vendors_in_one_container_get_distinct_requests() -> None:
    [result], _ = migrate([("f.yaml", _pod("x", "amd.com/gpu: 1\nnvidia.com/gpu: 1"))], Options(catalog=load_catalog()))
    assert "name: a-gpu\n" in result.output and "name: a-nvidia-gpu\n" in result.output


def test_all_problems_are_reported_together() -> None:
    with pytest.raises(MigrationError) as caught:
        _migrate(_pod("x", "nvidia.com/gpu: 1\nnvidia.com/mig-1g.10gb: 1"), "a: [", _pod("y", "amd.com/gpu: 1\namd.com/spx_nps1: 1"))
    # parse errors are found first and stop before any rewriting
    assert len(caught.value.errors) == 1 and "f1.yaml: document 1" in str(caught.value)
    with pytest.raises(MigrationError) as caught:
        _migrate(_pod("x", "amd.com/gpu: 1\namd.com/cpx_nps4: 1"), _pod("y", "amd.com/gpu: 1\namd.com/qpx_nps1: 1"))
    assert len(caught.value.errors) == 2


def test_generated_template_name_colliding_with_an_existing_one_is_refused() -> None:
    [result], _ = migrate([("f.yaml", _pod("x", "nvidia.com/gpu: 1"))], Options(catalog=load_catalog()))
    name = next(yaml.safe_load_all(result.output))["metadata"]["name"]
    existing = f"apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata:\n  name: {name}\n"
    with pytest.raises(MigrationError, match=name):
        _migrate(existing + "---\n" + _pod("x", "nvidia.com/gpu: 1"))


def test_container_already_referring_to_the_generated_claim_name_is_refused() -> None:
    text = _pod("x", "nvidia.com/gpu: 1").rstrip("\n") + "\n      claims:\n      - name: accelerators\n"
    with pytest.raises(MigrationError, match="already refers to a claim named 'accelerators'"):
        _migrate(text)


def test_invalid_yaml_names_the_line_of_the_file_not_of_the_document() -> None:
    text = _pod("ok", "nvidia.com/gpu: 1") + "---\n# a comment\n\napiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\n   oops: 1\n"
    bad_line = text.splitlines().index("   oops: 1") + 1  # 1-based line of the file
    with pytest.raises(MigrationError) as caught:
        _migrate(text)
    assert f"f0.yaml: document 2: invalid YAML at line {bad_line}, column" in str(caught.value)


def test_files_are_independent_so_alternatives_may_share_workload_names() -> None:
    variants = [_pod("server", "nvidia.com/gpu: 1"), _pod("server", "nvidia.com/gpu: 2")]
    results, _ = migrate([(f"v{i}.yaml", t) for i, t in enumerate(variants)], Options(catalog=load_catalog()))
    counts = [yaml.safe_load_all(r.output).__next__()["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"]
              for r in results]
    assert counts == [1, 2]


def test_a_name_generated_twice_within_one_file_is_still_refused() -> None:
    with pytest.raises(MigrationError, match="generated twice"):
        _migrate(_pod("server", "nvidia.com/gpu: 1") + "---\n" + _pod("server", "nvidia.com/gpu: 1"))


def test_a_changed_device_count_gives_the_template_a_new_name() -> None:
    """The template spec is immutable: re-migrating after a count change must not reuse the applied name."""
    names = []
    for count in (1, 2, 1):
        [result], _ = migrate([("f.yaml", _pod("x", f"nvidia.com/gpu: {count}"))], Options(catalog=load_catalog()))
        template, pod = yaml.safe_load_all(result.output)
        assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template["metadata"]["name"]
        names.append(template["metadata"]["name"])
    assert names[0] != names[1] and names[0] == names[2]
    assert all(name.startswith("x-accelerators-") for name in names)
