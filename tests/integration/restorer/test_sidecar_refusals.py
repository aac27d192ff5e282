"""Every row of the spec's Refusals table, through a real sidecar and a real local folder store.

Spec ("Refusals"): "A restore that cannot deliver its directive stops the launch with a reason.
It never falls back on its own to a weaker kind of continuity." And ("How the replacement
restores"): "Native state lands before source state, so a version or identity refusal leaves
the work tree untouched." Each test asserts the reason, that nothing was handed to the
supervisor, the `refused/<reason>` counter, and (for every refusal before the source step) that
the replacement's worktree, `.git` included, and its harness home are byte for byte as before.

The checkpoint is a real one: the fenced attempt's git worktree and Claude Code session,
captured by the real Capturer into a local folder store once per module; each test restores
from its own copy of that folder into its own existing checkout and harness home.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import pytest

from services.common import directives, settings
from services.common.checkpoints import records
from services.restorer import captures, launching
from tests.integration.restorer import sidecar_support as kit
from tests.support import fake_harness, git_repos

json_logs = kit.json_logs  # the fixture, visible to this module

C = directives.Continuity
NATIVE_STEPS_DONE = [("directive", "started"), ("directive", "done"), ("verify", "started")]


@dataclasses.dataclass(frozen=True)
class Template:
    scene: kit.Scene
    root: pathlib.Path
    existing: pathlib.Path
    captured: captures.Captured


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """One captured checkpoint for the module (capturing is the slow part)."""
    tmp = tmp_path_factory.mktemp("template")
    scene = kit.make_scene(tmp)
    root = tmp / "checkpoints"
    storage = settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(root)})
    captured = asyncio.run(kit.capture(scene, storage))
    existing = tmp / "existing"
    git_repos.git(tmp, "clone", "-q", scene.project.url, str(existing))
    return Template(scene, root, existing, captured)


@dataclasses.dataclass
class World:
    scene: kit.Scene
    root: pathlib.Path
    captured: captures.Captured

    @property
    def store(self) -> Any:
        return kit.local_store(self.root)

    def directive(self, kind: directives.Continuity = C.NATIVE, **changes: Any) -> Any:
        return dataclasses.replace(kit.directive_for(self.captured, kind), **changes)

    async def restore(
        self,
        launch: launching.LaunchRecord | None = None,
        *,
        store: bool = True,
        launch_file: str | None = None,
    ) -> kit.Run:
        launch = launch or self.scene.launch(self.directive())
        extra = {"LAUNCH_RECORD": launch_file or self.scene.write_launch(launch)}
        if store:
            extra["CHECKPOINT_ROOT"] = str(self.root)
        return await kit.restore_once(self.scene.conf(**extra), self.scene.worktree)


@pytest.fixture
def world(template: Template, tmp_path: pathlib.Path) -> World:
    """A copy of the store, an existing checkout and a harness home with a user's settings."""
    root = tmp_path / "checkpoints"
    shutil.copytree(template.root, root, symlinks=True)
    replacement = tmp_path / "replacement"
    worktree = replacement / "worktree"
    shutil.copytree(template.existing, worktree, symlinks=True)
    home = replacement / "home"
    home.mkdir(parents=True)
    (home / ".claude.json").write_text('{"theme": "dark"}\n')
    scene = dataclasses.replace(
        template.scene,
        tmp=tmp_path,
        fakes=fake_harness.install(tmp_path / "bin"),
        home=home,
        attempt_dir=replacement,
        worktree=worktree,
    )
    return World(scene, root, template.captured)


async def _refused(
    world: World,
    reason: str,
    *,
    launch: launching.LaunchRecord | None = None,
    store: bool = True,
    launch_file: str | None = None,
    untouched: bool = True,
) -> kit.Run:
    before = world.scene.untouched()
    run = await world.restore(launch, store=store, launch_file=launch_file)
    assert run.reason == reason
    assert not any(e.HasField("ready") for e in run.events)
    assert run.status.state == "refused"
    assert run.status.refused.reason == reason
    counts = dict(run.status.restore_outcomes_by_type)
    code = reason.split(":", 1)[0]
    assert counts[f"refused/{code}"] == 1
    assert counts["native"] == counts["reconstructed"] == counts["fresh"] == 0
    if untouched:
        assert world.scene.untouched() == before
    assert not (world.scene.attempt_dir / "continuation.txt").exists()
    assert world.scene.fakes.calls() == []
    return run


async def _rewrite(world: World, change: Callable[[dict[str, Any]], None]) -> None:
    await kit.rewrite_record(world.store, world.captured.checkpoint_id, change)


def _entries(record: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [e for e in record["inventory"] if e["role"] == role]


# --- verify: the Validator's verdicts --------------------------------------------------------


async def test_manifest_absent(world: World) -> None:
    """`manifest_absent`: the checkpoint record is missing."""
    launch = world.scene.launch(world.directive(checkpoint_id="ckpt-never-written"))
    await _refused(world, "manifest_absent", launch=launch)


async def test_corrupt_manifest_when_the_record_no_longer_matches_its_hash(world: World) -> None:
    """`corrupt_manifest`: the record does not match its stored hash."""
    path = kit.manifest_path(world.root, world.captured.checkpoint_id)
    record, claimed = records.decode_manifest(path.read_bytes())
    record["sequence"] += 1
    path.write_text(json.dumps({"manifest_sha256": claimed, "record": record}))
    await _refused(world, "corrupt_manifest")


async def test_corrupt_manifest_when_it_does_not_parse(world: World) -> None:
    """`corrupt_manifest`: a manifest that is not JSON at all."""
    kit.manifest_path(world.root, world.captured.checkpoint_id).write_bytes(b"\x00not json")
    await _refused(world, "corrupt_manifest")


async def test_missing_object(world: World) -> None:
    """`missing_object`: an artifact the record lists is missing."""
    record = await _record(world)
    kit.object_path(world.root, record["source"]["patch"]["sha256"]).unlink()
    await _refused(world, "missing_object")


async def test_corrupt_object(world: World) -> None:
    """`corrupt_object`: an artifact's content no longer matches its hash."""
    record = await _record(world)
    sha = record["native"]["files"][0]["sha256"]
    path = kit.object_path(world.root, sha)
    size = path.stat().st_size
    path.write_bytes(b"x" * size)
    await _refused(world, "corrupt_object")


async def test_unsupported_version(world: World) -> None:
    """`unsupported_version`: the record's schema version is not supported."""
    await _rewrite(world, lambda r: r.update(schema_version=4))
    await _refused(world, "unsupported_version")


async def test_invalid_record(world: World) -> None:
    """`invalid_record`: the record does not satisfy the checkpoint schema."""
    await _rewrite(world, lambda r: r.update(unexpected_field=True))
    await _refused(world, "invalid_record")


async def test_not_committed(world: World) -> None:
    """`not_committed`: the record was never committed."""
    await _rewrite(world, lambda r: r.update(committed=False))
    await _refused(world, "not_committed")


async def test_missing_material(world: World) -> None:
    """`missing_material`: the record lacks a required artifact role (the native session)."""

    def drop(record: dict[str, Any]) -> None:
        record["inventory"] = [e for e in record["inventory"] if e["role"] != "native_session"]

    await _rewrite(world, drop)
    await _refused(world, "missing_material")


async def test_missing_watermark(world: World) -> None:
    """`missing_watermark`: the record has no durable transcript cursor."""
    await _rewrite(world, lambda r: r["transcript"].update(watermark=None))
    await _refused(world, "missing_watermark")


async def test_inventory_mismatch(world: World) -> None:
    """`inventory_mismatch`: the record's hashes disagree with its inventory."""

    def extra(record: dict[str, Any]) -> None:
        record["inventory"].append({"role": "untracked", "sha256": "0" * 64, "size": 1})

    await _rewrite(world, extra)
    await _refused(world, "inventory_mismatch")


async def test_scope_mismatch_for_another_task(world: World) -> None:
    """`scope_mismatch`: the record belongs to another task."""
    await _rewrite(world, lambda r: r["authority"].update(task_id="t-eng-9"))
    await _refused(world, "scope_mismatch")


async def test_scope_mismatch_for_a_newer_task_generation(world: World) -> None:
    """`scope_mismatch`: the record belongs to a newer task generation."""
    await _rewrite(world, lambda r: r["authority"].update(task_generation=2))
    await _refused(world, "scope_mismatch")


async def test_identity_mismatch_for_another_execution_generation(world: World) -> None:
    """`identity_mismatch`: the record is of a different execution generation than the one
    the launch record says this replacement restores from."""
    launch = world.scene.launch(world.directive(), restores_from=2)
    await _refused(world, "identity_mismatch", launch=launch)


async def test_identity_mismatch_for_another_checkpoint_id(world: World) -> None:
    """`identity_mismatch`: the record names another checkpoint id."""
    await _rewrite(world, lambda r: r.update(checkpoint_id="ckpt-other"))
    await _refused(world, "identity_mismatch")


async def test_identity_mismatch_for_a_watermark_the_checkpoint_does_not_hold(
    world: World,
) -> None:
    """A directive whose watermark is not the checkpoint's names another record: refused as
    `identity_mismatch` (the closest row), never restored at a different cursor."""
    launch = world.scene.launch(world.directive(watermark=world.captured.watermark + 5))
    await _refused(world, "identity_mismatch", launch=launch)


# --- registration ----------------------------------------------------------------------------


async def test_a_project_outside_the_registration_is_refused(world: World) -> None:
    """ "The checkpoint's project must be one of the projects in the worker's registration":
    refused as `scope_mismatch` (the closest row: the record belongs to other work)."""
    projects = (launching.Project("another-app", world.scene.project.url),)
    launch = world.scene.launch(world.directive(), projects=projects)
    run = await _refused(world, "scope_mismatch", launch=launch)
    assert ("registration", "started") in run.steps and ("native", "started") not in run.steps


# --- native ----------------------------------------------------------------------------------


def _context_only(record: dict[str, Any]) -> None:
    transcript = record["transcript"]
    if "same_as" in transcript:
        # Version 3: a transcript that shared the session file's segments now lists them.
        (shared,) = [f for f in record["native"]["files"] if f["path"] == transcript["same_as"]]
        del transcript["same_as"]
        transcript["segments"] = shared["segments"]
    record["continuity"] = "context_only"
    record["native"] = None
    record["inventory"] = [e for e in record["inventory"] if e["role"] != "native_session"]


async def test_context_only(world: World) -> None:
    """`context_only`: a native directive names a checkpoint that supports only context
    continuation; it is not reconstructed instead (no weaker fallback)."""
    await _rewrite(world, _context_only)
    await _refused(world, "context_only")


async def test_conversation_mismatch(world: World) -> None:
    """`conversation_mismatch`: the checkpoint's native session is not the one the fenced
    attempt held."""
    launch = world.scene.launch(world.directive(session_id="another-session"))
    await _refused(world, "conversation_mismatch", launch=launch)


@pytest.mark.parametrize("version", ["2.2.0", "2.0.9", "3.1.0"])
async def test_unqualified_version(world: World, version: str) -> None:
    """`unqualified_version`: the replacement's harness version is not qualified for native
    resume (Claude Code 2.1 only); the session files do not land."""
    world.scene.fakes.set_version("claude", version)
    await _refused(world, "unqualified_version")


async def test_a_harness_that_cannot_name_its_version_is_unqualified(world: World) -> None:
    """`unqualified_version`: a harness whose `--version` fails is not a qualified one."""
    world.scene.fakes.set_version_output("claude", "boom", exit_code=1)
    await _refused(world, "unqualified_version")


async def test_version_changed(world: World) -> None:
    """`version_changed`: qualified, but not the version the session was captured under."""
    world.scene.fakes.set_version("claude", "2.1.4")
    await _refused(world, "version_changed")


# --- source ----------------------------------------------------------------------------------


async def test_source_refusal_names_its_cause(world: World) -> None:
    """`source: …`: the captured source could not be applied to the worktree. A patch touching
    `.git/` is refused before the worktree is written; native state had already landed."""
    patch = (
        b"diff --git a/.git/config b/.git/config\n--- a/.git/config\n+++ b/.git/config\n"
        b"@@ -1 +1 @@\n-x\n+[core]\n"
    )
    sha = await _add_object(world, patch)

    def swap(record: dict[str, Any]) -> None:
        old = record["source"]["patch"]["sha256"]
        record["source"]["patch"] = {"sha256": sha, "size": len(patch)}
        for entry in record["inventory"]:
            if entry["sha256"] == old:
                entry.update(sha256=sha, size=len(patch))

    await _rewrite(world, swap)
    worktree_before = kit.full_snapshot(world.scene.worktree)
    run = await _refused(world, "source: unsafe path in patch", untouched=False)
    assert kit.full_snapshot(world.scene.worktree) == worktree_before
    assert ("native", "done") in run.steps
    assert list((world.scene.home / ".claude" / "projects").iterdir())


# --- configuration and the directive ---------------------------------------------------------


async def test_no_checkpoint_store_is_configured(world: World) -> None:
    """`no checkpoint store is configured for this worker`: the directive names a checkpoint
    but the worker has no checkpoint store."""
    await _refused(world, "no checkpoint store is configured for this worker", store=False)


async def test_remote_without_a_store_address_has_no_store(world: World) -> None:
    """With `checkpoint_remote` the store is the checkpoint-store service; a launch record
    naming none leaves the worker without a store."""
    launch = world.scene.launch(world.directive(), remote=True, restore_grant="")
    double, addr, stop = await kit.start_recovery(kit.worker_credential())
    try:
        world.scene.env.update(
            {"AGENTIHOOKS_CONTROL_ADDR": addr, "AGENTIHOOKS_WORKER_CREDENTIAL": double.credential}
        )
        await _refused(world, "no checkpoint store is configured for this worker", launch=launch)
    finally:
        await stop()
    assert double.reports[0][-1].refusal.reason == (
        "no checkpoint store is configured for this worker"
    )


@pytest.mark.parametrize(
    ("directive", "why"),
    [
        ({"checkpoint_id": "ckpt-7", "recovery": "fresh"}, "a fresh directive names a checkpoint"),
        ({"checkpoint_id": "c", "recovery": "native", "watermark": 3}, "names no session"),
        (
            {"checkpoint_id": "c", "recovery": "reconstructed", "session_id": "s", "watermark": 3},
            "a reconstructed directive names a session",
        ),
        ({"recovery": "resumed"}, "unknown recovery kind"),
    ],
)
async def test_a_directive_whose_fields_disagree_is_refused_as_malformed(
    world: World, directive: dict[str, Any], why: str
) -> None:
    """ "A directive whose fields disagree, for example a fresh directive naming a checkpoint,
    is refused as malformed" before anything else happens: no other step starts."""
    raw = launching.to_json(world.scene.launch(world.directive()))
    raw["directive"] = directive
    raw["scope"] = "not even a scope"  # checked only after the directive
    path = world.scene.tmp / "malformed.json"
    path.write_text(json.dumps(raw))
    before = world.scene.untouched()
    run = await world.restore(launch_file=str(path))
    assert run.reason.startswith("malformed directive: ")
    assert why in run.reason
    assert run.steps == [("directive", "started")]
    assert run.status.restore_outcomes_by_type["refused/malformed directive"] == 1
    assert world.scene.untouched() == before


async def test_a_malformed_directive_is_logged_with_the_attempt_it_belongs_to(
    world: World, json_logs: kit.JsonLogs
) -> None:
    """A refused malformed directive is logged with what is known: the scope's execution id,
    read before the directive is judged (not an empty one)."""
    raw = launching.to_json(world.scene.launch(world.directive()))
    raw["directive"] = {"checkpoint_id": "ckpt-7", "recovery": "fresh"}
    path = world.scene.tmp / "malformed.json"
    path.write_text(json.dumps(raw))
    run = await world.restore(launch_file=str(path))
    assert run.reason.startswith("malformed directive: ")
    [line] = json_logs.events("restore_refused")
    assert line["execution_id"] == kit.REPLACEMENT.execution_id
    assert line["reason"] == run.reason


# --- helpers ---------------------------------------------------------------------------------


async def _record(world: World) -> dict[str, Any]:
    data = await world.store.get_manifest(world.captured.checkpoint_id)
    record, _ = records.decode_manifest(data)
    return record


async def _add_object(world: World, data: bytes) -> str:
    async def one() -> Any:
        yield data

    blob = records.Blob.of(data)
    await world.store.put_object(one(), sha256=blob.sha256, size=blob.size, max_size=1 << 20)
    return blob.sha256
