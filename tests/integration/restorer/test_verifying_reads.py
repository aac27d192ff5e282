"""The verification and the restore read each object once, and judge it as the store would.

"The checkpoint is verified through the store granted to this attempt. A checkpoint that does
not verify stops the launch." The objects a restore writes are read early, while the Validator
runs; its presence and digest checks are answered from those reads (the bytes it judges are the
bytes written), and from the store itself whenever a read did not match, so every verdict is
the one the store would give.
"""

from __future__ import annotations

import collections
import pathlib
from collections.abc import AsyncIterator, Sequence

import pytest

from services.common import directives, settings
from services.common.checkpoints import local, records, storing
from services.restorer import restores, restoring
from tests.integration.restorer import sidecar_support as kit

C = directives.Continuity
pytestmark = pytest.mark.usefixtures("usual_umask")


class CountingStore(local.LocalStore):
    """The real local store of the scene's task, counting how each object is read."""

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(root, storing.StoreScope("example", "t-eng-2", 1))
        self.reads: collections.Counter[str] = collections.Counter()
        self.digests: collections.Counter[str] = collections.Counter()

    def read_object(
        self, sha256: str, chunk_size: int = storing.CHUNK_SIZE
    ) -> AsyncIterator[bytes]:
        self.reads[sha256] += 1
        return super().read_object(sha256, chunk_size)

    async def read_objects(
        self, wanted: Sequence[tuple[str, int]]
    ) -> list[bytes | storing.StoreError | None]:
        # Small objects read many to a call count as read, one each.
        self.reads.update(sha256 for sha256, _ in wanted)
        return await super().read_objects(wanted)

    async def digest_object(self, sha256: str) -> tuple[str, int] | None:
        self.digests[sha256] += 1
        return await super().digest_object(sha256)


async def _restore(
    scene: kit.Scene, kind: directives.Continuity
) -> tuple[restores.Event, CountingStore, list[tuple[str, str, int]]]:
    root = scene.tmp / "checkpoints"
    captured = await kit.capture(
        scene, settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(root)})
    )
    store = CountingStore(root)
    manifest = await store.get_manifest(captured.checkpoint_id)
    assert manifest is not None
    entries = list(records.stored_objects(records.decode_manifest(manifest)[0]))
    attempt = restores.Attempt(scene.worktree, scene.attempt_dir, scene.home)
    events = [
        e
        async for e in restoring.restore(
            scene.launch(kit.directive_for(captured, kind)), attempt, store
        )
    ]
    return events[-1], store, entries


@pytest.mark.parametrize("kind", [C.NATIVE, C.RECONSTRUCTED])
async def test_each_object_the_restore_writes_is_read_once(
    tmp_path: pathlib.Path, kind: directives.Continuity
) -> None:
    """Every object the restore writes is read from the store exactly once: that read is both
    the Validator's digest and the bytes written. Objects it does not write (the transcript of
    a native restore, the session of a reconstructed one) are still verified, by digest."""
    scene = kit.make_scene(tmp_path)
    session = next((scene.fenced_home / ".claude" / "projects").rglob("*.jsonl"))
    sibling = session.with_suffix("") / "tool-results" / "out.txt"
    sibling.parent.mkdir(parents=True)
    sibling.write_text("a tool's output, part of the session but not the conversation\n")
    result, store, entries = await _restore(scene, kind)
    assert isinstance(result, restores.Ready), result
    written_roles = {"source_bundle", "source_patch", "untracked"}
    written_roles.add("native_session" if kind is C.NATIVE else "transcript")
    # Objects are content-addressed: one the restore writes under any role is read once.
    written = {sha256 for role, sha256, _ in entries if role in written_roles}
    assert len(written) > 3
    assert (kind is C.NATIVE) == all(sha256 in written for _, sha256, _ in entries)
    for role, sha256, _ in entries:
        if sha256 in written:
            assert (store.reads[sha256], store.digests[sha256]) == (1, 0), role
        else:
            assert (store.reads[sha256], store.digests[sha256]) == (0, 1), role


async def test_an_object_changed_in_the_store_is_refused_whoever_read_it(
    tmp_path: pathlib.Path,
) -> None:
    """An early read that does not match its hash says nothing by itself: the store is asked,
    and the verdict is the store's own (`corrupt_object`); nothing is written."""
    scene = kit.make_scene(tmp_path)
    root = tmp_path / "checkpoints"
    captured = await kit.capture(
        scene, settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(root)})
    )
    store = CountingStore(root)
    manifest = await store.get_manifest(captured.checkpoint_id)
    assert manifest is not None
    record = records.decode_manifest(manifest)[0]
    sha = record["source"]["untracked"][0]["sha256"]
    path = kit.object_path(root, sha)
    path.write_bytes(b"x" * path.stat().st_size)
    before = scene.untouched()
    attempt = restores.Attempt(scene.worktree, scene.attempt_dir, scene.home)
    launch = scene.launch(kit.directive_for(captured, C.NATIVE))
    events = [e async for e in restoring.restore(launch, attempt, store)]
    assert events[-1] == restores.Refused("corrupt_object")
    assert store.digests[sha] == 1  # the early read failed, so the store itself was asked
    assert scene.untouched() == before
