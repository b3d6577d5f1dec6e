"""One error convention for every command: `dra-driver COMMAND: error: ...` lines, exit 2 for usage and input,
3 for a cluster that cannot be used, did-you-mean hints; documented in every --help."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dra_driver.cli.main import COMMANDS, main
from dra_driver.simulation.api_server import ServerOptions, SimApiServer


def outcome(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def error_lines(err: str, command: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith(("usage:", " "))]


@pytest.mark.parametrize("command", [c for c in COMMANDS])
def test_a_misspelt_flag_is_a_usage_error_with_a_suggestion(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    required = {"explain": ["x"], "migrate": ["x"], "ready": ["--state-dir", "x"], "completion": ["bash"]}  # what each needs besides the typo
    code, err = outcome(capsys, [command, "--hepl", *required.get(command, [])])
    (line,) = error_lines(err, command)
    assert code == 2 and line.startswith(f"dra-driver {command}: error: unrecognized arguments") and "did you mean" in line, err


@pytest.mark.parametrize("command", ["explain", "fleet", "template", "discover", "demo"])
def test_a_global_flag_after_the_command_says_to_move_it(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = outcome(capsys, [command, "--log-format", "json"])
    assert code == 2 and "--log-format is a global flag: give it before the command" in err


@pytest.mark.parametrize(
    "argv",
    [["discover", "--profile", "dgx-h10"], ["demo", "--profile", "dgx-h10"], ["explain", "claim.yaml", "--profile", "dgx-h10"],
     ["fleet", "--profile", "dgx-h10"], ["template", "--profile", "dgx-h10"]],
)  # fmt: skip
def test_an_unknown_profile_exits_2_everywhere_with_a_suggestion(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "claim.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "c"},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
            }
        )
    )
    code, err = outcome(capsys, argv)
    lines = error_lines(err, argv[0])
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"dra-driver {argv[0]}: error: "), err
    assert "did you mean 'dgx-h100'" in lines[0]


def test_migrate_refusals_follow_the_convention(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = outcome(capsys, ["migrate", "-", "-", "--report", "none"])
    assert code == 2 and err.startswith("dra-driver migrate: error: '-' may be given once")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [\n")
    code, err = outcome(capsys, ["migrate", str(bad)])
    assert code == 2 and err.startswith(f"dra-driver migrate: error: {bad}:")


@pytest.fixture
def no_dra_kubeconfig(tmp_path: Path) -> Iterator[Path]:
    with SimApiServer(ServerOptions(resource_versions=("v1beta1",))) as server:
        yield server.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.mark.parametrize("command", ["explain", "fleet", "template", "run"])
def test_a_cluster_without_resource_v1_exits_3_with_one_line(
    command: str, no_dra_kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = tmp_path / "claim.yaml"
    claim.write_text("{}")
    extra = {"explain": [str(claim)], "run": ["--profile", "l4", "--simulated-root", "none", "--node-name", "n", "--kubelet-dir", str(tmp_path / "k"),
                                              "--state-dir", str(tmp_path / "s"), "--cdi-dir", str(tmp_path / "c")]}.get(command, [])  # fmt: skip
    code, err = outcome(capsys, [command, *extra, "--kubeconfig", str(no_dra_kubeconfig)])
    (line,) = error_lines(err, command)
    assert (
        code == 3
        and line.startswith(f"dra-driver {command}: error: API server http://127.0.0.1:")
        and "serves resource.k8s.io/v1beta1, not resource.k8s.io/v1" in line
    )
    if command == "run":  # checked before anything was created
        assert not any((tmp_path / name).exists() for name in ("k", "s", "c"))


def test_kubeconfig_env_is_read_when_no_fleet_is_named(
    no_dra_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", f"{no_dra_kubeconfig.parent / 'missing'}:{no_dra_kubeconfig}")
    code, err = outcome(capsys, ["fleet"])
    assert code == 3 and "kubeconfig $KUBECONFIG" in err
    code, err = outcome(capsys, ["template", "--count", "1"])  # kubectl's default cluster, not named: a warning, the YAML unchecked
    assert code == 0 and "warning: not checked against a cluster" in err


def test_no_fleet_and_no_cluster_says_what_to_pass(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = outcome(capsys, ["fleet"])
    assert code == 2 and "pass --fleet FILE, --profile NAME, or --kubeconfig FILE [--context NAME]" in err and "$KUBECONFIG" in err


@pytest.mark.parametrize("command", [c for c in COMMANDS])
def test_every_help_documents_the_exit_codes(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "exit codes: 0 done; 1 the answer is no or a run-time failure; 2 usage or invalid input; 3 the cluster" in " ".join(
        capsys.readouterr().out.split()
    )


def test_migrate_summary_names_the_command_as_every_line_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: i\n"
                        "    resources: {limits: {nvidia.com/gpu: 1}}\n")  # fmt: skip
    code, err = outcome(capsys, ["migrate", "--check", str(manifest)])
    assert code == 1
    assert err.splitlines()[-1].startswith("dra-driver migrate: 1 converted")


def test_input_errors_read_the_same_from_the_input_layer_and_from_a_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One InputError: a file the input layer refuses is one line naming file and line; the field problems a command
    finds are one line each; both exit 2."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("a: 1\nb: [\n")
    code, err = outcome(capsys, ["explain", "bad.yaml", "--profile", "dgx-h100"])
    assert (code, error_lines(err, "explain")) == (
        2,
        ["dra-driver explain: error: bad.yaml:2: document 1: invalid YAML: while parsing a flow node did not find expected node content"],
    )
    request = {"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": {"devices": {"requests": [request]}}}
    (tmp_path / "claim.yaml").write_text(yaml.safe_dump(claim))
    code, err = outcome(capsys, ["explain", "claim.yaml", "--profile", "dgx-h100", "--feature-gates", "DRAAdminAcess=true,Frob=maybe"])
    assert (code, error_lines(err, "explain")) == (2, [
        "dra-driver explain: error: --feature-gates: unknown feature gate 'DRAAdminAcess': "
        "Kubernetes 1.35 has no gate of that name; did you mean 'DRAAdminAccess'?",
        "dra-driver explain: error: --feature-gates: 'Frob=maybe': write Frob=true or Frob=false",
    ])  # fmt: skip
