"""The worker entry point: restore through the sidecar, then exec the harness or exit non-zero.

"The worker entry point runs the restore after its checkout is prepared and before the
supervisor starts the harness ... For native continuity, the supervisor runs the harness's
native resume command instead of the original command." The entry point runs as its own OS
process (`agentihooks-restorer entry`) against a real sidecar on loopback; the fake harness
records the argv and working directory it was exec'd with.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pathlib
import sys

import pytest

from services.common import directives, settings
from services.restorer import transcripts
from services.restorer.harness import base
from tests.integration.restorer import sidecar_support as kit
from tests.support import ports

C = directives.Continuity
REPO = pathlib.Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.usefixtures("usual_umask")


async def _entry(
    worktree: pathlib.Path, sidecar: str, *extra: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(worktree.parent),
        "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'services' / 'proto'}",
        **(env or {}),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.restorer.main",
        "entry",
        "--worktree",
        str(worktree),
        "--sidecar",
        sidecar,
        *extra,
        env=environment,
        cwd=REPO,
        # Not the test runner's own stdin: what the harness reads there is the supervisor's.
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


async def _scene_and_directive(
    tmp_path: pathlib.Path, **changes: object
) -> tuple[kit.Scene, directives.Directive]:
    scene = kit.make_scene(tmp_path)
    storage = settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(tmp_path / "checkpoints")})
    captured = await kit.capture(scene, storage)
    directive = kit.directive_for(captured, C.NATIVE)
    return scene, dataclasses.replace(directive, **changes)  # type: ignore[arg-type]


async def test_entry_execs_the_native_resume_command_in_the_worktree(
    tmp_path: pathlib.Path,
) -> None:
    """A native restore ends with the harness exec'd as `claude --resume <session>` with the
    original options, in the restored worktree; progress is printed as JSON lines."""
    scene, directive = await _scene_and_directive(tmp_path)
    conf = scene.conf(
        LAUNCH_RECORD=scene.write_launch(scene.launch(directive)),
        CHECKPOINT_ROOT=str(tmp_path / "checkpoints"),
    )
    car, stop = await kit.start_sidecar(conf)
    try:
        code, _, err = await _entry(scene.worktree, car.addr)
    finally:
        await stop()
    assert code == 0, err
    (call,) = scene.fakes.calls()
    assert call["argv"][1:] == [
        "--resume",
        kit.SESSION_ID,
        "--model",
        "opus",
        "--",
        base.DEFAULT_CONTINUATION_PROMPT,
    ]
    assert pathlib.Path(call["cwd"]) == scene.worktree
    steps = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert {"event": "restore_step", "step": "native", "status": "done"} in steps


async def _reconstructed(
    tmp_path: pathlib.Path, extra: int
) -> tuple[kit.Scene, settings.RestorerSettings]:
    """A reconstructed restore of a conversation `extra` bytes longer, for `claude -p`."""
    scene = kit.make_scene(tmp_path)
    session = next((scene.fenced_home / ".claude" / "projects").rglob("*.jsonl"))
    with session.open("a", encoding="utf-8") as handle:
        for n in range(extra // 1024):
            record = {"type": "user", "n": n, "text": "\u2028 z " * 170}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    storage = settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(tmp_path / "checkpoints")})
    captured = await kit.capture(scene, storage)
    launch = scene.launch(kit.directive_for(captured, C.RECONSTRUCTED))
    launch = dataclasses.replace(launch, command=(scene.executable, "-p", "--model", "opus", "t"))
    conf = scene.conf(
        LAUNCH_RECORD=scene.write_launch(launch), CHECKPOINT_ROOT=str(tmp_path / "checkpoints")
    )
    return scene, conf


async def _entry_beside_sidecar(
    scene: kit.Scene, conf: settings.RestorerSettings
) -> tuple[int, str, str]:
    car, stop = await kit.start_sidecar(conf)
    try:
        return await _entry(scene.worktree, car.addr)
    finally:
        await stop()


async def test_a_long_opening_prompt_reaches_the_harness_on_stdin(tmp_path: pathlib.Path) -> None:
    """A 1 MiB transcript restores reconstructed: the supervisor opens continuation.txt as the
    harness's standard input, so `claude -p` receives the exact opening text there (the line
    `Continue from this recorded conversation. Native resume was unavailable.` and every
    record, U+2028 included) and no prompt argument."""
    scene, conf = await _reconstructed(tmp_path, 1 << 20)
    code, _, err = await _entry_beside_sidecar(scene, conf)
    assert code == 0, err
    (call,) = scene.fakes.calls()
    opening = (scene.attempt_dir / "continuation.txt").read_text(encoding="utf-8")
    assert len(opening.encode()) > 1 << 20
    assert opening.startswith(transcripts.OPENING_LINE + "\n") and "\u2028" in opening
    assert call["stdin"] == opening
    assert call["argv"][1:] == ["-p", "--model", "opus"]
    assert kit.CONVERSATION_SECRET not in err


async def test_a_short_opening_prompt_reaches_the_harness_as_an_argument(
    tmp_path: pathlib.Path,
) -> None:
    """A prompt one argument can carry is still passed as the last argument; the harness's
    standard input is left as the entry point's own (here /dev/null, never read as a prompt)."""
    scene, conf = await _reconstructed(tmp_path, 0)
    code, _, err = await _entry_beside_sidecar(scene, conf)
    assert code == 0, err
    (call,) = scene.fakes.calls()
    opening = (scene.attempt_dir / "continuation.txt").read_text(encoding="utf-8")
    assert call["argv"][1:] == ["-p", "--model", "opus", "--", opening]
    assert call["stdin"] is None


async def test_entry_stops_the_launch_on_a_refusal(tmp_path: pathlib.Path) -> None:
    """A refused restore stops the launch: exit non-zero printing the reason; the harness is
    never started, not even fresh."""
    scene, directive = await _scene_and_directive(tmp_path, session_id="someone-else")
    conf = scene.conf(
        LAUNCH_RECORD=scene.write_launch(scene.launch(directive)),
        CHECKPOINT_ROOT=str(tmp_path / "checkpoints"),
    )
    car, stop = await kit.start_sidecar(conf)
    try:
        code, _, err = await _entry(scene.worktree, car.addr)
    finally:
        await stop()
    assert code == 3
    assert "agentihooks-restorer: restore refused: conversation_mismatch" in err
    assert scene.fakes.calls() == []


async def test_entry_runs_the_harness_without_the_worker_credential(tmp_path: pathlib.Path) -> None:
    """Fresh: the original command runs as given; the sidecar's worker credential is not in
    the harness's environment, everything else is."""
    scene = kit.make_scene(tmp_path, existing=True)
    dump = tmp_path / "env.json"
    script = f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"
    launch = scene.launch(directives.FRESH)
    launch = type(launch)(**{**launch.__dict__, "command": (sys.executable, "-c", script)})
    car, stop = await kit.start_sidecar(scene.conf(LAUNCH_RECORD=scene.write_launch(launch)))
    secret = kit.worker_credential()
    try:
        code, _, err = await _entry(
            scene.worktree,
            car.addr,
            env={"AGENTIHOOKS_WORKER_CREDENTIAL": secret, "AGENTIHOOKS_KEEP": "yes"},
        )
    finally:
        await stop()
    assert code == 0, err
    seen = json.loads(dump.read_text())
    assert "AGENTIHOOKS_WORKER_CREDENTIAL" not in seen
    assert seen["AGENTIHOOKS_KEEP"] == "yes"
    assert secret not in err


async def test_entry_without_a_sidecar_exits_non_zero(tmp_path: pathlib.Path) -> None:
    """No sidecar on loopback: the entry point waits, then exits non-zero; nothing runs."""
    worktree = tmp_path / "worktree"
    code, _, err = await _entry(worktree, f"127.0.0.1:{ports.free_port()}", "--wait", "0.5")
    assert code == 4
    assert "the restorer sidecar did not come up" in err
    assert worktree.is_dir()
