"""The argument parser of every command: argparse, with did-you-mean hints on its usage errors.

A misspelt flag gets the close flags of its command; a global flag given after the command (where
argparse only says "unrecognized") gets the hint to move it before the command; an invalid choice
(a command name, `-o tabel`) gets the close choices.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import NoReturn

from dra_driver.common import suggest

_UNRECOGNIZED = re.compile(r"^unrecognized arguments: (?P<words>.+)$")
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<word>[^']*)' \(choose from (?P<choices>.+)\)$")


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose usage errors end with a hint when one can be given."""

    def error(self, message: str) -> NoReturn:
        hint = self.hint(message)
        # argparse reports a command's unknown flags from the top parser: name the command as its other errors do
        reporter = self._command_parser() if _UNRECOGNIZED.match(message) else None
        (reporter or self).print_usage(sys.stderr)
        self.exit(2, f"{(reporter or self).prog}: error: {message}{'; ' + hint if hint else ''}\n")

    def hint(self, message: str) -> str:
        unrecognized = _UNRECOGNIZED.match(message)
        if unrecognized:
            flags = [word.split("=", 1)[0] for word in unrecognized.group("words").split() if word.startswith("-")]
            return "; ".join(filter(None, (self._flag_hint(flag) for flag in flags)))
        choice = _INVALID_CHOICE.search(message)
        if choice:
            choices = re.findall(r"'([^']*)'", choice.group("choices"))
            return suggest.did_you_mean(choice.group("word"), choices)
        return ""

    def _flag_hint(self, flag: str) -> str:
        command = self._command_parser()
        if flag in self._option_string_actions and command is not None and flag not in command._option_string_actions:
            return f"{flag} is a global flag: give it before the command (dra-driver {flag} ... {command.prog.split()[-1]} ...)"
        flags = (command or self)._option_string_actions
        found = suggest.did_you_mean(flag, [name for name in flags if name.startswith("--")] or list(flags))
        return f"{flag}: {found}" if found else ""

    def _command_parser(self) -> argparse.ArgumentParser | None:
        """The parser of the command given: main builds only that command's subparser when it knows the command."""
        for action in self._subparsers._group_actions if self._subparsers else ():
            if isinstance(action, argparse._SubParsersAction) and len(action.choices) == 1:
                parser: argparse.ArgumentParser = next(iter(action.choices.values()))
                return parser
        return None
