"""Another driver publishing under this driver's name on this node: detected, and the publisher stands down."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from tests.node.publisher.conftest import DRIVER, NODE, Source, eventually, slices

from dra_driver.simulation.api_server import SimApiServer
from dra_driver.node.checks.same_name import OWNER_LABEL, OWNER_VALUE, written_by_other
from dra_driver.node.publisher import SlicePublisher
from dra_driver.node.publisher.publisher import SameNameConflict

Build = Callable[..., SlicePublisher]


def other_drivers_slice(name: str = "node-a-gpu.example.com-theirs", manager: str = "gpu-kubelet-plugin") -> dict[str, Any]:
    """What the vendor's own driver writes: same node, driver and pool, no label of ours, its own field manager."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "managedFields": [{"manager": manager, "operation": "Update", "apiVersion": "resource.k8s.io/v1"}]},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 7, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }


def test_slices_are_labelled_as_ours(server: SimApiServer, make_publisher: Build) -> None:
    make_publisher(Source(3)).sync_once()
    assert all(o["metadata"]["labels"][OWNER_LABEL] == OWNER_VALUE for o in slices(server))
    assert not any(written_by_other(o) for o in slices(server))


def test_ownership_rules() -> None:
    assert written_by_other(other_drivers_slice())
    assert not written_by_other(other_drivers_slice(manager="dra-driver"))
    assert written_by_other(other_drivers_slice(manager="OpenAPI-Generator"))  # the Python client's default manager is not ours
    unmanaged = other_drivers_slice()
    del unmanaged["metadata"]["managedFields"]
    assert not written_by_other(unmanaged)  # nothing says who wrote it: ours
    labelled = other_drivers_slice()
    labelled["metadata"]["labels"] = {OWNER_LABEL: OWNER_VALUE}
    assert not written_by_other(labelled)


def test_stands_down_instead_of_deleting_the_other_drivers_slice(
    server: SimApiServer, make_publisher: Build, caplog: pytest.LogCaptureFixture
) -> None:
    publisher = make_publisher(Source(3))
    publisher.sync_once()
    assert len(slices(server)) == 1
    theirs = server.store.put(other_drivers_slice())
    with pytest.raises(SameNameConflict, match="another DRA driver named gpu.example.com runs on node node-a"):
        publisher.sync_once()
    remaining = slices(server)
    assert [o["metadata"]["name"] for o in remaining] == [theirs["metadata"]["name"]]  # ours withdrawn, theirs untouched
    assert remaining[0]["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    writes = dict(publisher.writes)
    with pytest.raises(SameNameConflict):
        publisher.sync_once()
    assert dict(publisher.writes) == writes  # no fight: nothing more written
    assert publisher.withdraw() == 0 and len(slices(server)) == 1  # uninstall leaves the other's slice too
    assert sum("same-name DRA driver" in r.getMessage() for r in caplog.records) == 1  # logged once
    server.store.remove("ResourceSlice", theirs["metadata"]["name"])
    publisher.sync_once()  # the other driver is gone: publishing again
    assert len(slices(server)) == 1 and not written_by_other(slices(server)[0])


def test_running_publisher_waits_for_changes_without_retrying(server: SimApiServer, make_publisher: Build) -> None:
    theirs = server.store.put(other_drivers_slice())
    publisher = make_publisher(Source(3)).start()
    eventually(lambda: publisher.conflicts.get(DRIVER) is not None, what="conflict found")
    server.reset_counters()
    time.sleep(0.5)  # a fighting publisher would write (and a retrying one re-list) many times in this while
    assert server.writes(resource="resourceslices") == 0
    assert [o["metadata"]["name"] for o in slices(server)] == [theirs["metadata"]["name"]]
    server.delete_as_other("ResourceSlice", theirs["metadata"]["name"])  # the watch sees it go
    eventually(lambda: len(slices(server)) == 1 and not written_by_other(slices(server)[0]), what="published after the other left")
    assert publisher.conflicts.get(DRIVER) is None
