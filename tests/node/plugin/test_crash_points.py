"""kill -9 at every prepare/unprepare point, NVIDIA dynamic MIG recovery, and the socket start order.

What is covered here:
- subprocess daemon (example backend, journal on disk) killed with SIGKILL while one claim waits at each
  named hold point of prepare.py (after-started, after-backend, after-cdi, after-completed) and one in
  unprepare (during-unprepare), all in one process; the restart must roll back exactly the half-prepared
  claims with their recorded backend state, keep the completed ones byte for byte, remove our orphan specs
  and no foreign file, and answer repeated calls as before;
- NVIDIA dynamic MIG (dgx-h100): see test_dynamic_mig_instance_created_before_crash_is_destroyed for the
  in-process model and its limits;
- the DRA socket already serves when the registration socket appears.
"""

from __future__ import annotations

import json
import os
import signal
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from tests.node.plugin.crash_support import hold_at, record_of, registers, start_daemon
from tests.support import eventually
from tests.node.example_backend import DRIVER, journal

from dra_driver.node import cdi
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import ClaimRef

# claim name -> where its operation is when the daemon is killed
PREPARE_POINTS = {"at-started": "after-started", "at-backend": "after-backend", "at-cdi": "after-cdi", "at-completed": "after-completed"}
HALF_PREPARED = ("at-started", "at-backend", "at-cdi")


def _spec(root: Path, uid: str) -> Path:
    return Path(cdi.spec_path(root / "cdi", DRIVER, uid))


def _ids(response, uid: str) -> list[list[str]]:
    entry = response.claims[uid]
    assert entry.error == "", entry.error
    return [list(d.cdi_device_ids) for d in entry.devices]


def test_kill_at_every_point_then_restart(apiserver, root: Path) -> None:
    paths = PluginPaths(root / "kubelet", DRIVER, state_dir=root / "run")
    names = [*PREPARE_POINTS, "unpreparing", "done"]
    refs: dict[str, ClaimRef] = {}
    for i, name in enumerate(names):
        stored = apiserver.store.put(allocated_claim_object(name, "default", DRIVER, "node-a", {"gpu": [f"gpu-{i}"]}))
        refs[name] = ClaimRef("default", name, stored["metadata"]["uid"])
    hold = root / "hold"
    hold.mkdir()
    for name, point in PREPARE_POINTS.items():
        hold_at(hold, refs[name].uid, point)
    hold_at(hold, refs["unpreparing"].uid, "during-unprepare")
    hold_at(hold, refs["done"].uid, "never")  # without a point file the hook holds at after-cdi
    cdi_dir = root / "cdi"
    cdi_dir.mkdir()
    # Files in the CDI dir that are not ours: another vendor, another driver's claim spec, a stray file.
    foreign = {
        cdi_dir / "nvidia.yaml": b"cdiVersion: 0.6.0\n",
        cdi_dir / f"k8s.gpu.other.com-device_{refs['done'].uid}.json": b'{"other": true}',
        cdi_dir / "notes.txt": b"keep me",
    }
    for path, data in foreign.items():
        path.write_bytes(data)

    proc = start_daemon(apiserver.url, root, hold)
    try:
        eventually(lambda: registers(paths), what="daemon to serve")
        conn = register(paths.registration_socket)
        answered = {name: conn.prepare([refs[name]]) for name in ("unpreparing", "done")}  # their points are not in prepare
        with ThreadPoolExecutor(2) as pool:
            pending_prepare = pool.submit(conn.prepare, [refs[n] for n in PREPARE_POINTS], 30.0)
            pending_unprepare = pool.submit(conn.unprepare, [refs["unpreparing"]], 30.0)
            for name in [*PREPARE_POINTS, "unpreparing"]:
                eventually((hold / refs[name].uid).exists, what=f"{name} to reach its hold point")
            # The durable state at each point, as the crash will leave it.
            phases = {name: (record_of(paths, refs[name].uid) or {}).get("phase") for name in names}
            assert phases == {"at-started": "PrepareStarted", "at-backend": "PrepareStarted", "at-cdi": "PrepareStarted",
                              "at-completed": "PrepareCompleted", "unpreparing": "UnprepareStarted", "done": "PrepareCompleted"}
            assert record_of(paths, refs["at-started"].uid)["backend_state"] == {}
            assert record_of(paths, refs["at-backend"].uid)["backend_state"]["devices"] == ["gpu-1"]
            assert [_spec(root, refs[n].uid).exists() for n in PREPARE_POINTS] == [False, False, True, True]
            completed_ids = [d["cdi_ids"] for d in record_of(paths, refs["at-completed"].uid)["devices"]]
            specs_before = {n: _spec(root, refs[n].uid).read_bytes() for n in ("at-completed", "done")}
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            for pending in (pending_prepare, pending_unprepare):
                with pytest.raises(grpc.RpcError):
                    pending.result(10)
        conn.close()
        ours_orphan = _spec(root, "orphan-uid")
        ours_orphan.write_text("{}")
        before_restart = len(journal(root / "state"))

        proc = start_daemon(apiserver.url, root)
        eventually(lambda: registers(paths), what="restarted daemon to serve")
        ops = journal(root / "state")[before_restart:]
        # Recovery: each half-prepared claim unprepared once with the state its record held, and the interrupted
        # unprepare (its UnprepareStarted record) finished the same way; then one reconcile listing the completed claims.
        rollbacks = sorted((e["data"]["uid"], json.dumps(e["data"]["state"], sort_keys=True)) for e in ops if e["op"] == "unprepare")
        expected = sorted(
            (refs[n].uid, json.dumps({} if n == "at-started" else {"uid": refs[n].uid, "devices": [f"gpu-{names.index(n)}"]}, sort_keys=True))
            for n in (*HALF_PREPARED, "unpreparing")
        )
        assert rollbacks == expected
        assert [e["op"] for e in ops] == ["unprepare", "unprepare", "unprepare", "unprepare", "reconcile"]
        assert sorted(s["uid"] for s in ops[-1]["data"]) == sorted(refs[n].uid for n in ("at-completed", "done"))
        for name in (*HALF_PREPARED, "unpreparing"):
            assert not _spec(root, refs[name].uid).exists() and record_of(paths, refs[name].uid) is None, name
        assert not ours_orphan.exists()
        assert {p: p.read_bytes() for p in foreign} == foreign
        assert {n: _spec(root, refs[n].uid).read_bytes() for n in specs_before} == specs_before

        conn = register(paths.registration_socket)
        # Completed claims: the same answer, from the checkpoint (no backend call), spec untouched.
        assert conn.prepare([refs["done"]]) == answered["done"]
        again = conn.prepare([refs["at-completed"]])
        assert _ids(again, refs["at-completed"].uid) == completed_ids
        assert _spec(root, refs["at-completed"].uid).read_bytes() == specs_before["at-completed"]
        assert [e["op"] for e in journal(root / "state")[before_restart + len(ops):]] == []
        # The unprepare the kubelet retries succeeds: recovery already finished it, so no backend call is left.
        assert conn.unprepare([refs["unpreparing"]]).claims[refs["unpreparing"].uid].error == ""
        assert [e["op"] for e in journal(root / "state")[before_restart + len(ops):]] == []
        # Rolled-back claims prepare again from scratch.
        redo = conn.prepare([refs[n] for n in HALF_PREPARED])
        for name in HALF_PREPARED:
            assert _ids(redo, refs[name].uid) and _spec(root, refs[name].uid).exists(), name
        conn.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_dra_socket_serves_before_registration_socket_appears(short_tmp: Path, apiserver, monkeypatch) -> None:
    """Instrumented, not raced: the moment the registration server is about to bind, a v1
    NodePrepareResources round trip on the DRA socket must already succeed."""
    from tests.node.conftest import make_settings
    from tests.node.example_backend import ExampleBackend

    import dra_driver.node.plugin.driver as driver_module
    from dra_driver.api.dra.v1 import api_pb2, api_pb2_grpc
    from dra_driver.node.daemon import Daemon
    from dra_driver.kube.claims import ClaimReader
    from dra_driver.backend.interface import BackendSettings

    settings = make_settings(short_tmp)
    paths = PluginPaths(settings.kubelet_dir.absolute(), DRIVER, state_dir=settings.state_dir)
    stored = apiserver.store.put(allocated_claim_object("early", "default", DRIVER, "node-a", {"gpu": ["gpu-0"]}))
    ref = ClaimRef("default", "early", stored["metadata"]["uid"])
    probes: list[tuple[bool, object]] = []

    class ProbingServer(driver_module.UnixServer):
        def start(self) -> None:
            if self.path == paths.registration_socket:
                with grpc.insecure_channel(f"unix://{paths.dra_socket}") as channel:
                    request = api_pb2.NodePrepareResourcesRequest(claims=[api_pb2.Claim(namespace=ref.namespace, name=ref.name, uid=ref.uid)])
                    response = api_pb2_grpc.DRAPluginStub(channel).NodePrepareResources(request, timeout=5.0)
                probes.append((paths.registration_socket.exists(), response))
            super().start()

    monkeypatch.setattr(driver_module, "UnixServer", ProbingServer)
    backend = ExampleBackend(BackendSettings(node_name="node-a"))
    daemon = Daemon([backend], ClaimReader(apiserver.json_api()), settings)
    daemon.start()
    try:
        assert len(probes) == 1
        reg_existed, early = probes[0]
        assert not reg_existed
        assert early.claims[ref.uid].error == "" and len(early.claims[ref.uid].devices) == 1
        conn = register(paths.registration_socket)
        assert conn.service == "v1.DRAPlugin"
        assert conn.prepare([ref]) == early  # the early answer was the real one
        conn.close()
    finally:
        daemon.stop()


def test_dynamic_mig_instance_created_before_crash_is_destroyed(short_tmp: Path, apiserver, monkeypatch) -> None:
    """NVIDIA dynamic MIG (dgx-h100): a crash after the backend created a GPU/compute instance but before
    PrepareCompleted; the restart destroys the instance and the claim prepares again.

    The simulated NVML lives in process memory and cannot be driven from a state file, so a subprocess
    daemon cannot show "the instance survives the crash". Instead the test forks while the prepare thread
    waits at the after-backend hold point: the child has the same memory (the simulated GPU with its new
    instance, as the real driver would keep it) but not the prepare thread, i.e. the process "died" there.
    The child builds a fresh NvidiaBackend over the same simulated library and a fresh PrepareService on the
    same checkpoint and CDI dirs, runs recover() and prepares again. Covered: rollback from the recorded
    backend state (PrepareStarted + state). Not covered here: the real gRPC daemon and a real driver's
    persistence of instances. A crash between backend.prepare and the state write is covered by the
    NVIDIA backend's own ownership records (tests/nvidia/test_owned_instances.py).
    """
    from dra_driver.node.checkpoint import Checkpoint
    from dra_driver.backend.hardware_profiles import load_profile
    from dra_driver.kube.claims import ClaimReader
    from dra_driver.node.plugin.prepare import HOLD_ENV, PrepareService
    from dra_driver.backend.interface import BackendSettings

    nvidia = pytest.importorskip("dra_driver_nvidia.backend")
    driver = "gpu.nvidia.com"
    device = "gpu-3-mig-1g10gb-19-0"
    (short_tmp / "boot_id").write_text("boot-1\n")
    hold = short_tmp / "hold"
    hold.mkdir()
    cdi_dir = short_tmp / "cdi"
    stored = apiserver.store.put(allocated_claim_object("mig", "default", driver, "node-a", {"gpu": [device]}, device_class=driver))
    ref = ClaimRef("default", "mig", stored["metadata"]["uid"])
    hold_at(hold, ref.uid, "after-backend")
    monkeypatch.setenv(HOLD_ENV, str(hold))
    settings = BackendSettings(node_name="node-a", partitioning="dynamic")
    backend = nvidia.NvidiaBackend.from_profile(dict(load_profile("dgx-h100").sections["nvidia"]), settings)
    fake = backend.simulator
    backend.discover()

    def service(on: nvidia.NvidiaBackend) -> PrepareService:
        return PrepareService(on, ClaimReader(apiserver.json_api()), Checkpoint(short_tmp / "ckpt", short_tmp / "boot_id"), cdi_dir)

    first = service(backend)
    first.recover()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(first.prepare, [ref])
        eventually((hold / ref.uid).exists, what="prepare to reach after-backend")
        assert len(list(fake.live_instances())) == 1
        result = short_tmp / "child-result"
        pid = os.fork()
        if pid == 0:  # the restarted driver: same memory, no prepare thread
            try:
                os.environ.pop(HOLD_ENV, None)
                again = nvidia.NvidiaBackend(settings, simulator=fake, sysfs_root=backend._sysfs_root, proc_root=None)
                again.discover()
                restarted = service(again)
                assert restarted.checkpoint_record(ref.uid) is None  # not loaded yet
                restarted.recover()
                assert list(fake.live_instances()) == [], "the instance of the half-prepared claim survived recovery"
                assert restarted.checkpoint_record(ref.uid) is None and not Path(cdi.spec_path(cdi_dir, driver, ref.uid)).exists()
                outcome = restarted.prepare([ref])[ref.uid]
                assert outcome.error == "", outcome.error
                assert len(list(fake.live_instances())) == 1 and Path(cdi.spec_path(cdi_dir, driver, ref.uid)).exists()
                assert restarted.unprepare([ref]) == {ref.uid: ""} and list(fake.live_instances()) == []
                result.write_text("ok")
            except BaseException:
                result.write_text(traceback.format_exc())
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        (hold / ref.uid).unlink()  # let the parent's abandoned prepare finish; its outcome no longer matters
        pending.result(30)
    first.close()
    backend.close()
    assert result.read_text() == "ok"
