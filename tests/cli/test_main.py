from __future__ import annotations

import subprocess
import sys

import pytest

from dra_driver.cli.main import chosen_command, main


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["explain", "c.yaml"], "explain"),
        (["-v", "--log-format", "json", "discover"], "discover"),
        (["--log-format=json", "-vv", "migrate", "-"], "migrate"),
        (["--", "demo"], "demo"),
        (["--max-input-size", "64Mi", "--max-input-nodes", "9", "--max-input-depth", "3", "explain", "c"], "explain"),
        (["--max-input-size=64Mi", "migrate"], "migrate"),
        (["explian"], None),
        (["-v"], None),
        ([], None),
    ],
)
def test_chosen_command(argv: list[str], expected: str | None) -> None:
    assert chosen_command(argv) == expected


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "discover" in capsys.readouterr().err


def test_unknown_command_lists_the_real_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["explian"])
    assert info.value.code == 2
    assert "explain" in capsys.readouterr().err


def test_one_command_does_not_import_the_others() -> None:
    code = (
        "import sys; from dra_driver.cli.main import main; main(['discover', '--profile', 'l4', '-o', 'json']);"
        "print(sorted(m for m in ('grpc', 'ruamel.yaml', 'dra_driver.node.daemon') if m in sys.modules), file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stderr.strip().splitlines()[-1] == "[]"
