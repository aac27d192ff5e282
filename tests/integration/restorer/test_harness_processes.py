"""Harness versions read from real processes, and the commands they are given, via fake CLIs."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from services.restorer import harness
from services.restorer.harness import base
from tests.support import fake_harness

SID = "0b0c5e2a-7d1f-4c39-9a55-1f2e3d4c5b6a"


async def test_versions_are_read_from_the_executables(
    fake_harnesses: fake_harness.FakeHarnesses,
) -> None:
    """The harness version on the replacement is what `--version` reports."""
    claude = harness.for_name("claude_code")
    codex = harness.for_name("codex")
    assert await claude.read_version(str(fake_harnesses.path("claude"))) == "2.1.3"
    assert await codex.read_version(str(fake_harnesses.path("codex"))) == "0.162.0"
    fake_harnesses.set_version("claude", "2.10.0")
    version = await claude.read_version(str(fake_harnesses.path("claude")))
    assert version == "2.10.0"
    assert not claude.qualifies(version)


@pytest.mark.parametrize(("output", "code"), [("2.1.3 (Claude Code)", 3), ("no version here", 0)])
async def test_a_failing_or_unreadable_version_is_refused(
    fake_harnesses: fake_harness.FakeHarnesses, output: str, code: int
) -> None:
    """A version command that fails or prints no version is a harness error, not a guess."""
    fake_harnesses.set_version_output("claude", output, exit_code=code)
    with pytest.raises(base.HarnessError):
        await harness.for_name("claude_code").read_version(str(fake_harnesses.path("claude")))


async def test_a_missing_executable_is_refused(tmp_path: pathlib.Path) -> None:
    """No executable: the version cannot be checked."""
    with pytest.raises(base.HarnessError):
        await harness.for_name("codex").read_version(str(tmp_path / "no-such-codex"))


async def _run(command: list[str], cwd: pathlib.Path) -> int:
    process = await asyncio.create_subprocess_exec(*command, cwd=cwd)
    return await process.wait()


async def test_the_commands_run_as_given(
    fake_harnesses: fake_harness.FakeHarnesses, tmp_path: pathlib.Path
) -> None:
    """The supervisor runs the native resume command or the original command with the opening
    prompt; the executable receives exactly those arguments from the worktree."""
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    prompt = 'Continue from this recorded conversation.\n{"a": "x\u2028y"}\n'
    claude = harness.for_name("claude_code")
    codex = harness.for_name("codex")
    claude_original = [str(fake_harnesses.path("claude")), "--model", "opus", "task"]
    codex_original = [str(fake_harnesses.path("codex")), "exec", "--json", "task"]
    for command in (
        claude.resume_command(claude_original, SID, "go on"),
        claude.opening_prompt_command(claude_original, prompt),
        codex.resume_command(codex_original, SID, "go on"),
        codex.opening_prompt_command(codex_original, prompt),
    ):
        assert await _run(command, worktree) == 0
    calls = fake_harnesses.calls()
    assert [call["argv"][1:] for call in calls] == [
        ["--resume", SID, "--model", "opus", "--", "go on"],
        ["--model", "opus", "--", prompt],
        ["exec", "--json", "resume", SID, "--", "go on"],
        ["exec", "--json", "--", prompt],
    ]
    assert {call["cwd"] for call in calls} == {str(worktree.resolve())}
