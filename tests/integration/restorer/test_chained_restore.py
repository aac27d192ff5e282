"""Restoring append-only checkpoints (schema version 3), and the older versions beside them.

Issue 21 (part 1): restore reassembles session files and the transcript from their chains and
applies the bundle chain in order, byte for byte; a hostile chain (a segment swapped,
reordered, missing, changed, or over the size limit) is refused with the spec's reason and
nothing written ("Native state lands before source state", and nothing lands before the
verdict); version 1 and 2 records still restore. Real git, a real local checkpoint folder,
the real Capturer and a real sidecar over gRPC.
"""

from __future__ import annotations

import pathlib
import random
from collections.abc import Callable
from typing import Any

import pytest

from services.common import directives, settings
from services.common.checkpoints import chains, index_reading, records
from services.restorer import captures, capturing, transcripts
from services.restorer.harness import claude_code
from tests.integration.restorer import sessions
from tests.integration.restorer import sidecar_support as kit
from tests.support import git_repos

C = directives.Continuity
pytestmark = pytest.mark.usefixtures("usual_umask")
SEGMENT = 8 * 1024
INLINE = 16 * 1024


def _storage(scene: kit.Scene) -> settings.StorageSettings:
    return settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(scene.tmp / "checkpoints")})


def _commit(scene: kit.Scene, name: str, text: str) -> None:
    worktree = scene.project.worktree
    git_repos.write(worktree, f"src/{name}.py", text)
    git_repos.git(worktree, "add", f"src/{name}.py")
    git_repos.git(worktree, "commit", "-q", "-m", name, "--", f"src/{name}.py")


async def _long_session(
    scene: kit.Scene, *, version: int = 3, segment_bytes: int = SEGMENT
) -> captures.Captured:
    """Five captures: the session grows (once by more than a segment), commits land between
    captures, an untracked file appears. The last checkpoint is returned. With `SEGMENT` the
    session ends in eight segments, kept in an index object (`chain_indexes.LEAF_SEGMENTS`);
    with `INLINE` in fewer, listed in the record."""
    # A large first bundle, so the small later ones never swallow it: the chain stays long.
    worktree = scene.project.worktree
    git_repos.write(worktree, "assets/large.bin", random.Random(7).randbytes(64 * 1024))
    git_repos.git(worktree, "add", "assets/large.bin")
    git_repos.git(worktree, "commit", "-q", "-m", "large", "--", "assets/large.bin")
    capturer = capturing.Capturer(
        scene.launch(directives.FRESH, scope=kit.SCOPE),
        kit.fenced_attempt(scene),
        _storage(scene),
        schema_version=version,
        segment_bytes=segment_bytes,
    )
    await capturer.capture()
    for step in range(4):
        sessions.grow(scene, 3 * SEGMENT if step == 1 else 2000, f"step {step}")
        if step != 2:
            _commit(scene, f"step_{step}", f"STEP = {step}\n" * (step + 1))
        git_repos.write(scene.project.worktree, f"notes/step-{step}.txt", f"note {step}\n")
        captured = await capturer.capture()
    return captured


async def _restore(
    scene: kit.Scene, captured: captures.Captured, kind: C, **launch: Any
) -> kit.Run:
    launched = scene.launch(kit.directive_for(captured, kind), **launch)
    conf = scene.conf(
        LAUNCH_RECORD=scene.write_launch(launched),
        CHECKPOINT_ROOT=str(scene.tmp / "checkpoints"),
    )
    return await kit.restore_once(conf, scene.worktree)


def _assert_same_worktree(scene: kit.Scene) -> None:
    fenced = scene.project.worktree
    assert git_repos.snapshot(scene.worktree) == git_repos.snapshot(fenced, git_repos.IGNORED)
    assert git_repos.git(scene.worktree, "rev-parse", "HEAD") == git_repos.git(
        fenced, "rev-parse", "HEAD"
    )
    log = ["log", "--format=%H %T %P %s"]
    assert git_repos.git(scene.worktree, *log) == git_repos.git(fenced, *log)


def _restored_session(scene: kit.Scene) -> pathlib.Path:
    return (
        scene.home
        / ".claude"
        / "projects"
        / claude_code.project_key(scene.worktree)
        / f"{kit.SESSION_ID}.jsonl"
    )


async def _stored(scene: kit.Scene, checkpoint_id: str) -> dict[str, Any]:
    data = await kit.local_store(scene.tmp / "checkpoints").get_manifest(checkpoint_id)
    assert data is not None
    return records.decode_manifest(data)[0]


async def test_a_native_restore_of_a_long_chain_is_byte_identical(tmp_path: pathlib.Path) -> None:
    """The session file is reassembled from its chain byte for byte where `claude --resume`
    looks; the bundle chain brings every commit in order; the worktree is the captured one."""
    scene = kit.make_scene(tmp_path)
    captured = await _long_session(scene)
    record = await _stored(scene, captured.checkpoint_id)
    assert record["schema_version"] == 3
    assert "index" in record["native"]["files"][0]  # the chain is read from its index object
    expanded = await index_reading.expand(kit.local_store(scene.tmp / "checkpoints"), record)
    assert not isinstance(expanded, index_reading.Reason)
    assert len(expanded["native"]["files"][0]["segments"]) >= 5
    assert len(record["source"]["bundles"]) >= 2
    run = await _restore(scene, captured, C.NATIVE)
    assert run.last.HasField("ready"), run.events
    restored = _restored_session(scene)
    assert restored.read_bytes() == sessions.session_path(scene).read_bytes()
    _assert_same_worktree(scene)


async def test_a_reconstructed_restore_of_a_long_chain_carries_every_record(
    tmp_path: pathlib.Path,
) -> None:
    """The transcript is reassembled from its chain: continuation.txt holds every archived
    record after the opening line."""
    scene = kit.make_scene(tmp_path)
    captured = await _long_session(scene)
    run = await _restore(scene, captured, C.RECONSTRUCTED)
    assert run.last.HasField("ready"), run.events
    text = (scene.attempt_dir / "continuation.txt").read_text(encoding="utf-8")
    archive = sessions.session_path(scene).read_text(encoding="utf-8")
    assert text == f"{transcripts.OPENING_LINE}\n{archive}"
    assert captured.watermark == len(transcripts.split_records(archive))
    _assert_same_worktree(scene)


def _segment(record: dict[str, Any], index: int) -> dict[str, Any]:
    segment: dict[str, Any] = record["native"]["files"][0]["segments"][index]
    return segment


def _both(change: Callable[[list[Any]], None]) -> Callable[[dict[str, Any]], None]:
    """Apply `change` to the session's segment list, which the transcript shares."""

    def apply(record: dict[str, Any]) -> None:
        assert record["transcript"]["same_as"] == record["native"]["files"][0]["path"]
        change(record["native"]["files"][0]["segments"])

    return apply


def _swap(segments: list[Any]) -> None:
    segments[0], segments[1] = segments[1], segments[0]


def _rotate(segments: list[Any]) -> None:
    segments.append(segments.pop(0))


def _oversize(record: dict[str, Any]) -> None:
    item = record["native"]["files"][0]
    grown = chains.MAX_SEGMENT_BYTES + 1 - item["segments"][-1]["size"]
    item["segments"][-1]["size"] += grown
    item["size"] += grown
    record["transcript"]["size"] += grown
    for entry in record["inventory"]:
        if entry["sha256"] == item["sha256"]:
            entry["size"] = item["size"]


def _drop(record: dict[str, Any]) -> None:
    _both(lambda segments: segments.pop(1))(record)


HOSTILE: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "swapped": (_both(_swap), "inventory_mismatch"),
    "reordered": (_both(_rotate), "inventory_mismatch"),
    "dropped": (_drop, "inventory_mismatch"),
    "over-the-size-limit": (_oversize, "invalid_record"),
}


@pytest.mark.parametrize("kind", [C.NATIVE, C.RECONSTRUCTED])
@pytest.mark.parametrize("hostile", sorted(HOSTILE))
async def test_a_hostile_chain_is_refused_and_nothing_is_written(
    tmp_path: pathlib.Path, hostile: str, kind: C
) -> None:
    """A chain whose record was changed (a segment swapped, the chain reordered, a segment
    dropped, a segment over the size limit) is refused with the spec's reason; the worktree
    and the harness home stay exactly as they were."""
    scene = kit.make_scene(tmp_path)
    captured = await _long_session(scene, segment_bytes=INLINE)
    change, reason = HOSTILE[hostile]
    await kit.rewrite_record(
        kit.local_store(scene.tmp / "checkpoints"), captured.checkpoint_id, change
    )
    before = scene.untouched()
    run = await _restore(scene, captured, kind)
    assert run.reason == reason
    assert scene.untouched() == before
    assert not (scene.attempt_dir / "continuation.txt").exists()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [("missing", "missing_object"), ("changed", "corrupt_object")],
)
async def test_a_damaged_segment_is_refused_and_nothing_is_written(
    tmp_path: pathlib.Path, damage: str, reason: str
) -> None:
    """A segment gone from the store is `missing_object`; one whose bytes changed is
    `corrupt_object`; nothing is written."""
    scene = kit.make_scene(tmp_path)
    captured = await _long_session(scene, segment_bytes=INLINE)
    record = await _stored(scene, captured.checkpoint_id)
    path = kit.object_path(scene.tmp / "checkpoints", _segment(record, 2)["sha256"])
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(b"x" * path.stat().st_size)
    before = scene.untouched()
    run = await _restore(scene, captured, C.NATIVE)
    assert run.reason == reason
    assert scene.untouched() == before


async def test_a_version_2_checkpoint_of_the_old_writer_restores(tmp_path: pathlib.Path) -> None:
    """Version 2 records (every file, the transcript and one bundle stored whole) written by
    the old writer still verify and restore, byte for byte."""
    scene = kit.make_scene(tmp_path)
    captured = await _long_session(scene, version=2)
    record = await _stored(scene, captured.checkpoint_id)
    assert record["schema_version"] == 2 and record["source"]["bundle"] is not None
    assert "segments" not in record["transcript"]
    run = await _restore(scene, captured, C.NATIVE)
    assert run.last.HasField("ready"), run.events
    assert _restored_session(scene).read_bytes() == sessions.session_path(scene).read_bytes()
    _assert_same_worktree(scene)


async def test_a_version_1_checkpoint_restores(tmp_path: pathlib.Path) -> None:
    """Version 1 records (no execution_generation: the task generation stands in) restore."""
    scene = kit.make_scene(tmp_path)
    captured = await _long_session(scene, version=2)

    def legacy(record: dict[str, Any]) -> None:
        record["schema_version"] = 1
        del record["authority"]["execution_generation"]

    await kit.rewrite_record(
        kit.local_store(scene.tmp / "checkpoints"), captured.checkpoint_id, legacy
    )
    run = await _restore(scene, captured, C.RECONSTRUCTED, restores_from=1)
    assert run.last.HasField("ready"), run.events
    text = (scene.attempt_dir / "continuation.txt").read_text(encoding="utf-8")
    assert text.endswith(sessions.session_path(scene).read_text(encoding="utf-8"))
    _assert_same_worktree(scene)


async def test_a_bundle_chain_out_of_order_is_refused_before_the_worktree_changes(
    tmp_path: pathlib.Path,
) -> None:
    """Each incremental bundle requires the commits of the ones before it, so git refuses a
    reordered bundle chain (`source: bundle does not apply`); the replacement's folder is left
    as it was, and a reconstructed restore writes no continuation."""
    scene = kit.make_scene(tmp_path)
    captured = await _long_session(scene)

    def reverse(record: dict[str, Any]) -> None:
        record["source"]["bundles"].reverse()

    assert len((await _stored(scene, captured.checkpoint_id))["source"]["bundles"]) >= 2
    await kit.rewrite_record(
        kit.local_store(scene.tmp / "checkpoints"), captured.checkpoint_id, reverse
    )
    before = scene.untouched()
    run = await _restore(scene, captured, C.RECONSTRUCTED)
    assert run.reason == "source: bundle does not apply"
    assert scene.untouched() == before
    assert not (scene.attempt_dir / "continuation.txt").exists()
