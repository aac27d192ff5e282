"""How the real `claude` CLI's command line reads: its value-taking options.

`claude_code.ClaudeCode` parses an original command with these to rewrite it into a resume or
an opening.
"""

from __future__ import annotations

from services.restorer.harness import commands

FLAGS = commands.FlagTable(
    # Every value-taking option of the real `claude --help` of the qualified versions (2.1.112
    # to 2.1.332; a test reads each pinned CLI's help and fails on one missing here), plus the
    # hidden ones older builds documented. Commander gives `<value...>` options every following
    # word up to the next option; `<value>` takes one word, even when repeatable (`--plugin-dir
    # A --plugin-dir B`); `[value]` takes the next word unless it is an option.
    takes_value=frozenset(
        {
            "--agent",
            "--agents",
            "--append-system-prompt",
            "--append-system-prompt-file",
            "--autocompact",
            "--debug-file",
            "--effort",
            "--environment",
            "--fallback-model",
            "--input-format",
            "--json-schema",
            "--max-budget-usd",
            "--max-turns",
            "--model",
            "-n",
            "--name",
            "--output-format",
            "--permission-mode",
            "--permission-prompt-tool",
            "--permission-prompts",
            "--plugin-dir",
            "--plugin-url",
            "--remote-control-session-name-prefix",
            "--session-id",
            "--setting-sources",
            "--settings",
            "--system-prompt",
            "--system-prompt-file",
            "--system-prompt-snapshot",
        }
    ),
    variadic=frozenset(
        {
            "--add-dir",
            "--allowedTools",
            "--allowed-tools",
            "--betas",
            "--disallowedTools",
            "--disallowed-tools",
            "--file",
            "--mcp-config",
            "--tools",
        }
    ),
    optional_value=frozenset(
        {
            "-d",
            "--debug",
            "-r",
            "--resume",
            "--from-pr",
            "--cloud",
            "--prompt-suggestions",
            "--remote-control",
            "--teleport",
            "-w",
            "--worktree",
        }
    ),
    # A resumed or re-prompted conversation must not also continue, fork or pin another one,
    # nor open a remote or cloud session in its place.
    dropped=frozenset(
        {
            "-c",
            "--continue",
            "-r",
            "--resume",
            "--session-id",
            "--fork-session",
            "--from-pr",
            "--teleport",
            "--cloud",
        }
    ),
)
