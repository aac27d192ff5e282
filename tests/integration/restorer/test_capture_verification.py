"""What a capture reads back: everything the first time, then only what it wrote.

Issue 21 asks for capture about once a second; the capture path calls `Validator.verify`, which
reads every object of the checkpoint, so verifying each capture in full would read the whole
session back from the store every second (store requests and bytes growing with the square of
the session). A capturer verifies its first checkpoint in full, then, while it extends its own
verified checkpoint, reads back only the objects each capture wrote (objects are
content-addressed and never written over), and verifies in full again at most
`capturing.FULL_VERIFY_S` later (test_append_only.py: a damaged chain is then refused and
started anew). The tests damage an older object in the real local
store between two captures: the second capture does not read it; a full `Validator.verify`
(what a replacement runs) still refuses it; a new capturer (a restarted sidecar) verifies in
full, refuses, and starts its chains anew.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from services.common import directives
from services.common.checkpoints import validation
from services.restorer import captures, capturing
from tests.integration.restorer import sidecar_support as kit

pytestmark = pytest.mark.usefixtures("usual_umask")


_storage = kit.checkpoint_storage
_record = kit.stored_record


def _append(scene: kit.Scene, text: str) -> None:
    session = next((scene.fenced_home / ".claude" / "projects").rglob("*.jsonl"))
    with session.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"type": "assistant", "text": text}) + "\n")


def _damage(tmp: pathlib.Path, sha256: str) -> None:
    """Overwrite a stored object with other bytes of the same size."""
    [stored] = [p for p in (tmp / "checkpoints").rglob(sha256) if p.is_file()]
    stored.write_bytes(b"x" * stored.stat().st_size)


async def _verdict(tmp: pathlib.Path, checkpoint_id: str) -> validation.Verdict:
    return await validation.Validator(kit.local_store(tmp / "checkpoints")).verify(
        validation.Expectation(checkpoint_id, kit.SCOPE.execution_generation)
    )


async def test_a_capturer_reads_back_only_what_each_capture_wrote_after_its_first(
    tmp_path: pathlib.Path,
) -> None:
    scene = kit.make_scene(tmp_path)
    launch = scene.launch(directives.FRESH, scope=kit.SCOPE)
    capturer = capturing.Capturer(
        launch, kit.fenced_attempt(scene), _storage(tmp_path), full_verify_s=3600
    )
    first = await capturer.capture()
    assert first.written and first.continuity == "native"
    first_record = await _record(tmp_path, first.checkpoint_id)
    [native_file] = first_record["native"]["files"]  # type: ignore[index]
    old_segment = native_file["segments"][0]["sha256"]
    _damage(tmp_path, old_segment)

    _append(scene, "appended after the first capture")
    second = await capturer.capture()

    # The second capture extended the chain (the damaged segment is still its first) and was
    # accepted without reading that segment again.
    assert second.written and second.watermark == first.watermark + 1
    second_record = await _record(tmp_path, second.checkpoint_id)
    [extended] = second_record["native"]["files"]  # type: ignore[index]
    assert extended["segments"][0]["sha256"] == old_segment
    # What a replacement runs reads every object, and refuses.
    assert (await _verdict(tmp_path, second.checkpoint_id)).reason is not None
    assert (await _verdict(tmp_path, second.checkpoint_id)).reason.value == "corrupt_object"  # type: ignore[union-attr]


async def test_a_new_capturer_verifies_everything_and_starts_its_chains_anew(
    tmp_path: pathlib.Path,
) -> None:
    """A restarted sidecar extends the newest checkpoint in the store, which it never read:
    its first capture verifies in full, is refused with the damage's reason, and the next
    capture stores every chain anew and verifies."""
    scene = kit.make_scene(tmp_path)
    launch = scene.launch(directives.FRESH, scope=kit.SCOPE)
    first = await capturing.Capturer(
        launch, kit.fenced_attempt(scene), _storage(tmp_path)
    ).capture()
    [native_file] = (await _record(tmp_path, first.checkpoint_id))["native"]["files"]  # type: ignore[index]
    _damage(tmp_path, native_file["segments"][0]["sha256"])

    restarted = capturing.Capturer(launch, kit.fenced_attempt(scene), _storage(tmp_path))
    _append(scene, "appended while the sidecar restarted")
    with pytest.raises(captures.CaptureError, match="corrupt_object"):
        await restarted.capture()
    anew = await restarted.capture()
    assert anew.written
    assert (await _verdict(tmp_path, anew.checkpoint_id)).ok
    [stored_anew] = (await _record(tmp_path, anew.checkpoint_id))["native"]["files"]  # type: ignore[index]
    assert stored_anew["segments"][0]["sha256"] != native_file["segments"][0]["sha256"]
