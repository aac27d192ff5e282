"""Native resume with the real Codex CLI (the pinned npm package; `make qualify` runs this
module against other versions), against a loopback mock of the OpenAI Responses API reached
through a `model_providers` entry in config.toml.

Spec: "Native resume is qualified for Codex 0.162"; the harness reopens the same
conversation from its own captured session files.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from services.restorer.harness import codex, codex_flags
from tests.integration.harness_cli import cases
from tests.integration.harness_cli import cli_support as cs
from tests.support import agent_clis, model_api

pytestmark = pytest.mark.slow


@pytest.fixture
def cli() -> Iterator[cs.Cli]:
    with model_api.ModelApi() as api:
        yield cs.Cli(codex.NAME, agent_clis.codex_executable(), api)


@pytest.mark.parametrize("config_dirs", [False, True], ids=["home", "CODEX_HOME"])
async def test_native_resume_sends_every_earlier_turn(
    cli: cs.Cli, tmp_path: pathlib.Path, config_dirs: bool
) -> None:
    """Captured in home/folder A, restored into home/folder B (and with CODEX_HOME at another
    path on each side): `codex exec … resume ID -- PROMPT` exits 0 and the model receives
    every earlier turn byte for byte."""
    await cases.native_resume(cli, tmp_path, config_dirs=config_dirs)


async def test_the_swarm_continuation_prompt_is_sent(cli: cs.Cli, tmp_path: pathlib.Path) -> None:
    """The operator's continuation prompt, even one starting with a dash, is the next turn."""
    await cases.operator_prompt(cli, tmp_path)


async def test_a_resume_without_a_prompt_fails_on_the_real_cli(
    cli: cs.Cli, tmp_path: pathlib.Path
) -> None:
    """Regression: `codex exec resume ID` with no prompt exits 1 ("No prompt provided via
    stdin."), which is why the restorer now passes one."""
    await cases.prompt_less_resume_fails(cli, tmp_path)


async def test_interactive_resume_stops_at_no_question(cli: cs.Cli, tmp_path: pathlib.Path) -> None:
    """Under tmux, after prepare_home: no "Working directory · resume" picker (the worktree
    moved), no trust prompt for the git repository."""
    await cases.interactive_resume(cli, tmp_path)


async def test_reconstructed_continuation_opens_with_the_transcript(
    cli: cs.Cli, tmp_path: pathlib.Path
) -> None:
    """The first request of a reconstructed continuation holds the archived transcript after
    the spec's opening line."""
    await cases.reconstructed(cli, tmp_path)


def test_every_value_taking_option_of_the_help_is_in_the_table(cli: cs.Cli) -> None:
    """The real `codex --help` and `codex exec --help`: each `<VALUE>` and `<VALUE>...`
    option is in the adapter's table with that arity."""
    cases.help_options(cli, codex_flags.FLAGS, ["exec"])
