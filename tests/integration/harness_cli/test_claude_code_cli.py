"""Native resume with the real Claude Code CLI (the pinned npm package; `make qualify` runs
this module against other versions), against a loopback mock of the Anthropic API.

Spec: "Native resume is qualified for Claude Code 2.1"; the harness reopens the same
conversation from its own captured session files.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from services.restorer.harness import claude_code, claude_code_flags
from tests.integration.harness_cli import cases
from tests.integration.harness_cli import cli_support as cs
from tests.support import agent_clis, model_api

pytestmark = pytest.mark.slow


@pytest.fixture
def cli() -> Iterator[cs.Cli]:
    with model_api.ModelApi() as api:
        yield cs.Cli(claude_code.NAME, agent_clis.claude_executable(), api)


@pytest.mark.parametrize("config_dirs", [False, True], ids=["home", "CLAUDE_CONFIG_DIR"])
async def test_native_resume_sends_every_earlier_turn(
    cli: cs.Cli, tmp_path: pathlib.Path, config_dirs: bool
) -> None:
    """Captured in home/folder A, restored into home/folder B (and with CLAUDE_CONFIG_DIR at
    another path on each side): `claude --resume ID -p -- PROMPT` exits 0 and the model
    receives every earlier turn byte for byte."""
    await cases.native_resume(cli, tmp_path, config_dirs=config_dirs)


async def test_the_swarm_continuation_prompt_is_sent(cli: cs.Cli, tmp_path: pathlib.Path) -> None:
    """The operator's continuation prompt, even one starting with a dash, is the next turn."""
    await cases.operator_prompt(cli, tmp_path)


async def test_a_resume_without_a_prompt_fails_on_the_real_cli(
    cli: cs.Cli, tmp_path: pathlib.Path
) -> None:
    """Regression: `claude --resume ID -p` with no prompt exits 1 ("Provide a prompt to
    continue the conversation"), which is why the restorer now passes one."""
    await cases.prompt_less_resume_fails(cli, tmp_path)


async def test_interactive_resume_stops_at_no_question(cli: cs.Cli, tmp_path: pathlib.Path) -> None:
    """Under tmux, after prepare_home: no onboarding, no workspace trust dialog (the operator
    pre-approved the API key, as an unattended deployment does)."""
    await cases.interactive_resume(cli, tmp_path)


async def test_reconstructed_continuation_opens_with_the_transcript(
    cli: cs.Cli, tmp_path: pathlib.Path
) -> None:
    """The first request of a reconstructed continuation holds the archived transcript after
    the spec's opening line."""
    await cases.reconstructed(cli, tmp_path)


def test_every_value_taking_option_of_the_help_is_in_the_table(cli: cs.Cli) -> None:
    """The real `claude --help`: each `<value>`, `<values...>` and `[value]` option is in the
    adapter's table with that arity."""
    cases.help_options(cli, claude_code_flags.FLAGS)
