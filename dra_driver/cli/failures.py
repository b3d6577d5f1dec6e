"""The one way every command reports a failure (docs/cli.md, "Errors and exit codes").

Each problem is one line on stderr, `dra-driver COMMAND: error: WHAT; HOW TO FIX` (argparse's own
usage errors read the same; details of a problem, such as the nearest devices, follow indented),
warnings `dra-driver COMMAND: warning: ...`. Exit codes:

  0  done (the command's answer is yes)
  1  the command ran and its answer is no (explain: not allocatable; template: no node of the fleet
     can hold it; migrate --check: something would change), or it failed at run time (hardware,
     daemon)
  2  usage or invalid input: an argument, a file, a name; nothing was changed
  3  the cluster cannot be used: unreachable, refusing the credentials, or not serving
     resource.k8s.io/v1
"""

from __future__ import annotations

import sys

from dra_driver.common.errors import DraError, UsageError

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_CLUSTER = 0, 1, 2, 3
EXIT_INVALID = EXIT_USAGE  # the name explain, template and fleet use
EPILOG = (
    "exit codes: 0 done; 1 the answer is no or a run-time failure; 2 usage or invalid input; "
    "3 the cluster cannot be used (unreachable, credentials, resource.k8s.io/v1 not served); "
    "4 (migrate --check) device-plugin requests remain that migrate cannot convert. "
    "Errors are one line each: 'dra-driver COMMAND: error: what; how to fix'."
)

_command = "dra-driver"


def set_command(name: str | None) -> None:
    """The command every line names (main sets it once it knows the command)."""
    global _command
    _command = f"dra-driver {name}" if name else "dra-driver"


def error(message: str) -> None:
    print(f"{_command}: error: {message}", file=sys.stderr)


def warning(message: str) -> None:
    print(f"{_command}: warning: {message}", file=sys.stderr)


def info(message: str) -> None:
    print(f"{_command}: {message}", file=sys.stderr)


def fail(message: str, code: int = EXIT_USAGE) -> int:
    """Print one error line and return `code`."""
    error(message)
    return code


def exit_code(exc: BaseException) -> int:
    """The exit code of an error: 2 for input, 3 for a cluster that cannot be used, 1 otherwise."""
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    server_check = sys.modules.get("dra_driver.kube.server_check")  # not imported: no cluster was asked
    if server_check is not None and isinstance(exc, server_check.ClusterError):
        return EXIT_CLUSTER
    return EXIT_FAILURE


def _problems(exc: DraError) -> list[list[str]]:
    """Each problem as its lines: errors that carry a list (explain's, migrate's, validation's) one problem each;
    another error one problem, whose further lines (template's nearest devices) are its details."""
    errors = getattr(exc, "errors", None)
    subject = getattr(exc, "subject", "")
    head = f"{subject}: " if subject else ""
    texts = [f"{head}{e}" for e in errors] if isinstance(errors, list) and errors else [str(exc)]
    problems = []
    for text in texts:
        first, *rest = [line.rstrip() for line in text.strip().splitlines() if line.strip()] or [type(exc).__name__]
        problems.append([" ".join(first.split()), *rest])
    return problems


def report(exc: DraError) -> int:
    """Print `exc` for a person, one `error:` line a problem (details indented below it), and return its exit code."""
    for first, *details in _problems(exc):
        error(first)
        for line in details:
            print(line if line.startswith(" ") else f"  {line}", file=sys.stderr)
    return exit_code(exc)
