"""`dra-driver doctor` on a temp tree laid out like a node: a healthy node passes; each problem is named with its fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.node.checks.fake_kubelet import PodResourcesState, bind_socket, nvidia_daemon, other_driver, pod_resources_server, write_checkpoint

from dra_driver.cli.main import main
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.node.checks import runtime_config
from dra_driver.node.plugin.instance_lock import InstanceLock

nvidia = pytest.importorskip("dra_driver_nvidia.backend")
DRIVER = "gpu.nvidia.com"


def containerd_v3(path: Path, dirs: list[str] | None, enable: bool | None = None) -> Path:
    lines = ["version = 3", '[plugins."io.containerd.cri.v1.runtime"]']
    if enable is not None:
        lines.append(f"enable_cdi = {str(enable).lower()}")
    if dirs is not None:
        lines.append(f"cdi_spec_dirs = {json.dumps(dirs)}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def tree(short_tmp: Path) -> Path:
    for sub in ("kubelet/plugins_registry", "kubelet/plugins", "cdi", "run", "etc"):
        (short_tmp / sub).mkdir(parents=True, exist_ok=True)
    containerd_v3(short_tmp / "etc" / "config.toml", ["/etc/cdi", str(short_tmp / "cdi")])
    return short_tmp


def doctor(tree: Path, *extra: str, server: sim_apiserver.SimApiServer | None = None) -> tuple[int, dict]:
    """Run the command as a person would (through main), with JSON output; returns (exit code, report)."""
    import contextlib
    import io

    out = io.StringIO()
    argv = [
        "doctor", "-o", "json", "--node-name", "node-a", "--profile", "dgx-h100", "--kubelet-dir", str(tree / "kubelet"),
        "--cdi-dir", str(tree / "cdi"), "--state-dir", str(tree / "run"), "--containerd-config", str(tree / "etc" / "config.toml"),
        "--crio-config", str(tree / "etc" / "crio.conf"), "--kubeconfig", str(tree / "etc" / "kubeconfig"), *extra,
    ]  # fmt: skip
    if server is not None:
        argv += ["--api-server", server.url]
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, json.loads(out.getvalue())


def by_name(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_a_healthy_node_passes_every_check(tree: Path):
    (tree / "etc" / "kubeconfig").write_text("")  # not read: --api-server wins
    with sim_apiserver.SimApiServer() as server, nvidia_daemon(server, tree):
        server.add_node("node-a")
        with pod_resources_server(tree / "kubelet" / "pod-resources" / "kubelet.sock", PodResourcesState()):
            code, report = doctor(tree, server=server)
    statuses = {name: check["status"] for name, check in by_name(report).items()}
    assert statuses == dict.fromkeys(statuses, "pass"), report
    assert code == 0 and report["canServeClaims"] is True and report["exitCode"] == 0
    assert set(statuses) >= {"kubelet-dirs", "registration", "cdi-dir", "runtime-cdi", "resource-api", "vendor-libraries",
                             "device-nodes", "device-plugins", "same-name-drivers", "instance", "permissions"}  # fmt: skip
    assert "gpu.nvidia.com-reg.sock" in by_name(report)["registration"]["summary"]


def test_text_output_names_each_problem_and_its_fix(tree: Path, capsys: pytest.CaptureFixture[str]):
    (tree / "cdi").rmdir()
    code = main(
        [
            "doctor",
            "--node-name",
            "node-a",
            "--profile",
            "dgx-h100",
            "--kubelet-dir",
            str(tree / "kubelet"),
            "--cdi-dir",
            str(tree / "cdi"),
            "--state-dir",
            str(tree / "run"),
            "--containerd-config",
            str(tree / "etc" / "config.toml"),
            "--crio-config",
            str(tree / "nope"),
        ]
    )
    text = capsys.readouterr().out
    assert code == 1
    assert "FAIL  cdi-dir" in text and f"{tree / 'cdi'} is not a directory" in text and "fix: mount the host's" in text
    assert "WARN  registration" in text and "The node cannot serve claims: 1 check failed." in text


@pytest.mark.parametrize(
    ("config", "status", "words"),
    [
        ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\ncdi_spec_dirs = ["/etc/cdi", "CDI"]\n', "pass", "CDI on"),
        ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = false\n', "fail", "enable_cdi = false"),
        ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncdi_spec_dirs = ["CDI"]\n', "warn", "1.7 does not"),
        ("version = 3\n", "fail", "does not include"),  # defaults /etc/cdi and /var/run/cdi: not the tree's CDI dir
        ('[plugins.cri]\nenable_cdi = true\ncdi_spec_dirs = ["CDI"]\n', "pass", "config version 1"),
        ("version = 3\n[plugins\n", "fail", "cannot read"),
    ],
)
def test_containerd_layouts(tree: Path, config: str, status: str, words: str):
    (tree / "etc" / "config.toml").write_text(config.replace("CDI", str(tree / "cdi")))
    _, report = doctor(tree)
    check = by_name(report)["runtime-cdi"]
    assert check["status"] == status and words in check["summary"], check
    assert (check["fix"] != "") == (status != "pass")


def test_crio_drop_ins_override_and_var_run_is_run(tree: Path):
    (tree / "etc" / "config.toml").unlink()
    (tree / "etc" / "crio.conf").write_text('[crio.runtime]\ncdi_spec_dirs = ["/elsewhere"]\n')
    (tree / "etc" / "crio.conf.d").mkdir()
    (tree / "etc" / "crio.conf.d" / "10-cdi.conf").write_text(f'[crio.runtime]\ncdi_spec_dirs = ["{tree / "cdi"}"]\n')
    _, report = doctor(tree)
    assert by_name(report)["runtime-cdi"]["status"] == "pass"
    assert runtime_config.same_dir(Path("/var/run/cdi"), ["/run/cdi"]) and runtime_config.same_dir(Path("/run/cdi"), ["/var/run/cdi/"])
    assert not runtime_config.same_dir(Path("/var/run/cdi"), ["/var/runx/cdi"])


def test_world_writable_paths_fail_the_node(tree: Path):
    os.chmod(tree / "cdi", 0o777)
    spec = tree / "cdi" / "planted.json"
    spec.write_text("{}")
    os.chmod(spec, 0o666)
    code, report = doctor(tree)
    check = by_name(report)["permissions"]
    assert code == 1 and check["status"] == "fail" and "chmod o-w" in check["fix"]
    assert any(str(tree / "cdi") in d and "0777" in d for d in check["details"]) and any("planted.json" in d for d in check["details"])
    os.chmod(tree / "cdi", 0o1777)  # sticky, like /tmp: the directory itself is no longer the problem
    assert [d for d in by_name(doctor(tree)[1])["permissions"]["details"] if d.startswith(f"{tree / 'cdi'} ")] == []


def test_device_plugin_and_same_name_driver(tree: Path):
    sock = bind_socket(tree / "kubelet" / "device-plugins" / "nvidia-gpu.sock")
    write_checkpoint(tree / "kubelet", {"nvidia.com/gpu": ["GPU-unknown-0"]})
    try:
        with other_driver(tree / "kubelet"):
            code, report = doctor(tree)
    finally:
        sock.close()
    checks = by_name(report)
    assert checks["device-plugins"]["status"] == "warn"
    assert "8 of 8 devices withheld" in checks["device-plugins"]["summary"] and "--offer-devices" in checks["device-plugins"]["fix"]
    assert checks["same-name-drivers"]["status"] == "fail" and "gpu.nvidia.com-reg.sock" in checks["same-name-drivers"]["summary"]
    assert code == 1


def test_api_without_resource_v1_fails(tree: Path):
    with sim_apiserver.SimApiServer(sim_apiserver.ServerOptions(resource_versions=())) as server:
        code, report = doctor(tree, server=server)
    assert code == 1 and by_name(report)["resource-api"]["status"] == "fail"
    assert "does not serve resource.k8s.io/v1" in by_name(report)["resource-api"]["summary"]


def test_instance_lock_held_or_free(tree: Path):
    """The daemon's own instance lock (plugin/instance_lock.py) tells the doctor who runs; it never takes it."""
    held = InstanceLock.acquire(tree / "run" / DRIVER, None)
    try:
        summary = by_name(doctor(tree)[1])["instance"]["summary"]
        assert "a driver daemon runs" in summary and f"pid {os.getpid()}" in summary
    finally:
        held.release()
    assert "no driver daemon runs" in by_name(doctor(tree)[1])["instance"]["summary"]
    again = InstanceLock.acquire(tree / "run" / DRIVER, None, wait_s=0)  # the doctor left it free
    again.release()


def test_two_registered_instances_are_a_warning(tree: Path):
    with sim_apiserver.SimApiServer() as server:
        server.add_node("node-a")
        with nvidia_daemon(server, tree, "11111111-1111-1111-1111-111111111111"), nvidia_daemon(server, tree, "22222222-2222-2222-2222-222222222222"):
            checks = by_name(doctor(tree)[1])
        assert checks["instance"]["status"] == "warn" and "gpu.nvidia.com: 2 instances registered" in checks["instance"]["summary"]
        assert checks["same-name-drivers"]["status"] == "pass"  # its own other instance is not a stranger
        assert by_name(doctor(tree)[1])["instance"]["status"] == "pass"  # both stopped: nothing registered


def test_unreadable_device_plugin_sources_are_a_warning(tree: Path):
    check = by_name(doctor(tree)[1])["device-plugins"]  # no PodResources socket in the tree
    assert check["status"] == "warn" and "pod-resources" in check["fix"]
    assert any("PodResources socket" in d for d in check["details"])


def test_bad_flags_exit_2(tree: Path, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_info:
        main(["doctor", "-o", "xml"])
    assert exit_info.value.code == 2


def test_in_the_pod_the_doctor_checks_the_node_as_the_running_daemon_runs_it(tree: Path, capsys: pytest.CaptureFixture[str]):
    """`kubectl exec ds/... -- dra-driver doctor` with no flags: the daemon's recorded flags (profile, simulated root, kubelet
    and CDI dirs) are used, so a simulated node that serves claims is not failed for lacking a vendor library."""
    simulated_root = tree / "sim"
    simulated_root.mkdir()
    flags = {"--profile": "dgx-h100", "--simulated-root": str(simulated_root), "--kubelet-dir": str(tree / "kubelet"),
             "--cdi-dir": str(tree / "cdi"), "--node-name": "node-a"}  # fmt: skip
    with sim_apiserver.SimApiServer() as server, nvidia_daemon(server, tree, "11111111-1111-1111-1111-111111111111", flags=flags):
        code = main(["doctor", "--state-dir", str(tree / "run"), "--containerd-config", str(tree / "etc" / "config.toml"),
                     "--crio-config", str(tree / "etc" / "crio.conf"), "--kubeconfig", str(tree / "etc" / "missing")])  # fmt: skip
        text = capsys.readouterr().out
        ignored = main(
            [
                "doctor",
                "-o",
                "json",
                "--ignore-daemon",
                "--state-dir",
                str(tree / "run"),
                "--kubelet-dir",
                str(tree / "kubelet"),
                "--cdi-dir",
                str(tree / "cdi"),
                "--driver-root",
                str(tree / "etc"),
                "--kubeconfig",
                str(tree / "etc" / "missing"),
            ]
        )
        without = by_name(json.loads(capsys.readouterr().out))
    assert code == 0, text
    assert "as the running daemon sees it (pid" in text and "--profile=dgx-h100" in text
    lines = {" ".join(line.split()) for line in text.splitlines()}  # the name column's width follows the longest check name
    assert any(line.startswith("PASS vendor-libraries nvidia: 8 devices") for line in lines), text
    assert (
        f"PASS device-nodes simulated hardware (--profile dgx-h100): device nodes and driver files under --simulated-root {simulated_root}" in lines
    )
    assert any(line.startswith(f"PASS kubelet-dirs {tree / 'kubelet'}/plugins_registry") for line in lines)  # the daemon's --kubelet-dir
    assert ignored == 1 and without["vendor-libraries"]["status"] == "fail"  # what the doctor said before it read the daemon's flags


def test_the_doctors_own_flags_win_over_the_daemons(tree: Path):
    held = InstanceLock.acquire(tree / "run" / DRIVER, None, flags={"--profile": "mi300x", "--kubelet-dir": "/nonexistent-kubelet"})
    try:
        code, report = doctor(tree)  # gives --profile dgx-h100 and --kubelet-dir itself
    finally:
        held.release()
    checks = by_name(report)
    assert checks["vendor-libraries"]["summary"].startswith("nvidia: 8 devices") and checks["kubelet-dirs"]["status"] == "pass"
    assert report["daemon"]["flags"]["--profile"] == "mi300x"


def test_a_host_file_outside_the_pods_view_is_cannot_see_not_a_warning(tree: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")  # in a pod, as the kubelet sets it
    (tree / "etc" / "config.toml").unlink()
    check = by_name(doctor(tree)[1])["runtime-cdi"]
    assert check["status"] == "cannot-see" and check["summary"].startswith("cannot see the container runtime's configuration from this pod")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert by_name(doctor(tree)[1])["runtime-cdi"]["status"] == "warn"  # on the node itself, no file is worth a warning


def test_a_missing_simulated_root_fails_the_device_nodes_check(tree: Path):
    check = by_name(doctor(tree, "--simulated-root", str(tree / "no-such-root"))[1])["device-nodes"]
    assert check["status"] == "fail" and "--simulated-root" in check["summary"] and "same path in the driver's pod" in check["fix"]


def test_doctor_help_shows_only_the_flags_it_reads(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        main(["doctor", "--help"])
    text = capsys.readouterr().out
    assert "--profile" in text and "--containerd-config" in text and "--mps-compute-mode" not in text
    assert len(text.splitlines()) < 110
    with pytest.raises(SystemExit):  # still accepted: a DaemonSet's arguments can be copied
        main(["doctor", "--mps-compute-mode", "unchanged", "--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


EXTENDED_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "extended.gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}], "extendedResourceName": "nvidia.com/gpu"},
}


@pytest.mark.parametrize(
    ("server_version", "kubelet_version", "status"),
    [("v1.36.2", "v1.35.6", "warn"), ("v1.36.2", "v1.36.2", "pass"), ("v1.35.6", "v1.35.6", "pass")],
)
def test_a_1_35_kubelet_under_a_1_36_control_plane_is_warned_about_extended_resources(
    tree: Path, server_version: str, kubelet_version: str, status: str
):
    """Measured on the kit (docs/e2e.md): the 1.36 scheduler allocates a claim for nvidia.com/gpu, the 1.35 kubelet
    ignores it and starts the container without the GPU."""
    with sim_apiserver.SimApiServer(sim_apiserver.ServerOptions(git_version=server_version)) as server:
        server.add_node("node-a")
        server.modify_as_other("Node", "node-a", lambda n: n.setdefault("status", {}).update({"nodeInfo": {"kubeletVersion": kubelet_version}}))
        server.store.put(dict(EXTENDED_CLASS))
        check = by_name(doctor(tree, server=server)[1])["extended-resource-skew"]
    assert check["status"] == status, check
    if status == "warn":
        assert "nvidia.com/gpu (extended.gpu.nvidia.com)" in check["summary"] and "DRAExtendedResource" in check["fix"]
