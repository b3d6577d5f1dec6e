"""Entry point of the `dra-driver` command.

Each command lives in its own module `dra_driver.cli.<name>` that defines
`add_parser(subparsers)`; the parser it adds must set `func=<callable(args) -> int>`.
`COMMANDS` names every command with its one-line summary, so `dra-driver --help` and
`--version` answer without importing any command module (each pulls in gRPC, the
kubernetes client, ruamel, pydantic or the CEL layer).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from dra_driver import __version__
from dra_driver.cli import failures
from dra_driver.cli.parser import Parser
from dra_driver.common.errors import DraError
from dra_driver.ingest import limits as input_limits
from dra_driver.common.logs import configure_logging

# Every command and its summary (the `dra-driver --help` listing, and the description of a command whose
# module gives none); the module dra_driver.cli.<name> is imported only when that command runs.
COMMANDS: dict[str, str] = {
    "discover": "print the ResourceSlices this node would publish",
    "run": "serve the kubelet plugin (registration + DRA gRPC) for every vendor found",
    "ready": "exit 0 when the daemon of this pod is ready (registered, serving, slices published)",
    "doctor": "check whether this node can serve claims, and say how to fix what stops it (exit 0 yes, 1 no)",
    "demo": "prepare and unprepare a claim end to end on simulated hardware (no cluster, no GPU, no root)",
    "explain": "check a ResourceClaim/Template/Pod/workload against a fleet offline and explain the allocation",
    "migrate": "rewrite device-plugin GPU requests (nvidia.com/gpu, amd.com/gpu, habana.ai/gaudi, MIG, AMD partitions) as DRA",
    "fleet": "show devices per node (total, allocated, free, tainted), shared counters, and who holds each device",
    "template": "write a ResourceClaimTemplate from what you want (count, vendor, model, memory, MIG, fallbacks, sharing), checked with explain",
    "fleet-exporter": "serve the fleet's DRA metrics (devices per node and class, pending claims, stale slices) for Prometheus",
    "profiles": "list the shipped hardware profiles (name, vendors, devices)",
    "completion": "print a shell completion script (bash or zsh)",
    "version": "print the version of dra-driver",
}
# Top-level options that take a value (chosen_command skips the value too).
_VALUE_OPTIONS = ("--log-format", "--max-input-size", "--max-input-nodes", "--max-input-depth")
EXIT_BAD_INPUT = failures.EXIT_USAGE
LOG_LEVEL_ENV = "DRA_DRIVER_LOG_LEVEL"
_LOG_LEVELS = {"warning": 0, "info": 1, "debug": 2}
# The daemon's crash goes to its log with the traceback: nobody reads its stderr line by line.
_KEEP_TRACEBACK = frozenset({"run"})
# Commands that load a whole fleet, answer once and exit (gcpause.one_shot_command).
_FLEET_ONE_SHOT = frozenset({"explain", "fleet", "template"})


def env_verbosity(value: str | None) -> int:
    """The log level a deployment sets without touching the args list ($DRA_DRIVER_LOG_LEVEL, e.g. from a
    ConfigMap); -v/-vv on the command line win. ValueError names the variable and the values it takes."""
    if not value:
        return 0
    try:
        return _LOG_LEVELS[value.strip().lower()]
    except KeyError:
        raise ValueError(f"${LOG_LEVEL_ENV}={value!r} is not a log level; use one of {', '.join(_LOG_LEVELS)}") from None


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command `argv` names, found without importing any command module.

    Skips the top-level options (see build_parser); None when there is no command
    or the first positional word is not a known command (argparse then reports it).
    """
    words = iter(argv)
    for word in words:
        if word == "--":
            word = next(words, "")
            return word if word in COMMANDS else None
        if word in _VALUE_OPTIONS:
            next(words, None)  # its value
            continue
        if word.startswith("-"):
            continue
        return word if word in COMMANDS else None
    return None


def _size(text: str) -> int:
    try:
        return input_limits.parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number of at least 1")
    return int(text)


def add_input_limit_flags(parser: argparse.ArgumentParser) -> None:
    """The limits of the input layer (dra_driver/ingest), for every command that reads files or stdin."""
    group = parser.add_argument_group("input limits (every file and standard input a command reads)")
    group.add_argument("--max-input-size", type=_size, default=None, metavar="SIZE",
                       help="largest input read, e.g. 64Mi; reading stops there (default 32Mi; migrate 1Mi)")
    group.add_argument(
        "--max-input-nodes",
        type=_positive,
        default=None,
        metavar="N",
        help=f"most values read from one YAML input, an alias counting every value it repeats (default {input_limits.DEFAULT_MAX_NODES:,}; "
        f"JSON {input_limits.JSON_NODES_FACTOR}x as many; migrate {input_limits.ROUND_TRIP_MAX_NODES:,})",
    )
    group.add_argument(
        "--max-input-depth",
        type=_positive,
        default=input_limits.DEFAULT_MAX_DEPTH,
        metavar="N",
        help=f"deepest nesting accepted (default {input_limits.DEFAULT_MAX_DEPTH})",
    )


def configure_inputs(args: argparse.Namespace) -> None:
    size, nodes = args.max_input_size, args.max_input_nodes
    input_limits.configure(
        input_limits.Limits(
            max_bytes=size if size is not None else input_limits.DEFAULT_MAX_BYTES,
            max_depth=args.max_input_depth,
            max_nodes=nodes if nodes is not None else input_limits.DEFAULT_MAX_NODES,
            bytes_chosen=size is not None,
            nodes_chosen=nodes is not None,
        )
    )


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with `only` set just that command's subparser.

    Each command module imports what its command needs (the daemon, gRPC, the
    kubernetes client, ruamel, pydantic, the CEL layer...); a run of one command
    should not pay for importing the others.
    """
    parser = Parser(
        prog="dra-driver",
        description="Kubernetes DRA driver for NVIDIA, AMD and Intel Gaudi accelerators.",
        epilog=failures.EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"dra-driver {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-v info, -vv debug)")
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    add_input_limit_flags(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    if only is None:  # the listing only: a command's own parser is built when it is named
        for name, summary in COMMANDS.items():
            subparsers.add_parser(name, help=summary)
        return parser
    importlib.import_module(f"dra_driver.cli.{only.replace('-', '_')}").add_parser(subparsers)
    finish_command_parser(only, subparsers.choices[only])
    return parser


def finish_command_parser(name: str, command: argparse.ArgumentParser) -> None:
    """What every command's parser shares: its prog, a description (the summary when the module gives none), the epilog."""
    command.prog = f"dra-driver {name}"
    if not command.description:
        command.description = COMMANDS[name][0].upper() + COMMANDS[name][1:] + "."
    command.epilog = "\n\n".join(filter(None, (command.epilog, failures.EPILOG)))


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen_command(words))
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        verbosity = args.verbose or env_verbosity(os.environ.get(LOG_LEVEL_ENV))
    except ValueError as exc:
        print(f"dra-driver: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    configure_logging(verbosity=verbosity, fmt=args.log_format)
    configure_inputs(args)
    failures.set_command(args.command)
    previous = _clean_up_on_sigterm(args.command)
    try:
        return _run_command(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except DraError as exc:  # an error a command raised on purpose: one line a problem, its exit code
        return failures.report(exc)
    except Exception as exc:  # one line, not a traceback, unless -vv asks for it
        if args.verbose >= 2 or args.command in _KEEP_TRACEBACK:
            raise
        failures.error(
            f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:500]} (run with -vv for the traceback, and please report it)"
        )
        return failures.EXIT_FAILURE
    finally:
        failures.set_command(None)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        logging.shutdown()
        if argv is None:
            # The process exits next: keep what is left out of the interpreter's last collection
            # (~30-50 ms of CPU after explain on a 10,000-device fleet, docs/performance.md).
            gc.freeze()


def _remove_scratch_and_die(signum: int, _frame: object) -> None:
    """SIGTERM to a one-shot command: remove the simulated backends' (and the demo's) scratch dirs, which no
    finally block will, then die of the signal as without this handler. Not an exception raised wherever the
    command was: unwinding through gRPC's internals can deadlock in a channel's __del__."""
    sim_scratch = sys.modules.get("dra_driver.simulation.scratch")  # never imported: this process made no scratch dir
    if sim_scratch is not None:
        sim_scratch.close_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _clean_up_on_sigterm(command: str) -> signal.Handlers | Callable[..., Any] | int | None:
    """Install the SIGTERM handler for a one-shot command; the previous handler, or None when none was installed.

    `run` answers SIGTERM itself (a clean daemon stop); signal handlers can only be set from the main thread.
    """
    if command == "run" or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _remove_scratch_and_die)


def _run_command(args: argparse.Namespace) -> int:
    if args.command not in _FLEET_ONE_SHOT:
        return int(args.func(args) or 0)
    from dra_driver.allocator.gcpause import one_shot_command  # these commands import the allocator anyway

    with one_shot_command():
        return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
