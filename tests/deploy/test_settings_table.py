"""The daemon's settings are declared once (dra_driver/node/settings.py): run's flags, the DaemonSet's environment and
ConfigMap, and docs/install.md's settings table all follow that table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli.main import LOG_LEVEL_ENV
from dra_driver.cli.ready import POD_UID_ENV
from dra_driver.cli.run import add_daemon_arguments
from dra_driver.node.settings import ENV_PREFIX, DaemonSettings, add_arguments, env_name, flag, settings
from tests.deploy.test_manifests import OVERLAYS, by_kind, container, render

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "docs" / "install.md"
# Variables of the container that are no run setting: every command's log level.
NOT_RUN_SETTINGS = {LOG_LEVEL_ENV}


def run_parser(environ: dict[str, str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser, environ or {})
    return parser


def test_run_has_one_flag_per_setting_and_no_other() -> None:
    parser = argparse.ArgumentParser()
    add_daemon_arguments(parser)
    flags = {option for action in parser._actions if action.dest != "help" for option in action.option_strings}
    expected = {flag(name) for name, _ in settings()}
    expected |= {"--no-" + name.replace("_", "-") for name, item in settings() if item.boolean}
    assert flags == expected
    assert "--metrics-port" not in flags


def test_every_setting_reads_its_variable_with_the_one_prefix() -> None:
    """Each variable, given alone, sets its setting as the flag would."""
    examples = {"metrics_bind_address": ":9400", "device_metrics_interval": "30", "partitioning": "dynamic",
                "mps_compute_mode": "unchanged", "consumable_gpu_memory": "true", "claim_cache": "true"}  # fmt: skip
    for name, item in settings():
        assert env_name(name).startswith(ENV_PREFIX)
        text = examples.get(name, "/x" if item.parse is Path or name.endswith(("_dir", "_root", "_socket")) else "value-1")
        from_env = DaemonSettings.from_namespace(run_parser({env_name(name): text}).parse_args([]))
        given = [flag(name)] if item.boolean else [flag(name), text]
        from_flag = DaemonSettings.from_namespace(run_parser().parse_args(given))
        assert getattr(from_env, name) == getattr(from_flag, name), name
        assert getattr(from_env, name) != getattr(DaemonSettings.from_namespace(run_parser().parse_args([])), name) or name == "node_name", name


def test_a_bad_variable_names_the_flag_and_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser, {env_name("mps_compute_mode"): "sometimes"})
    with pytest.raises(SystemExit):
        parser.parse_args([])
    err = capsys.readouterr().err
    assert "--mps-compute-mode" in err and env_name("mps_compute_mode") in err and "sometimes" in err


def test_the_flag_wins_over_the_variable() -> None:
    args = run_parser({env_name("partitioning"): "dynamic"}).parse_args(["--partitioning", "static"])
    assert args.partitioning == "static"


def test_the_probe_reads_the_same_pod_uid_variable_as_the_daemon() -> None:
    assert POD_UID_ENV == env_name("pod_uid")


def _container_variables(objs: tuple[dict[str, Any], ...]) -> dict[str, str | None]:
    """Every variable the plugin container gets: its env (None for downward-API values) and its ConfigMaps."""
    plugin = container(objs)
    variables: dict[str, str | None] = {e["name"]: e.get("value") for e in plugin.get("env", [])}
    names = {source["configMapRef"]["name"] for source in plugin.get("envFrom", [])}
    for config in by_kind(objs, "ConfigMap"):
        if config["metadata"]["name"] in names:
            variables.update(config.get("data", {}))
    return variables


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_daemonsets_variables_are_declared_settings_with_valid_values(overlay: str) -> None:
    variables = _container_variables(render(overlay))
    declared = {env_name(name) for name, _ in settings()}
    ours = {key for key in variables if key.startswith(ENV_PREFIX)}  # others are for libraries (ROCM_PATH)
    assert ours - NOT_RUN_SETTINGS <= declared, "a variable no setting reads"
    assert not {name.upper() for name, _ in settings()} & set(variables), "a setting's variable without the prefix"
    given = {key: value for key, value in variables.items() if key in declared and value is not None}
    run_parser(given).parse_args([])  # a value the daemon would refuse raises here
    assert {env_name("node_name"), env_name("pod_uid")} <= set(variables)


def _documented_rows() -> dict[str, list[str]]:
    text = INSTALL.read_text()
    section = text[text.index("## Settings of `dra-driver run`") :]
    section = section[: section.index("\n## ", 1)]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`--"):
            rows[cells[0].split("`")[1]] = cells
    return rows


def test_docs_install_lists_every_setting_with_its_variable_and_default() -> None:
    rows = _documented_rows()
    assert set(rows) == {flag(name) for name, _ in settings()}
    for name, item in settings():
        _, variable, default, what = rows[flag(name)]
        assert variable == f"`{env_name(name)}`", name
        assert default == item.default_text, name
        assert what, name
