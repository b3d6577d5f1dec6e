"""`dra-driver version`: the version of this build (the same as `dra-driver --version`), as text, JSON or YAML."""

from __future__ import annotations

import argparse
import json
import platform
import sys

from dra_driver import __version__


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("version")
    parser.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text", help="text for people; json or yaml for tools")
    parser.set_defaults(func=run)


def info() -> dict[str, str]:
    return {"version": __version__, "python": platform.python_version()}


def run(args: argparse.Namespace) -> int:
    found = info()
    if args.output == "json":
        print(json.dumps(found, indent=2))
    elif args.output == "yaml":
        print("\n".join(f"{key}: {json.dumps(value)}" for key, value in found.items()))  # a JSON string is a YAML scalar
    else:
        print(f"dra-driver {found['version']} (Python {found['python']})", file=sys.stdout)
    return 0
