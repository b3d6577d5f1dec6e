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


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["version"]])
def test_help_and_version_import_no_command_library(argv: list[str]) -> None:
    """The static command table answers these without the modules that gRPC, the kubernetes client, pydantic or the
    CEL layer come with (docs/performance.md has the CPU figure)."""
    code = (
        "import sys\nfrom dra_driver.cli.main import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
        "heavy = ('grpc', 'kubernetes', 'pydantic', 'yaml', 'ruamel.yaml', 'celpy', 'dra_driver.cli.run', 'dra_driver.cli.explain', "
        "'dra_driver.node.daemon')\n"
        "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)"
    ) % (argv,)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stderr.strip().splitlines()[-1] == "[]"


def test_the_command_table_lists_every_command_module() -> None:
    """A command module that the table misses could never run; a table entry without a module would fail at run time."""
    from pathlib import Path

    import dra_driver.cli
    from dra_driver.cli.main import COMMANDS

    modules = {p.stem for p in Path(dra_driver.cli.__file__).parent.glob("*.py") if "def add_parser(" in p.read_text()}
    assert modules == {name.replace("-", "_") for name in COMMANDS}


def test_help_lists_every_command_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    from dra_driver.cli.main import COMMANDS

    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for name, summary in COMMANDS.items():
        assert f"{name} {' '.join(summary.split())}" in out


@pytest.mark.parametrize("command", ["run", "ready", "demo"])
def test_every_command_help_has_a_description(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    usage, _, rest = capsys.readouterr().out.partition("\n\n")
    assert rest.split("\n\n")[0].strip() and not rest.startswith("options:"), rest[:200]


def test_version_command_and_flag_agree(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from dra_driver import __version__

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"dra-driver {__version__}"
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith(f"dra-driver {__version__} (Python ")
    assert main(["version", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == __version__


def complete(script: str, words: list[str]) -> list[str]:
    """What bash offers after `words` (the last one being completed), running the generated function in a real bash."""
    line = " ".join(words)
    driver = (
        f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; COMP_LINE={line!r}\n"
        "_dra_driver; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    result = subprocess.run(["bash", "--norc", "-c", driver], capture_output=True, text=True, check=True)
    return [w for w in result.stdout.splitlines() if w]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_completes_commands_flags_and_choices(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    if shell == "zsh":
        assert script.startswith("# dra-driver completion") and "bashcompinit" in script
        return
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    assert "explain" in complete(script, ["dra-driver", "exp"])
    assert complete(script, ["dra-driver", "--log-format", "json", "doctor", "--containerd-c"]) == ["--containerd-config"]
    assert complete(script, ["dra-driver", "fleet", "-o", ""]) == ["table", "wide", "json", "yaml", "html", "svg"]
    assert complete(script, ["dra-driver", "run", "--partitioning", "d"]) == ["dynamic"]
    assert complete(script, ["dra-driver", "--log-format", ""]) == ["text", "json"]
