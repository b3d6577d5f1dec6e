"""`dra-driver run` refuses unusable directories before starting anything, naming the flag."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from dra_driver.cli.run import add_daemon_arguments, run
from dra_driver.node.settings import DaemonSettings, env_name
from tests.support import eventually


def parse(*argv: str) -> argparse.Namespace:
    """run's flags; a simulated profile without a simulated root unless the test names one (no runtime reads its specs)."""
    parser = argparse.ArgumentParser()
    add_daemon_arguments(parser)
    return parser.parse_args(["--simulated-root", "none", *argv])


def node_dirs(root: Path) -> Path:
    """The directories the kubelet and the container runtime own, as on a node: `run` creates none of them."""
    for sub in ("k/plugins_registry", "k/plugins", "c"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return root


def no_socket(root: Path) -> bool:
    return not list((root / "k").rglob("*.sock"))


@pytest.mark.parametrize("flag", ["--state-dir", "--cdi-dir"])
def test_a_file_where_a_directory_belongs_is_refused_with_the_flag(tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    node_dirs(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    dirs = {"--state-dir": str(tmp_path / "state"), "--cdi-dir": str(tmp_path / "c")}
    dirs[flag] = str(blocker)
    args = parse(
        "--profile",
        "dgx-h100",
        "--node-name",
        "n",
        "--api-server",
        "http://127.0.0.1:1",
        "--kubelet-dir",
        str(tmp_path / "k"),
        *[x for kv in dirs.items() for x in kv],
    )
    assert run(args) == 2  # usage: the flag names the fix (docs/cli.md)
    err = capsys.readouterr().err
    assert f"{flag} {blocker}: exists and is not a directory" in err and f"point {flag} at a writable directory" in err
    assert no_socket(tmp_path)  # nothing was started


def test_missing_directories_are_created_with_their_mode_whatever_the_umask(tmp_path: Path) -> None:
    from dra_driver.node.assembly import writable_dir

    previous = os.umask(0)
    try:
        writable_dir("--state-dir", tmp_path / "a" / "b", 0o700)
    finally:
        os.umask(previous)
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())
    assert [oct((tmp_path / part).stat().st_mode & 0o777) for part in ("a", "a/b")] == ["0o700", "0o700"]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--node-name", "../node"), "--node-name"),
        (("--node-name", "Node_A"), "--node-name"),
        (("--node-name", ""), "--node-name"),
        (("--node-name", "n", "--pod-uid", "../../x"), "--pod-uid"),
        (("--node-name", "n", "--pod-uid", "a\x00b"), "--pod-uid"),
    ],
)
def test_node_name_and_pod_uid_follow_the_kubernetes_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], named: str
) -> None:
    """The node name is the pool claims must match and the pod UID goes into socket file names: refused before use."""
    args = parse(
        "--profile",
        "dgx-h100",
        "--api-server",
        "http://127.0.0.1:1",
        "--kubelet-dir",
        str(tmp_path / "k"),
        "--state-dir",
        str(tmp_path / "s"),
        *flags,
    )
    assert run(args) == 2  # usage: the flag names the fix (docs/cli.md)
    err = capsys.readouterr().err
    assert named in err and "downward API" in err
    assert not (tmp_path / "k").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("flag", ["--nvidia-cdi-hook-path", "--host-driver-root"])
def test_relative_host_paths_for_cdi_specs_are_refused_with_the_flag(tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    node_dirs(tmp_path)
    args = parse(
        "--profile", "dgx-h100", "--node-name", "n", "--api-server", "http://127.0.0.1:1", "--kubelet-dir", str(tmp_path / "k"),
        "--state-dir", str(tmp_path / "s"), "--cdi-dir", str(tmp_path / "c"), flag, "usr/bin/nvidia-cdi-hook",
    )  # fmt: skip
    assert run(args) == 2  # usage: the flag names the fix (docs/cli.md)
    assert f"{flag} usr/bin/nvidia-cdi-hook: must be an absolute host path" in capsys.readouterr().err
    assert no_socket(tmp_path)


def test_driver_file_flags_reach_the_backend_settings(tmp_path: Path) -> None:
    from dra_driver.node.assembly import build_daemon

    node_dirs(tmp_path)
    args = parse(
        "--profile", "dgx-h100", "--vendors", "nvidia", "--node-name", "n", "--api-server", "http://127.0.0.1:1",
        "--kubelet-dir", str(tmp_path / "k"), "--state-dir", str(tmp_path / "s"), "--cdi-dir", str(tmp_path / "c"),
        "--host-driver-root", "/run/nvidia/driver", "--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook",
        "--mps-compute-mode", "unchanged", "--consumable-gpu-memory",
    )  # fmt: skip
    daemon = build_daemon(DaemonSettings.from_namespace(args))
    try:
        settings = daemon.backends[0].settings
        assert (settings.host_driver_root, settings.nvidia_cdi_hook_path) == (Path("/run/nvidia/driver"), "/usr/bin/nvidia-cdi-hook")
        assert settings.mps_exclusive_compute is False and parse().mps_compute_mode == "exclusive-process"
        assert settings.consumable_gpu_memory is True and parse().consumable_gpu_memory is False
    finally:
        for backend in daemon.backends:
            backend.close()


def test_a_missing_kubeconfig_is_refused_before_any_socket(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The API client is built after the sockets serve; whether there is one to build is checked before."""
    args = parse(
        "--profile", "dgx-h100", "--node-name", "n", "--kubeconfig", str(tmp_path / "missing"), "--kubelet-dir", str(tmp_path / "k"),
        "--state-dir", str(tmp_path / "state"), "--cdi-dir", str(tmp_path / "cdi"),
    )  # fmt: skip
    assert run(args) == 2  # usage: the flag names the fix (docs/cli.md)
    assert f"kubeconfig {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()  # nothing was served


def test_an_unusable_kubeconfig_is_refused_before_any_socket(short_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A kubeconfig that exists but cannot be used (no context) is found by the API check before anything is
    created: exit 2 with the reason, no traceback."""
    bad = short_tmp / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    args = parse(
        "--profile", "dgx-h100", "--node-name", "n", "--kubeconfig", str(bad), "--kubelet-dir", str(short_tmp / "k"),
        "--state-dir", str(short_tmp / "state"), "--cdi-dir", str(short_tmp / "cdi"),
    )  # fmt: skip
    assert run(args) == 2  # usage: the flag names the fix (docs/cli.md)
    assert "sets no current-context; pass --context NAME" in capsys.readouterr().err
    assert not (short_tmp / "k").exists() and not (short_tmp / "state").exists()

def test_metrics_address_from_the_environment_and_the_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    METRICS_ENV = env_name("metrics_bind_address")
    from dra_driver.node.metrics_http import BindAddress

    assert not parse().metrics_bind_address.enabled  # off unless asked: a root daemon listens nowhere by default
    monkeypatch.setenv(METRICS_ENV, "127.0.0.1:9400")
    assert parse().metrics_bind_address == BindAddress("127.0.0.1", 9400)
    assert parse("--metrics-bind-address", "[::1]:9500").metrics_bind_address == BindAddress("::1", 9500)


def test_a_bad_metrics_address_names_the_variable(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    METRICS_ENV = env_name("metrics_bind_address")
    monkeypatch.setenv(METRICS_ENV, "8080")
    with pytest.raises(SystemExit):
        parse()
    assert METRICS_ENV in capsys.readouterr().err


def test_log_level_from_the_environment_and_v_wins(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from dra_driver.cli.main import LOG_LEVEL_ENV, main

    monkeypatch.setenv(LOG_LEVEL_ENV, "debug")
    main(["ready", "--state-dir", "/nonexistent-dra-state"])
    assert logging.getLogger().level == logging.DEBUG
    main(["-v", "ready", "--state-dir", "/nonexistent-dra-state"])
    assert logging.getLogger().level == logging.INFO
    monkeypatch.setenv(LOG_LEVEL_ENV, "loud")
    assert main(["ready", "--state-dir", "/nonexistent-dra-state"]) == 2
    assert f"${LOG_LEVEL_ENV}='loud' is not a log level; use one of warning, info, debug" in capsys.readouterr().err
    from dra_driver.common.logs import configure_logging

    configure_logging(0)  # quiet again for the tests after this one


def test_run_says_what_it_serves(short_tmp: Path) -> None:
    """One info line on stderr at the default (quiet) log level."""
    import signal
    import subprocess
    import sys

    from dra_driver.simulation.api_server import SimApiServer

    with SimApiServer() as server:
        node_dirs(short_tmp)
        command = [
            sys.executable,
            "-m",
            "dra_driver.cli.main",
            "run",
            "--profile",
            "l4",
            "--simulated-root",
            "none",
            "--node-name",
            "node-a",
            "--api-server",
            server.url,
            "--kubelet-dir",
            str(short_tmp / "k"),
            "--state-dir",
            str(short_tmp / "s"),
            "--cdi-dir",
            str(short_tmp / "c"),
        ]
        daemon = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        eventually(
            lambda: list((short_tmp / "k" / "plugins_registry").glob("*.sock")) or daemon.poll() is not None,
            "a registration socket or the daemon's exit",
            60,
            step=0.01,
        )
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=60)
    assert f"dra-driver run: serving gpu.nvidia.com on node node-a, simulating profile l4; sockets under {short_tmp / 'k'}" in err
    assert f"API server: {server.url}" in err


def test_a_second_instance_on_the_state_dir_is_refused_in_one_line(short_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another instance holds the NVIDIA driver's state: run exits 1 with one line naming it and the fix."""
    from dra_driver.node.plugin.instance_lock import InstanceLock

    node_dirs(short_tmp)
    held = InstanceLock.acquire(short_tmp / "state" / "gpu.nvidia.com", None)
    try:
        args = parse(
            "--profile", "dgx-h100", "--node-name", "n", "--api-server", "http://127.0.0.1:9", "--kubelet-dir", str(short_tmp / "k"),
            "--state-dir", str(short_tmp / "state"), "--cdi-dir", str(short_tmp / "c"),
        )  # fmt: skip
        assert run(args) == 1
    finally:
        held.release()
    err = capsys.readouterr().err.strip().splitlines()[-1]  # the one line the command prints (log lines may precede it)
    assert f"error: no driver could start: gpu.nvidia.com: state directory {short_tmp / 'state' / 'gpu.nvidia.com'} is in use" in err
    assert f"(pid {os.getpid()} on host " in err and "stop the other instance" in err
    assert not list((short_tmp / "k" / "plugins_registry").glob("*.sock"))  # nothing was served


@pytest.mark.parametrize("missing", ["k/plugins_registry", "k/plugins", "c"])
def test_another_components_directories_are_never_created(tmp_path: Path, missing: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The kubelet's plugin directories and the runtime's CDI directory are theirs: a missing one is refused in one line
    naming the fix, and nothing is created (doctor's kubelet-dirs check then tells the truth)."""
    node_dirs(tmp_path)
    (tmp_path / missing).rmdir()
    args = parse("--profile", "dgx-h100", "--node-name", "n", "--api-server", "http://127.0.0.1:1", "--kubelet-dir", str(tmp_path / "k"),
                 "--state-dir", str(tmp_path / "s"), "--cdi-dir", str(tmp_path / "c"))  # fmt: skip
    assert run(args) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert str(tmp_path / missing) in line and ("--kubelet-dir" in line or "--cdi-dir" in line)
    assert not (tmp_path / missing).exists() and not (tmp_path / "s").exists()


def test_a_profile_without_a_simulated_root_is_refused_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Simulated hardware under a real runtime needs its device nodes on a host path: without --simulated-root the specs
    would name nodes no host has, so run refuses, naming the flag (and `none` for a kubelet that starts no containers)."""
    node_dirs(tmp_path)
    parser = argparse.ArgumentParser()
    add_daemon_arguments(parser)
    args = parser.parse_args(["--profile", "dgx-h100", "--node-name", "n", "--api-server", "http://127.0.0.1:1", "--kubelet-dir", str(tmp_path / "k"),
                              "--state-dir", str(tmp_path / "s"), "--cdi-dir", str(tmp_path / "c")])  # fmt: skip
    assert run(args) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert "--profile dgx-h100 needs --simulated-root" in line and "--simulated-root none" in line
    assert no_socket(tmp_path) and not (tmp_path / "s").exists()


def test_the_daemon_records_its_effective_flags_with_its_instance_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `doctor` reads: the flags after environment defaults, paths absolute."""
    from dra_driver.node.assembly import recorded_flags

    monkeypatch.setenv("DRA_DRIVER_NODE_NAME", "node-from-env")
    flags = recorded_flags(DaemonSettings.from_namespace(parse("--profile", "mi300x", "--kubelet-dir", "rel/k", "--partitioning", "dynamic")))
    assert flags["--node-name"] == "node-from-env" and flags["--profile"] == "mi300x" and flags["--partitioning"] == "dynamic"
    assert flags["--kubelet-dir"] == os.path.abspath("rel/k") and flags["--simulated-root"] == "none"
    assert "--kubeconfig" not in flags  # unset flags are not recorded
