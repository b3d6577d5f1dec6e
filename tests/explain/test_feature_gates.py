"""--feature-gates takes a cluster's whole gate list: modelled gates change the answer, the other gates 1.35 knows are
accepted and named, a name 1.35 does not know is refused with a did-you-mean."""

from __future__ import annotations

import pytest

from dra_driver.explain import parse_gates
from dra_driver.ingest.errors import InputError
from dra_driver.explain.gates import DRA_GATES_NOT_MODELLED, GATES
from dra_driver.explain.kube_gates import KNOWN_GATES


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
    assert set(GATES) | set(DRA_GATES_NOT_MODELLED) <= KNOWN_GATES
    for name in [*GATES, *DRA_GATES_NOT_MODELLED]:
        parse_gates(f"{name}=true")  # none refused


# Gates of a real 1.35 control plane beyond the DRA ones: kubelet, scheduler, apiserver (k8s.io/apiserver),
# client-go, component-base logging, and the two whose string differs from their Go constant.
@pytest.mark.parametrize(
    "name",
    [
        "InPlacePodVerticalScaling",
        "SchedulerAsyncAPICalls",
        "MutatingAdmissionPolicy",
        "WatchListClient",
        "ContextualLogging",
        "CustomCPUCFSQuotaPeriod",
        "RuntimeClassInImageCriApi",
        "AllAlpha",
    ],
)
def test_real_gates_that_do_not_change_the_answer_are_accepted_and_named(name: str) -> None:
    gates = parse_gates(f"{name}=true")
    assert gates == parse_gates(None)  # the answer's gates are the defaults
    assert f"{name} (not a DRA allocation gate)" in gates.ignored_note()


def test_a_misspelt_modelled_gate_is_refused_with_its_likely_meaning() -> None:
    with pytest.raises(
        InputError, match=r"unknown feature gate 'DRAAdminAcess': Kubernetes 1\.35 has no gate of that name; did you mean 'DRAAdminAccess'\?"
    ):
        parse_gates("DRAAdminAcess=false")  # applying nothing silently would give a wrong answer


@pytest.mark.parametrize(
    ("text", "meant"), [("InPlacePodVerticalScalling=true", "InPlacePodVerticalScaling"), ("dra-consumable-capacity=true", "DRAConsumableCapacity")]
)
def test_an_unknown_gate_suggests_the_known_one(text: str, meant: str) -> None:
    with pytest.raises(InputError, match=f"did you mean '{meant}'"):
        parse_gates(text)


def test_a_name_unlike_any_gate_is_refused_without_a_guess() -> None:
    with pytest.raises(InputError, match="unknown feature gate 'FrobnicateWidgets'") as raised:
        parse_gates("DRADeviceTaints=true,FrobnicateWidgets=true")
    assert "did you mean" not in str(raised.value)


def test_an_unknown_gate_on_the_command_line_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from dra_driver.cli.main import main

    code = main(["explain", "missing.yaml", "--profile", "l4", "--feature-gates", "DRAExtendedResources=true"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown feature gate 'DRAExtendedResources'" in err and "did you mean 'DRAExtendedResource'?" in err


@pytest.mark.parametrize("text", ["dra-admin-access=true", "DRAAdminAccess", "DRAAdminAccess=yes"])
def test_malformed_entries_are_refused(text: str) -> None:
    with pytest.raises(InputError, match="--feature-gates"):
        parse_gates(text)


def test_the_note_reaches_the_user(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from dra_driver.cli.main import main

    code = main(["explain", "missing.yaml", "--profile", "l4", "--feature-gates", "DRAPrioritizedList=true"])
    err = capsys.readouterr().err
    assert code == 2 and "note: feature gates that do not change this answer: DRAPrioritizedList (firstAvailable is always evaluated)" in err
