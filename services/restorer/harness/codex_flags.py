"""How the real `codex` CLI's command line reads: its value-taking options and its subcommands.

`codex.Codex` parses an original command with these to rewrite it into a resume or an opening.
"""

from __future__ import annotations

from services.restorer.harness import commands

EXEC = frozenset({"exec", "e"})
"""The non-interactive subcommand, by both its names."""

FLAGS = commands.FlagTable(
    # Every value-taking option of the real `codex --help` and `codex exec --help` of the
    # qualified versions (a test reads each pinned CLI's help and fails on one missing here).
    # clap gives `<VALUE>...` options every following word up to the next option.
    takes_value=frozenset(
        {
            "-c",
            "--config",
            "--enable",
            "--disable",
            "--remote",
            "--remote-auth-token-env",
            "-m",
            "--model",
            "--local-provider",
            "-p",
            "--profile",
            "-s",
            "--sandbox",
            "-a",
            "--ask-for-approval",
            "-C",
            "--cd",
            "--add-dir",
            "--thread-source",
            "--cyber-access-program",
            "--color",
            "-o",
            "--output-last-message",
            "--output-schema",
        }
    ),
    variadic=frozenset({"-i", "--image"}),
    dropped=frozenset({"--last"}),
)

# Subcommands other than exec: a command running one of them has no conversation to resume.
SUBCOMMANDS = frozenset(
    {
        "resume",
        "fork",
        "login",
        "logout",
        "mcp",
        "mcp-server",
        "app-server",
        "proto",
        "completion",
        "debug",
        "apply",
        "a",
        "cloud",
        "sandbox",
        "features",
        "help",
    }
)
