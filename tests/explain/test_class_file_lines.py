"""DeviceClasses a user wrote name each bad field at its own file line, as claims do: in a `--classes` file,
in a fleet file, in explain's own file, for `dra-driver fleet CLASS`, and through cel/classes.py's loader."""

from __future__ import annotations

from pathlib import Path

import pytest
from explain_testlib import explain

from dra_driver.cel.classes import load_device_classes
from dra_driver.cli.main import main
from dra_driver.common.errors import ValidationError

CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: one-gpu
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
"""

# Two bad classes after a comment and a good one, so that no line is the document's first.
BAD_CLASSES = """\
# classes a user wrote
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: fine
spec:
  selectors:
  - cel:
      expression: device.driver == "gpu.nvidia.com"
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: typo
spec:
  selectors:
  - cel:
      expression: device.driver == "gpu.nvidia.com"
  selektors: []
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: flat-selector
spec:
  selectors:
  - expression: device.driver == "gpu.nvidia.com"
"""


EXPECTED = {  # where -> (what the field's line starts with, the fix the error gives)
    "DeviceClass typo.spec.selektors": ("selektors:", "remove it"),
    "DeviceClass flat-selector.spec.selectors[0].expression": ("- expression:", "move it under `cel:`"),
}


def _check_named_lines(text: str, path: Path, lines: list[str], expected: tuple[str, ...] = tuple(EXPECTED)) -> None:
    """Each bad field's error: `path:N: DeviceClass name.field: fix`, N the line of the field's key."""
    numbered = dict(enumerate(text.splitlines(), start=1))
    assert len(lines) == len(expected), lines
    for where in expected:
        key, fix = EXPECTED[where]
        line = next(line for line in lines if f": {where}: " in line)
        number = int(line.split(f"{path}:", 1)[1].split(":", 1)[0])
        assert numbered[number].strip().startswith(key) and fix in line, (where, line)


@pytest.fixture
def claim(tmp_path: Path) -> Path:
    path = tmp_path / "claim.yaml"
    path.write_text(CLAIM)
    return path


def test_a_classes_file_names_each_bad_field_at_its_line(tmp_path: Path, claim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    classes = tmp_path / "classes.yaml"
    classes.write_text(BAD_CLASSES)
    code, out, err = explain(capsys, claim, "--profile", "dgx-h100", "--classes", classes)
    assert code == 2 and out == ""
    _check_named_lines(BAD_CLASSES, classes, err.splitlines())


def test_a_fleet_file_names_each_bad_class_field_at_its_line(tmp_path: Path, claim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(BAD_CLASSES)
    code, out, err = explain(capsys, claim, "--fleet", fleet)
    assert code == 2 and out == ""
    _check_named_lines(BAD_CLASSES, fleet, err.splitlines())


def test_the_explained_file_names_its_own_class_fields_at_their_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = CLAIM + "---\n" + BAD_CLASSES
    path = tmp_path / "claim-and-classes.yaml"
    path.write_text(text)
    code, _, err = explain(capsys, path, "--profile", "dgx-h100")
    assert code == 2
    _check_named_lines(text, path, err.splitlines())


def test_fleet_class_view_names_the_fleet_files_class_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(BAD_CLASSES)
    assert main(["fleet", "fine", "--fleet", str(fleet)]) == 2
    _check_named_lines(BAD_CLASSES, fleet, capsys.readouterr().err.splitlines())


def test_an_api_rule_names_the_class_at_its_first_line(tmp_path: Path, claim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Errors from the API's rules (not the shape) name the object's line: the document starts after the comment."""
    text = "# one class\n" + BAD_CLASSES.split("---\n")[0].split("\n", 1)[1].replace("device.driver ==", "device.drivr ==")
    classes = tmp_path / "classes.yaml"
    classes.write_text(text)
    code, _, err = explain(capsys, claim, "--profile", "dgx-h100", "--classes", classes)
    assert code == 2
    assert f"{classes}:2: DeviceClass fine.spec.selectors[0].cel.expression:" in err


def test_the_cel_class_loader_names_file_line_path_and_fix(tmp_path: Path) -> None:
    """cel/classes.py stops at a file's first bad class: one file per bad class, each after a comment."""
    classes = tmp_path / "classes.yaml"
    for where, document in zip(EXPECTED, BAD_CLASSES.split("---\n")[1:], strict=True):
        text = "# a user's class\n" + document
        classes.write_text(text)
        with pytest.raises(ValidationError) as raised:
            load_device_classes([classes])
        _check_named_lines(text, classes, [str(e) for e in raised.value.errors], (where,))
