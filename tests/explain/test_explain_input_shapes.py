"""explain on inputs in shapes it does not take as they are: a v1beta1 request, kinds it does not place."""

from __future__ import annotations

from pathlib import Path

import pytest
from explain_testlib import explain

V1BETA1_CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: old-shape
spec:
  devices:
    requests:
    - name: gpu
      deviceClassName: gpu.nvidia.com
      count: 2
"""


def test_v1beta1_request_fields_say_move_under_exactly_at_their_own_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "claim.yaml"
    path.write_text("# a claim written for resource.k8s.io/v1beta1\n" + V1BETA1_CLAIM)
    code, out, err = explain(capsys, path, "--profile", "dgx-h100")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert f"{path}:10: ResourceClaim old-shape.spec.devices.requests[0].deviceClassName:" in lines[0]
    assert f"{path}:11: ResourceClaim old-shape.spec.devices.requests[0].count:" in lines[1]
    assert all("move it under `exactly:`" in line and "remove it" not in line for line in lines)


def test_v1beta1_fields_in_a_list_item_name_their_line_and_other_unknown_fields_say_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: settings\n"
        "- apiVersion: resource.k8s.io/v1\n  kind: ResourceClaim\n  metadata:\n    name: old-shape\n"
        "  spec:\n    devices:\n      requests:\n      - name: gpu\n"
        "        deviceClassName: gpu.nvidia.com\n        count: 2\n        colour: red\n"
    )
    path = tmp_path / "list.yaml"
    path.write_text(text)
    code, _, err = explain(capsys, path, "--profile", "dgx-h100")
    assert code == 2
    numbered = {number: line for number, line in enumerate(text.splitlines(), start=1)}
    by_field = {line.split(".spec.devices.requests[0].")[1].split(":")[0]: line for line in err.splitlines() if ".spec.devices." in line}
    for field, fix in (("deviceClassName", "move it under `exactly:`"), ("count", "move it under `exactly:`"), ("colour", "remove it")):
        line = by_field[field]
        number = int(line.split(f"{path}:")[1].split(":")[0])
        assert numbered[number].strip().startswith(field + ":") and fix in line, (field, line)
