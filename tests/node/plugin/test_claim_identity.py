"""A prepared claim's record answers only to its UID, namespace and name together (v1 and v1beta1)."""

from __future__ import annotations

import pytest
from tests.node.example_backend import DRIVER

from dra_driver.node.checkpoint import PREPARE_STARTED, Checkpoint, CheckpointDevice, ClaimRecord
from dra_driver.backend.interface import ClaimRef

VERSIONS = ["v1.DRAPlugin", "v1beta1.DRAPlugin"]


def reread(node) -> Checkpoint:
    checkpoint = Checkpoint(node.paths.checkpoint, node.settings.boot_id_path)
    checkpoint.load()
    return checkpoint


def impostors(ref: ClaimRef) -> list[ClaimRef]:
    return [ClaimRef("other", ref.name, ref.uid), ClaimRef(ref.namespace, "impostor", ref.uid), ClaimRef("other", "impostor", ref.uid)]


@pytest.mark.parametrize("version", VERSIONS)
def test_prepare_naming_another_claim_with_a_prepared_uid_gets_nothing(node, version):
    ref = node.add_claim("job", {"gpu": ["gpu-0"]})
    conn = node.connect(only=version)
    assert conn.prepare([ref]).claims[ref.uid].error == ""
    for wrong in impostors(ref):
        entry = conn.prepare([wrong]).claims[ref.uid]
        assert list(entry.devices) == []
        assert f"prepare of ResourceClaim {wrong.namespace}/{wrong.name} refused" in entry.error
        assert "prepared on this node for ResourceClaim default/job" in entry.error
    assert [op for op, _ in node.backend.calls] == ["reconcile", "prepare"]
    assert reread(node).get(ref.uid).completed


@pytest.mark.parametrize("version", VERSIONS)
def test_unprepare_naming_another_claim_leaves_the_holder_running(node, version):
    ref = node.add_claim("job", {"gpu": ["gpu-1"]})
    other = node.add_claim("other", {"gpu": ["gpu-2"]})
    conn = node.connect(only=version)
    assert conn.prepare([ref, other]).claims[ref.uid].error == ""
    spec = node.cdi_dir / f"k8s.{DRIVER}-device_{ref.uid}.json"
    for wrong in impostors(ref):
        answer = conn.unprepare([wrong, other])  # the bad claim fails alone
        assert "unprepare of ResourceClaim" in answer.claims[ref.uid].error and "nothing was changed" in answer.claims[ref.uid].error
        assert answer.claims[other.uid].error == ""
        other_answer = conn.prepare([other])  # prepared again for the next round
        assert other_answer.claims[other.uid].error == ""
    assert spec.exists()
    record = reread(node).get(ref.uid)
    assert record is not None and record.completed
    assert not any(op == "unprepare" and data["uid"] == ref.uid for op, data in node.backend.calls)
    assert conn.unprepare([ref]).claims[ref.uid].error == ""  # the real claim still can
    assert not spec.exists()


def test_an_interrupted_record_of_another_claim_is_not_undone_by_a_mismatched_prepare(node):
    """A PrepareStarted record is undone before a prepare afresh: not when the call names another claim."""
    ref = node.add_claim("job", {"gpu": ["gpu-3"]})
    node.daemon.plugins[DRIVER].service._checkpoint.put(  # as a failed attempt leaves it
        ClaimRecord(ref.uid, "default", "job", PREPARE_STARTED, [CheckpointDevice("gpu", "node-a", "gpu-3")], backend_state={"x": 1})
    )
    entry = node.connect().prepare([ClaimRef("other", "job", ref.uid)]).claims[ref.uid]
    assert "refused" in entry.error
    assert not any(op == "unprepare" for op, _ in node.backend.calls)
    assert reread(node).get(ref.uid).phase == PREPARE_STARTED
