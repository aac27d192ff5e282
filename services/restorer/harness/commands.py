"""An agent CLI's command line, split into options and positionals so a harness can rewrite it
(into its resume command, or one that opens with a prompt).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from services.restorer.harness import base


@dataclasses.dataclass(frozen=True)
class FlagTable:
    """How a CLI's options consume the tokens after them.

    `takes_value`: exactly one following token; `variadic`: every following token up to the
    next one starting with `-`; `optional_value`: the next token unless it starts with `-`.
    `dropped`: options removed when the command is rewritten (with the values they consume).
    """

    takes_value: frozenset[str]
    variadic: frozenset[str] = frozenset()
    optional_value: frozenset[str] = frozenset()
    dropped: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class Token:
    """One option with the values it consumed, or one positional argument."""

    words: tuple[str, ...]
    option: bool


@dataclasses.dataclass(frozen=True)
class ParsedCommand:
    """An original command split into its executable and its tokens, in order."""

    executable: str
    tokens: tuple[Token, ...]

    def options(self) -> list[str]:
        """Every kept option with its values, in order."""
        return [word for token in self.tokens if token.option for word in token.words]

    def positionals(self) -> list[str]:
        """Every positional argument, in order."""
        return [token.words[0] for token in self.tokens if not token.option]

    def split_at_first_positional(self) -> tuple[list[str], str | None, ParsedCommand]:
        """(options before the first positional, that positional, the rest as a command)."""
        for index, token in enumerate(self.tokens):
            if not token.option:
                before = [w for t in self.tokens[:index] for w in t.words]
                rest = ParsedCommand(self.executable, self.tokens[index + 1 :])
                return before, token.words[0], rest
        return self.options(), None, ParsedCommand(self.executable, ())


def parse_command(command: Sequence[str], table: FlagTable) -> ParsedCommand:
    """Split a command line into its executable and tokens (options with values, positionals).

    `--name=value` and attached short values (`-mgpt`) are one word. Every word after `--` is
    positional. Options in `table.dropped` are removed with their values.

    Raises:
        HarnessError: the command is empty.
    """
    if not command:
        raise base.HarnessError("harness: the original command is empty")
    executable, words = command[0], list(command[1:])
    tokens: list[Token] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word == "--":
            tokens.extend(Token((rest,), option=False) for rest in words[index:])
            break
        if not word.startswith("-") or word == "-":
            tokens.append(Token((word,), option=False))
            continue
        name = word.split("=", 1)[0]
        group = [word]
        if "=" not in word:
            if name in table.takes_value and index < len(words):
                group.append(words[index])
                index += 1
            elif name in table.variadic:
                while index < len(words) and not words[index].startswith("-"):
                    group.append(words[index])
                    index += 1
            elif (
                name in table.optional_value
                and index < len(words)
                and not words[index].startswith("-")
            ):
                group.append(words[index])
                index += 1
        if name not in table.dropped:
            tokens.append(Token(tuple(group), option=True))
    return ParsedCommand(executable, tuple(tokens))
