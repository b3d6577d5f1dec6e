"""Entry point of the `dra-driver` command.

Each command lives in its own module `dra_driver.cli.<name>` that defines
`add_parser(subparsers)`; the parser it adds must set `func=<callable(args) -> int>`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from dra_driver import __version__
from dra_driver.logs import configure_logging

COMMANDS: tuple[str, ...] = ("discover", "run", "demo", "explain", "migrate", "fleet", "template")


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
        if word == "--log-format":
            next(words, None)  # its value
            continue
        if word.startswith("-"):
            continue
        return word if word in COMMANDS else None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with `only` set just that command's subparser.

    Each command module imports what its command needs (the daemon, gRPC, the
    kubernetes client, ruamel, pydantic, the CEL layer...); a run of one command
    should not pay for importing the others.
    """
    parser = argparse.ArgumentParser(
        prog="dra-driver",
        description="Kubernetes DRA driver for NVIDIA, AMD and Intel Gaudi accelerators.",
    )
    parser.add_argument("--version", action="version", version=f"dra-driver {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output (-v info, -vv debug)"
    )
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        try:
            module = importlib.import_module(f"dra_driver.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"dra_driver.cli.{name}":
                continue  # command not built into this version
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen_command(words))
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    configure_logging(verbosity=args.verbose, fmt=args.log_format)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    finally:
        logging.shutdown()


if __name__ == "__main__":
    sys.exit(main())
