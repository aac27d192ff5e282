"""Capture in a running attempt: on an interval and on demand, objects first, record last.

"In a running attempt it also captures checkpoints and reports the session id and archive
watermark that a later fence records." Each capture is verified with Validator.verify after
it is written; a capture with nothing new writes nothing; the archive holds complete records
only (a line the harness is still writing waits for the next capture).
"""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest

from services.common import directives, settings
from services.common.checkpoints import validation
from services.restorer import captures, capturing, transcripts
from tests.integration.restorer import sidecar_support as kit
from tests.support import ports

json_logs = kit.json_logs  # the fixture, visible to this module

pytestmark = pytest.mark.usefixtures("usual_umask")


_storage = kit.checkpoint_storage
_record = kit.stored_record


async def test_capture_writes_a_verified_native_checkpoint_and_reports_it(
    tmp_path: pathlib.Path, json_logs: kit.JsonLogs
) -> None:
    """Native session files, the archived transcript, bundle, patch and untracked files are
    stored; the record verifies; ReportCapture carries the session id and archive watermark
    with the attempt's own credential; the log names ids only."""
    scene = kit.make_scene(tmp_path)
    credential = kit.worker_credential("e-42", 3)
    double, control, stop = await kit.start_recovery(credential)
    try:
        captured = await kit.capture(
            scene, _storage(tmp_path), control_addr=control, credential=credential
        )
    finally:
        await stop()
    assert captured.continuity == "native" and captured.written
    record = await _record(tmp_path, captured.checkpoint_id)
    roles = {entry["role"] for entry in record["inventory"]}  # type: ignore[attr-defined]
    assert roles == {"transcript", "native_session", "source_bundle", "source_patch", "untracked"}
    assert record["authority"] == {
        "swarm": "example",
        "seat": "eng-2",
        "task_id": "t-eng-2",
        "task_generation": 1,
        "execution_id": "e-42",
        "execution_generation": 3,
    }
    assert record["compatibility_key"] == "registry.local/agent-worker:1.4.2"
    assert record["native"]["harness_version"] == "2.1.3"  # type: ignore[index]
    verdict = await validation.Validator(kit.local_store(tmp_path / "checkpoints")).verify(
        validation.Expectation(captured.checkpoint_id, 3)
    )
    assert verdict.ok
    (report,) = double.captures
    assert (report.native_session_id, report.archive_watermark) == (kit.SESSION_ID, 3)
    assert double.presented == [credential]
    (line,) = json_logs.events("checkpoint_captured")
    assert line["checkpoint_id"] == captured.checkpoint_id
    assert kit.CONVERSATION_SECRET not in json_logs.text() and credential not in json_logs.text()


async def test_an_unchanged_attempt_writes_no_new_checkpoint(tmp_path: pathlib.Path) -> None:
    """Capturing again with nothing new changes nothing; a new record is a new, newer
    checkpoint with a higher sequence and watermark."""
    scene = kit.make_scene(tmp_path)
    capturer = capturing.Capturer(
        scene.launch(directives.FRESH, scope=kit.SCOPE),
        kit.fenced_attempt(scene),
        _storage(tmp_path),
    )
    first = await capturer.capture()
    again = await capturer.capture()
    assert again == captures.Captured(
        first.checkpoint_id, first.continuity, first.native_session_id, first.watermark, False
    )
    session = next((scene.fenced_home / ".claude" / "projects").rglob("*.jsonl"))
    with session.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"type": "assistant", "text": "more"}) + "\n")
    newer = await capturer.capture()
    assert newer.written and newer.watermark == 4
    assert (await _record(tmp_path, newer.checkpoint_id))["sequence"] == 2
    ids = await kit.local_store(tmp_path / "checkpoints").list_checkpoint_ids()
    assert sorted(ids) == sorted([first.checkpoint_id, newer.checkpoint_id])


async def test_a_record_still_being_written_waits_for_the_next_capture(
    tmp_path: pathlib.Path,
) -> None:
    """The archive watermark counts complete records only: a last line without its newline
    is not archived, so the watermark never names a record that is not durable."""
    scene = kit.make_scene(tmp_path)
    session = next((scene.fenced_home / ".claude" / "projects").rglob("*.jsonl"))
    with session.open("a", encoding="utf-8") as handle:
        handle.write('{"type": "assistant", "text": "half wri')
    captured = await kit.capture(scene, _storage(tmp_path))
    assert captured.watermark == 3
    record = await _record(tmp_path, captured.checkpoint_id)
    transcript = record["transcript"]
    store = kit.local_store(tmp_path / "checkpoints")
    data = b"".join([c async for c in store.read_object(transcript["sha256"])])  # type: ignore[index]
    assert transcripts.split_records(data) == kit.CONVERSATION


async def test_an_unqualified_harness_version_captures_context_only(tmp_path: pathlib.Path) -> None:
    """A checkpoint is native only when it "carries a qualified native session": under a
    harness version not qualified for native resume the capture is context only, while the
    session id the attempt holds is still reported."""
    scene = kit.make_scene(tmp_path)
    scene.fakes.set_version("claude", "2.0.1")
    captured = await kit.capture(scene, _storage(tmp_path))
    assert captured.continuity == "context_only"
    assert captured.native_session_id == kit.SESSION_ID
    record = await _record(tmp_path, captured.checkpoint_id)
    assert record["native"] is None and record["continuity"] == "context_only"


async def test_a_worker_without_a_store_captures_nothing(tmp_path: pathlib.Path) -> None:
    """No checkpoint store is configured: the capture fails with that reason, nothing else."""
    scene = kit.make_scene(tmp_path)
    with pytest.raises(captures.CaptureError, match="no checkpoint store is configured"):
        await kit.capture(scene, settings.load_storage({}))


async def test_capture_runs_on_an_interval_and_on_demand(tmp_path: pathlib.Path) -> None:
    """The capture loop waits for its interval, or captures at once when woken."""
    scene = kit.make_scene(tmp_path)
    capturer = capturing.Capturer(
        scene.launch(directives.FRESH, scope=kit.SCOPE),
        kit.fenced_attempt(scene),
        _storage(tmp_path),
    )
    store = kit.local_store(tmp_path / "checkpoints")
    task = asyncio.create_task(capturer.run(interval_s=3600))
    try:
        capturer.wake.set()

        async def one_checkpoint() -> None:
            assert len(await store.list_checkpoint_ids()) == 1

        await ports.eventually(one_checkpoint, timeout=20)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    interval = capturing.Capturer(
        scene.launch(directives.FRESH, scope=kit.SCOPE),
        kit.fenced_attempt(scene),
        _storage(tmp_path),
    )
    session = next((scene.fenced_home / ".claude" / "projects").rglob("*.jsonl"))
    with session.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"type": "user", "message": "later"}) + "\n")
    task = asyncio.create_task(interval.run(interval_s=0.05))
    try:

        async def two_checkpoints() -> None:
            assert len(await store.list_checkpoint_ids()) == 2

        await ports.eventually(two_checkpoints, timeout=20)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_stored_checkpoint_is_never_written_over(tmp_path: pathlib.Path) -> None:
    """Checkpoint objects are authoritative data: two capturers of one attempt (the sidecar's
    loop and a one-shot `capture`) never reuse each other's checkpoint ids."""
    scene = kit.make_scene(tmp_path)
    launch = scene.launch(directives.FRESH, scope=kit.SCOPE)
    first = capturing.Capturer(launch, kit.fenced_attempt(scene), _storage(tmp_path))
    second = capturing.Capturer(launch, kit.fenced_attempt(scene), _storage(tmp_path))
    one = await first.capture()
    session = next((scene.fenced_home / ".claude" / "projects").rglob("*.jsonl"))
    with session.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"type": "user", "message": "two"}) + "\n")
    two = await second.capture()
    stored_two = kit.manifest_path(tmp_path / "checkpoints", two.checkpoint_id).read_bytes()
    with session.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"type": "user", "message": "three"}) + "\n")
    three = await first.capture()
    assert len({one.checkpoint_id, two.checkpoint_id, three.checkpoint_id}) == 3
    assert kit.manifest_path(tmp_path / "checkpoints", two.checkpoint_id).read_bytes() == stored_two
