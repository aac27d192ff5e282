"""A real agent CLI killed mid-turn loses nothing it completed (issue 21, "Must show").

"With the real Claude Code and Codex CLIs: the sidecar follows the real session files while the
CLI writes, the CLI is killed mid-turn, and after restore the model receives every record the
CLI completed before it died."

Real parts: the pinned CLIs under .harnesses/, the shipped loopback model mock (its answer to
the second turn held open mid-stream, `held_model_api`), the restorer's own `Follower` and
`Capturer` writing a local checkpoint folder, `restoring.restore` into another home and folder,
and the adapter's native resume command. Every wait is on an observed state with a generous
deadline; nothing is timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from services.common import directives
from services.common.checkpoints import records
from services.restorer import capturing, entry, following, restores
from services.restorer.harness import base, claude_code, codex
from tests.integration.harness_cli import cli_support as cs
from tests.integration.restorer import sidecar_support as kit
from tests.support import agent_clis, held_model_api, model_api

pytestmark = pytest.mark.slow

DEADLINE_S = 300.0
"""How long a state may take to be seen: generous, the machine is shared and busy."""
FOLLOWING = following.Cadence(interval_s=3600.0)
"""The sidecar's default lag; the safety-net interval an hour away, so every checkpoint taken
while the CLI runs came from following its session files."""
TORN_TEXT = "a record the kill cut in the middle"
Message = tuple[str, str]


@pytest.fixture(params=[claude_code.NAME, codex.NAME])
def cli(request: pytest.FixtureRequest) -> Iterator[cs.Cli]:
    with held_model_api.HeldModelApi() as api:
        executable = (
            agent_clis.claude_executable()
            if request.param == claude_code.NAME
            else agent_clis.codex_executable()
        )
        yield cs.Cli(request.param, executable, api)


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait until `check` holds; fail naming `what` after `DEADLINE_S`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not await check():
        if loop.time() > deadline:
            pytest.fail(f"not seen within {DEADLINE_S:g} s: {what}")
        await asyncio.sleep(0.1)


def complete_lines(data: bytes) -> list[bytes]:
    """The whole records of a JSONL file: every line its newline ended."""
    return data[: data.rfind(b"\n") + 1].splitlines(keepends=False)


def messages(lines: list[bytes], harness: str) -> list[Message]:
    """The user and assistant texts the records hold, in order, read from the CLI's own
    format (Claude Code: `user`/`assistant` records; Codex: `response_item` messages)."""
    out: list[Message] = []
    for line in lines:
        record = json.loads(line)
        if harness == claude_code.NAME:
            message = record.get("message")
            if record.get("type") not in ("user", "assistant") or not isinstance(message, dict):
                continue
            role, content = message.get("role"), message.get("content")
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
            kinds: tuple[str, ...] = ("text",)
        else:
            message = record.get("payload")
            if record.get("type") != "response_item" or not isinstance(message, dict):
                continue
            if message.get("type") != "message":
                continue
            role, parts = message.get("role"), message.get("content")
            kinds = ("input_text", "output_text")
        if role not in ("user", "assistant"):
            continue
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict) and part.get("type") in kinds:
                out.append((str(role), str(part.get("text", ""))))
    return out


def is_second_prompt(line: bytes, harness: str) -> bool:
    """Whether the record is the user's prompt of the second turn."""
    return ("user", cs.SECOND_PROMPT) in messages([line], harness)


def in_order(wanted: list[Message], sent: list[Message]) -> bool:
    """Whether every message of `wanted` is in `sent`, in the same order."""
    rest = iter(sent)
    return all(any(item == candidate for candidate in rest) for item in wanted)


class Session:
    """The fenced attempt's live session file, read as the CLI leaves it on disk."""

    def __init__(self, cli: cs.Cli, seat: cs.Seat, session_id: str) -> None:
        self._adapter: base.Harness = cs.cli_adapter(cli, seat.fenced_config)
        self._seat = seat
        self.session_id = session_id

    def data(self) -> bytes:
        files = self._adapter.capture_session(
            self._seat.fenced_home, self._seat.project.worktree, self.session_id
        )
        (main,) = [f for f in files if f.path.endswith(".jsonl")]
        return main.data

    def path(self) -> pathlib.Path:
        """The file itself (the one `.jsonl` of the session under the fenced home)."""
        root = self._seat.fenced_config or self._seat.fenced_home
        (found,) = [p for p in root.rglob(f"*{self.session_id}.jsonl") if p.is_file()]
        return found


class Stored:
    """The attempt's checkpoints in the local checkpoint folder."""

    def __init__(self, seat: cs.Seat) -> None:
        self._store = seat.store()
        self._prefix = f"ckpt-{kit.SCOPE.execution_id}-"

    async def newest(self) -> tuple[str, int] | None:
        """(checkpoint id, transcript watermark) of the newest checkpoint, or None."""
        ids = [i for i in await self._store.list_checkpoint_ids() if i.startswith(self._prefix)]
        if not ids:
            return None
        newest = max(ids, key=lambda i: int(i.removeprefix(self._prefix)))
        data = await self._store.get_manifest(newest)
        assert data is not None
        watermark = records.decode_manifest(data)[0]["transcript"]["watermark"]
        assert isinstance(watermark, int)
        return newest, watermark


@contextlib.asynccontextmanager
async def followed(capturer: capturing.Capturer, cli: cs.Cli, seat: cs.Seat) -> AsyncIterator[None]:
    """The sidecar's follower of the fenced attempt's session folder and worktree; on leaving,
    its loop is stopped first, as the sidecar stops it before the final capture."""
    sessions = following.session_folder(
        cli.harness, seat.fenced_home, cli.harness_env(seat.fenced_config)
    )
    follower = following.Follower(capturer, sessions, seat.project.worktree, FOLLOWING)
    task = asyncio.create_task(follower.run(), name="follower")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert follower.counts.failed == 0, "a capture of the follower failed"


@contextlib.contextmanager
def started(cli: cs.Cli, command: list[str], seat: cs.Seat) -> Iterator[subprocess.Popen[bytes]]:
    """The CLI running in a process group of its own (its node launcher and what it starts);
    the group is killed on leaving, whatever happened."""
    env = cli.env(seat.fenced_home, seat.fenced_config)
    with (seat.tmp / "killed-cli.out").open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=seat.project.worktree,
            env=entry.harness_environment(env),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        kill_group(process)


def kill_group(process: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)


def first_turn(cli: cs.Cli, seat: cs.Seat) -> str:
    """The fenced attempt's first, completed turn; its session id."""
    cli.provide(seat.fenced_home, seat.fenced_config)
    env = cli.env(seat.fenced_home, seat.fenced_config)
    done = cli.run(cli.print_command(cs.FIRST_PROMPT), seat.project.worktree, env)
    assert done.returncode == 0, done.stderr[-2000:]
    session_id = cs.cli_adapter(cli, seat.fenced_config).native_session_id(
        seat.fenced_home, seat.project.worktree
    )
    assert session_id is not None, "the real CLI wrote no session where the adapter looks"
    return str(session_id)


async def test_the_model_receives_every_record_completed_before_the_kill(
    cli: cs.Cli, tmp_path: pathlib.Path
) -> None:
    """The CLI is SIGKILLed while the model's answer to its second turn is still streaming;
    the sidecar followed its session file meanwhile. Restored into another home and folder,
    the natively resumed CLI's first request carries every user and assistant message of the
    complete lines the killed CLI left, in order, then the continuation prompt, and nothing of
    the unfinished answer or of a line the kill cut."""
    api = cli.api
    assert isinstance(api, held_model_api.HeldModelApi)
    seat = cs.make_seat(tmp_path, config_dirs=False)
    session = Session(cli, seat, first_turn(cli, seat))
    original = list(cli.print_command("the original task"))
    fenced = cs.launch_record(
        cli, original, directives.FRESH, scope=kit.SCOPE, url=seat.project.url
    )
    attempt = restores.Attempt(
        seat.project.worktree,
        seat.tmp / "fenced",
        seat.fenced_home,
        cli.harness_env(seat.fenced_config),
    )
    capturer = capturing.Capturer(fenced, attempt, seat.storage())
    stored = Stored(seat)
    api.hold(cs.SECOND_PROMPT)
    second = cli.headless_resume(session.session_id, cs.SECOND_PROMPT)
    try:
        async with followed(capturer, cli, seat):
            with started(cli, second, seat) as process:

                async def mid_turn() -> bool:
                    """The model holds the turn open and the CLI wrote its prompt's record."""
                    if process.poll() is not None:
                        pytest.fail(f"the CLI ended before it was killed: {process.returncode}")
                    lines = complete_lines(session.data())
                    return bool(api.held) and ("user", cs.SECOND_PROMPT) in messages(
                        lines, cli.harness
                    )

                await eventually(mid_turn, "the CLI waiting for the model in its second turn")

                async def archived() -> bool:
                    """The newest checkpoint holds every complete line of the live file."""
                    newest = await stored.newest()
                    return newest is not None and newest[1] == len(complete_lines(session.data()))

                await eventually(archived, "the follower archiving what the CLI wrote")
                followed_watermark = (await stored.newest() or ("", -1))[1]
                assert process.poll() is None, "the CLI must still be mid-turn when killed"
                kill_group(process)
            # The kill may land while the CLI writes a line: leave such a torn record behind.
            torn = json.dumps({"type": "assistant", "text": TORN_TEXT}).encode()
            with session.path().open("ab") as handle:
                handle.write(torn[: len(torn) // 2])
            killed = session.data()
        # The worker died: the sidecar's final capture, once its follower stopped.
        final = await capturer.capture(final=True)
    finally:
        await capturer.aclose()
    completed = complete_lines(killed)
    assert killed.endswith(torn[: len(torn) // 2])
    # Following, while the CLI ran: the second prompt's record was archived before the kill.
    prompt_line = [i for i, line in enumerate(completed) if is_second_prompt(line, cli.harness)]
    assert prompt_line and followed_watermark > prompt_line[0], (
        "the follower had not archived the second prompt's record while the CLI ran"
    )
    assert final.continuity == "native" and final.native_session_id == session.session_id
    assert final.watermark == len(completed), (
        "the final capture does not hold exactly the complete records"
    )
    newest = await stored.newest()
    assert newest == (final.checkpoint_id, final.watermark)

    # The fenced Pod is gone: nothing of its home or worktree can help the replacement.
    for folder in (seat.project.worktree, seat.fenced_home):
        shutil.rmtree(folder)
    cli.provide(seat.home, seat.config)
    directive = directives.Directive(
        final.checkpoint_id, directives.Continuity.NATIVE, final.native_session_id, final.watermark
    )
    ready = await cs.restore(cli, seat, original, directive)
    assert ready.recovery is directives.Continuity.NATIVE and ready.cwd == str(seat.worktree)
    (restored,) = [p for p in seat.home.rglob(f"*{final.native_session_id}.jsonl") if p.is_file()]
    restored_data = restored.read_bytes()
    assert restored_data.endswith(b"\n") and TORN_TEXT.encode() not in restored_data
    assert len(complete_lines(restored_data)) == len(completed)
    api.release()
    before = api.call_count()
    done = cli.run(ready.command, seat.worktree, cli.env(seat.home, seat.config))
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = cs.conversation_calls_since(api, before)
    assert resumed, "the resumed CLI sent the model nothing"
    sent = cs.turns(resumed[0])
    completed_messages = messages(completed, cli.harness)
    assert ("user", cs.FIRST_PROMPT) in completed_messages
    assert ("assistant", model_api.REPLY) in completed_messages
    assert completed_messages[-1] == ("user", cs.SECOND_PROMPT)
    assert in_order(completed_messages, sent), (
        "the resumed request lacks a message the killed CLI completed"
    )
    interrupted = sent.index(("user", cs.SECOND_PROMPT))
    assert ("user", base.DEFAULT_CONTINUATION_PROMPT) in sent[interrupted + 1 :]
    raw = resumed[0].raw.decode("utf-8", "replace")
    assert held_model_api.PARTIAL_TEXT not in raw and TORN_TEXT not in raw
