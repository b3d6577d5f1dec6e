"""--feature-gates takes a cluster's whole gate list: modelled gates change the answer, the others are accepted and named."""

from __future__ import annotations

import pytest

from dra_driver.explain import InputError, parse_gates
from dra_driver.explain.gates import DRA_GATES_NOT_MODELLED, GATES


def test_a_pasted_cluster_gate_list_is_accepted() -> None:
    gates = parse_gates("DRAResourceClaimDeviceStatus=true, DRADeviceTaints=true,InPlacePodVerticalScaling=false,DRAPartitionableDevices=true")
    assert gates.device_taints is True
    assert gates.ignored == ("DRAResourceClaimDeviceStatus", "InPlacePodVerticalScaling", "DRAPartitionableDevices")
    note = gates.ignored_note()
    assert "DRAResourceClaimDeviceStatus (device status does not affect allocation)" in note
    assert "InPlacePodVerticalScaling (not a DRA allocation gate)" in note
    assert note.endswith("those that do: " + ", ".join(sorted(GATES)))


def test_every_dra_gate_of_the_version_is_known() -> None:
    assert not set(GATES) & set(DRA_GATES_NOT_MODELLED)
    for name in [*GATES, *DRA_GATES_NOT_MODELLED]:
        parse_gates(f"{name}=true")  # none refused


def test_a_misspelt_modelled_gate_is_named_with_its_likely_meaning() -> None:
    gates = parse_gates("DRAAdminAcess=false")
    assert gates.admin_access is True  # not applied: the answer would be wrong silently otherwise
    assert "did you mean 'DRAAdminAccess'?" in gates.ignored_note()


@pytest.mark.parametrize("text", ["dra-admin-access=true", "DRAAdminAccess", "DRAAdminAccess=yes"])
def test_malformed_entries_are_refused(text: str) -> None:
    with pytest.raises(InputError, match="--feature-gates"):
        parse_gates(text)


def test_the_note_reaches_the_user(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from dra_driver.cli.main import main

    code = main(["explain", "missing.yaml", "--profile", "l4", "--feature-gates", "DRAPrioritizedList=true"])
    err = capsys.readouterr().err
    assert code == 2 and "note: feature gates that do not change this answer: DRAPrioritizedList (firstAvailable is always evaluated)" in err
