"""`dra-driver run` refuses unusable directories before starting anything, naming the flag."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from dra_driver.cli.run import add_daemon_arguments, run


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_daemon_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("flag", ["--state-dir", "--cdi-dir"])
def test_a_file_where_a_directory_belongs_is_refused_with_the_flag(tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    dirs = {"--state-dir": str(tmp_path / "state"), "--cdi-dir": str(tmp_path / "cdi")}
    dirs[flag] = str(blocker)
    args = parse("--profile", "dgx-h100", "--node-name", "n", "--api-server", "http://127.0.0.1:1", "--kubelet-dir", str(tmp_path / "k"), *[x for kv in dirs.items() for x in kv])
    assert run(args) == 1
    err = capsys.readouterr().err
    assert f"{flag} {blocker}: exists and is not a directory" in err and f"point {flag} at a writable directory" in err
    assert not (tmp_path / "k").exists()  # nothing was started


def test_missing_directories_are_created(tmp_path: Path) -> None:
    from dra_driver.cli.run import writable_dir

    writable_dir("--state-dir", tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())


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
def test_node_name_and_pod_uid_follow_the_kubernetes_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], named: str) -> None:
    """The node name is the pool claims must match and the pod UID goes into socket file names: refused before use."""
    args = parse("--profile", "dgx-h100", "--api-server", "http://127.0.0.1:1", "--kubelet-dir", str(tmp_path / "k"), "--state-dir", str(tmp_path / "s"), *flags)
    assert run(args) == 1
    err = capsys.readouterr().err
    assert named in err and "downward API" in err
    assert not (tmp_path / "k").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("flag", ["--nvidia-cdi-hook-path", "--host-driver-root"])
def test_relative_host_paths_for_cdi_specs_are_refused_with_the_flag(tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(
        "--profile", "dgx-h100", "--node-name", "n", "--api-server", "http://127.0.0.1:1", "--kubelet-dir", str(tmp_path / "k"),
        "--state-dir", str(tmp_path / "s"), "--cdi-dir", str(tmp_path / "c"), flag, "usr/bin/nvidia-cdi-hook",
    )  # fmt: skip
    assert run(args) == 1
    assert f"{flag} usr/bin/nvidia-cdi-hook: must be an absolute host path" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()


def test_driver_file_flags_reach_the_backend_settings(tmp_path: Path) -> None:
    from dra_driver.cli.run import build_daemon

    args = parse(
        "--profile", "dgx-h100", "--vendors", "nvidia", "--node-name", "n", "--api-server", "http://127.0.0.1:1",
        "--kubelet-dir", str(tmp_path / "k"), "--state-dir", str(tmp_path / "s"), "--cdi-dir", str(tmp_path / "c"),
        "--host-driver-root", "/run/nvidia/driver", "--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook",
        "--mps-compute-mode", "unchanged", "--consumable-gpu-memory",
    )  # fmt: skip
    daemon = build_daemon(args)
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
    assert run(args) == 1
    assert f"kubeconfig {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()  # nothing was served


def test_an_unreadable_kubeconfig_fails_after_start_with_a_clear_line(short_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A kubeconfig that exists but cannot be loaded is found only when the client is built: the daemon
    deregisters and exits 1 with the reason, no traceback."""
    bad = short_tmp / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    args = parse(
        "--profile", "dgx-h100", "--node-name", "n", "--kubeconfig", str(bad), "--kubelet-dir", str(short_tmp / "k"),
        "--state-dir", str(short_tmp / "state"), "--cdi-dir", str(short_tmp / "cdi"),
    )  # fmt: skip
    assert run(args) == 1
    assert "cannot load the API client configuration (kubeconfig)" in capsys.readouterr().err
    assert not list((short_tmp / "k" / "plugins_registry").glob("*.sock"))  # deregistered
