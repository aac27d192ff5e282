"""Capture → restore round trips through the real Capturer, a real store and a real sidecar.

The fenced attempt's worktree has commits that were never pushed, staged, unstaged and
untracked changes (git_repos.project); its harness home holds a Claude Code (or Codex)
session. The replacement restores into an empty folder (the project is cloned first) or into
an existing checkout at a different path, and ends with the same tree byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import stat

import pytest

from services.common import directives, settings
from services.restorer import transcripts
from services.restorer.harness import base, claude_code, codex
from tests.integration.restorer import sidecar_support as kit
from tests.support import git_repos

json_logs = kit.json_logs  # the fixture, visible to this module

C = directives.Continuity
pytestmark = pytest.mark.usefixtures("usual_umask")


def _storage(scene: kit.Scene) -> settings.StorageSettings:
    return settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(scene.tmp / "checkpoints")})


async def _restore(scene: kit.Scene, directive: directives.Directive) -> kit.Run:
    launch = scene.launch(directive)
    conf = scene.conf(
        LAUNCH_RECORD=scene.write_launch(launch),
        CHECKPOINT_ROOT=str(scene.tmp / "checkpoints"),
    )
    return await kit.restore_once(conf, scene.worktree)


def _assert_same_tree(scene: kit.Scene) -> None:
    want = git_repos.snapshot(scene.project.worktree, git_repos.IGNORED)
    assert git_repos.snapshot(scene.worktree) == want
    fenced_head = git_repos.git(scene.project.worktree, "rev-parse", "HEAD")
    assert git_repos.git(scene.worktree, "rev-parse", "HEAD") == fenced_head
    assert git_repos.git(scene.worktree, "symbolic-ref", "--short", "HEAD") == "main"


@pytest.mark.parametrize("existing", [False, True], ids=["empty-folder", "existing-checkout"])
async def test_claude_code_native_round_trip(
    tmp_path: pathlib.Path, existing: bool, json_logs: kit.JsonLogs
) -> None:
    """Native continuity: the session files land where `claude --resume` looks from the
    replacement's worktree (re-keyed: its path differs), committed and uncommitted source is
    applied (cloning first into an empty folder), and the supervisor gets the native resume
    command instead of the original one. Onboarding is marked completed."""
    scene = kit.make_scene(tmp_path, existing=existing)
    captured = await kit.capture(scene, _storage(scene))
    assert captured.native_session_id == kit.SESSION_ID
    assert captured.watermark == len(kit.CONVERSATION)

    run = await _restore(scene, kit.directive_for(captured, C.NATIVE))

    ready = run.ready
    # The swarm sets no continuation prompt: the default one follows the original's options.
    assert list(ready.command) == [
        scene.executable,
        "--resume",
        kit.SESSION_ID,
        "--model",
        "opus",
        "--",
        base.DEFAULT_CONTINUATION_PROMPT,
    ]
    assert ready.cwd == str(scene.worktree)
    assert ready.checkpoint_id == captured.checkpoint_id and ready.watermark == 3
    assert run.steps == [
        ("directive", "started"),
        ("directive", "done"),
        ("verify", "started"),
        ("verify", "done"),
        ("registration", "started"),
        ("registration", "done"),
        ("native", "started"),
        ("native", "done"),
        ("source", "started"),
        ("source", "done"),
        ("continuation", "skipped"),
    ]
    _assert_same_tree(scene)
    fenced_file = (
        scene.fenced_home
        / ".claude"
        / "projects"
        / claude_code.project_key(scene.project.worktree)
        / f"{kit.SESSION_ID}.jsonl"
    )
    restored_file = (
        scene.home
        / ".claude"
        / "projects"
        / claude_code.project_key(scene.worktree)
        / f"{kit.SESSION_ID}.jsonl"
    )
    assert restored_file.read_bytes() == fenced_file.read_bytes()
    assert stat.S_IMODE(restored_file.stat().st_mode) == 0o600
    assert '"hasCompletedOnboarding": true' in (scene.home / ".claude.json").read_text()
    assert not (scene.attempt_dir / "continuation.txt").exists()
    assert run.status.restore_outcomes_by_type["native"] == 1
    assert kit.CONVERSATION_SECRET not in json_logs.text()


@pytest.mark.parametrize("existing", [False, True], ids=["empty-folder", "existing-checkout"])
async def test_codex_native_round_trip(tmp_path: pathlib.Path, existing: bool) -> None:
    """The same with Codex: its rollout file lands at its dated path, the session index agrees
    with it, and the supervisor gets `codex resume <id>` with the original options."""
    scene = kit.make_scene(tmp_path, harness=codex.NAME, existing=existing)
    captured = await kit.capture(scene, _storage(scene))
    assert captured.native_session_id == kit.CODEX_SESSION_ID

    run = await _restore(scene, kit.directive_for(captured, C.NATIVE))

    ready = run.ready
    assert list(ready.command)[:3] == [scene.executable, "resume", kit.CODEX_SESSION_ID]
    assert "fix the failing test" not in ready.command
    _assert_same_tree(scene)
    rollouts = list((scene.home / ".codex" / "sessions").rglob("rollout-*.jsonl"))
    fenced = list((scene.fenced_home / ".codex" / "sessions").rglob("rollout-*.jsonl"))
    assert [p.relative_to(scene.home) for p in rollouts] == [
        p.relative_to(scene.fenced_home) for p in fenced
    ]
    assert rollouts[0].read_bytes() == fenced[0].read_bytes()
    index = (scene.home / ".codex" / "session_index.jsonl").read_text()
    assert kit.CODEX_SESSION_ID in index and str(scene.worktree) in index


async def test_a_conversation_with_unicode_separators_restores_natively(
    tmp_path: pathlib.Path,
) -> None:
    """ "A native resume reads conversation records split on newlines only, so a conversation
    that holds a raw Unicode paragraph or line separator restores instead of being refused as
    a changed format": U+2028 and U+2029 inside one record, watermark 3 (not 5)."""
    scene = kit.make_scene(tmp_path)
    captured = await kit.capture(scene, _storage(scene))
    assert captured.watermark == 3
    run = await _restore(scene, kit.directive_for(captured, C.NATIVE))
    assert run.ready.watermark == 3
    restored = next((scene.home / ".claude" / "projects").rglob("*.jsonl")).read_text()
    assert "\u2028" in restored and "\u2029" in restored
    assert transcripts.watermark(restored) == 3


async def test_reconstructed_writes_continuation_and_passes_it_as_opening_prompt(
    tmp_path: pathlib.Path,
) -> None:
    """Reconstructed continuity: "the transcript is written to continuation.txt in the attempt
    folder, readable only by the worker user, and passed to the harness as its opening prompt
    after the line Continue from this recorded conversation. Native resume was unavailable."
    No native session lands; the source is restored too."""
    scene = kit.make_scene(tmp_path)
    captured = await kit.capture(scene, _storage(scene))
    run = await _restore(scene, kit.directive_for(captured, C.RECONSTRUCTED))

    continuation = scene.attempt_dir / "continuation.txt"
    info = continuation.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    owner = os.stat(scene.attempt_dir)
    assert (info.st_uid, info.st_gid) == (owner.st_uid, owner.st_gid)
    text = continuation.read_text(encoding="utf-8")
    assert text.split("\n", 1)[0] == (
        "Continue from this recorded conversation. Native resume was unavailable."
    )
    assert text == transcripts.continuation_text(transcripts.archive(kit.CONVERSATION))
    ready = run.ready
    assert list(ready.command) == [scene.executable, "--model", "opus", "--", text]
    assert ready.recovery == 2  # CONTINUITY_RECONSTRUCTED
    assert ("native", "skipped") in run.steps and ("continuation", "done") in run.steps
    assert not (scene.home / ".claude" / "projects").exists()
    _assert_same_tree(scene)
    assert run.status.restore_outcomes_by_type["reconstructed"] == 1


async def test_fresh_runs_the_original_command_in_a_cloned_checkout(tmp_path: pathlib.Path) -> None:
    """Fresh continuity: no restored state, the original command; the checkout is prepared
    (the registered project cloned into the empty worktree) and nothing is verified."""
    scene = kit.make_scene(tmp_path)
    run = await _restore(scene, directives.FRESH)
    assert list(run.ready.command) == list(scene.command())
    assert run.ready.checkpoint_id == "" and not run.ready.HasField("watermark")
    assert ("verify", "skipped") in run.steps and ("native", "skipped") in run.steps
    assert git_repos.git(scene.worktree, "rev-parse", "HEAD") == scene.project.base
    assert not (scene.worktree / "notes").exists()
    assert run.status.restore_outcomes_by_type["fresh"] == 1


async def test_fresh_needs_no_checkpoint_store(tmp_path: pathlib.Path) -> None:
    """ "With no checkpoint store configured ... only fresh succeeds."""
    scene = kit.make_scene(tmp_path, existing=True)
    launch = scene.launch(directives.FRESH)
    run = await kit.restore_once(
        scene.conf(LAUNCH_RECORD=scene.write_launch(launch)), scene.worktree
    )
    assert list(run.ready.command) == list(scene.command())


def _lengthen_conversation(scene: kit.Scene, size: int) -> None:
    """Append conversation records to the fenced session until it holds `size` more bytes."""
    session = next((scene.fenced_home / ".claude" / "projects").rglob("*.jsonl"))
    with session.open("a", encoding="utf-8") as handle:
        for n in range(size // 1024 + 1):
            handle.write(json.dumps({"type": "user", "n": n, "text": "y" * 1000}) + "\n")


async def test_an_opening_prompt_longer_than_an_argument_goes_on_stdin(
    tmp_path: pathlib.Path,
) -> None:
    """Real conversations outgrow one process argument (Linux refuses one over 128 KiB): a
    reconstructed restore of a 1 MiB transcript is delivered, the print-mode command without a
    prompt argument (`claude -p` reads it from stdin) and `continuation.txt`, mode 0600, named
    as the file the supervisor opens as the harness's standard input."""
    scene = kit.make_scene(tmp_path)
    _lengthen_conversation(scene, 1 << 20)
    captured = await kit.capture(scene, _storage(scene))
    launch = scene.launch(kit.directive_for(captured, C.RECONSTRUCTED))
    launch = dataclasses.replace(launch, command=(scene.executable, "-p", "--model", "opus", "t"))
    conf = scene.conf(
        LAUNCH_RECORD=scene.write_launch(launch), CHECKPOINT_ROOT=str(scene.tmp / "checkpoints")
    )
    run = await kit.restore_once(conf, scene.worktree)

    continuation = scene.attempt_dir / "continuation.txt"
    assert run.ready.stdin_path == str(continuation)
    assert list(run.ready.command) == [scene.executable, "-p", "--model", "opus"]
    text = continuation.read_text(encoding="utf-8")
    assert len(text.encode()) > 1 << 20
    assert text.startswith(transcripts.OPENING_LINE + "\n")
    assert stat.S_IMODE(continuation.stat().st_mode) == 0o600
    assert run.status.restore_outcomes_by_type["reconstructed"] == 1
    _assert_same_tree(scene)


async def test_a_short_opening_prompt_stays_an_argument(tmp_path: pathlib.Path) -> None:
    """A prompt one argument can carry is passed as before, with no standard input named."""
    scene = kit.make_scene(tmp_path)
    captured = await kit.capture(scene, _storage(scene))
    run = await _restore(scene, kit.directive_for(captured, C.RECONSTRUCTED))
    assert run.ready.stdin_path == ""
    text = (scene.attempt_dir / "continuation.txt").read_text(encoding="utf-8")
    assert list(run.ready.command)[-2:] == ["--", text]


async def test_a_long_opening_prompt_for_an_interactive_command_is_refused_before_it_is_reported(
    tmp_path: pathlib.Path,
) -> None:
    """A restore never reports more continuity than it delivered: an interactive command takes
    its prompt only as an argument (its terminal is on stdin), so a reconstructed prompt longer
    than one argument can carry (execve would refuse it) stops the launch here, with a reason,
    instead of failing once the harness is started."""
    scene = kit.make_scene(tmp_path)
    _lengthen_conversation(scene, 200 * 1024)
    captured = await kit.capture(scene, _storage(scene))
    run = await _restore(scene, kit.directive_for(captured, C.RECONSTRUCTED))
    assert run.reason == (
        "continuation: the opening prompt is longer than one process argument can carry"
    )
    assert run.status.restore_outcomes_by_type["refused/continuation"] == 1
