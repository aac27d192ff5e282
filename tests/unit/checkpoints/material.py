"""Valid checkpoints to start from: a record, its objects in a `MemoryStore`, its manifest."""

from __future__ import annotations

import copy
from typing import Any

from services.common.checkpoints import records, storing, validation
from tests.support import memory_store

SCOPE = storing.StoreScope("example", "t-eng-2", 1)
EXPECTED = validation.Expectation("ckpt-7", 3)
AUTHORITY = records.Authority(
    swarm="example",
    seat="eng-2",
    task_id="t-eng-2",
    task_generation=1,
    execution_id="e-42",
    execution_generation=3,
)
BASE = "a" * 40
HEAD = "b" * 40

TRANSCRIPT = b'{"n":1}\n{"n":2,"text":"line\xe2\x80\xa8separator"}\n'
SESSION = b'{"type":"user"}\n'
BUNDLE = b"# v2 git bundle\n"
PATCH = b"diff --git a/x b/x\n"
UNTRACKED = b"remember the milk\n"
OBJECTS = (TRANSCRIPT, SESSION, BUNDLE, PATCH, UNTRACKED)
"""Every object the records below name."""


def native_record(**overrides: Any) -> dict[str, Any]:
    """A native checkpoint record naming every role once; top-level keys may be overridden."""
    record = records.new_record(
        checkpoint_id="ckpt-7",
        sequence=7,
        created_at="2026-12-02T15:00:00Z",
        authority=AUTHORITY,
        project="app",
        compatibility_key="registry.local/agent-worker:1.4.2",
        transcript=records.Blob.of(TRANSCRIPT),
        watermark=412,
        native=records.Native(
            harness="claude_code",
            harness_version="2.1.3",
            native_session_id="0b0c7a1e-1111-2222-3333-444455556666",
            files=(records.NativeFile("projects/-work-app/0b0c.jsonl", records.Blob.of(SESSION)),),
        ),
        source=records.Source(
            repository="https://git.example/app.git",
            base_commit=BASE,
            head_commit=HEAD,
            branch="main",
            bundle=records.Blob.of(BUNDLE),
            patch=records.Blob.of(PATCH),
            untracked=(records.UntrackedFile("notes/todo.txt", records.Blob.of(UNTRACKED)),),
        ),
    )
    record.update(copy.deepcopy(overrides))
    return record


def context_record(**overrides: Any) -> dict[str, Any]:
    """A context-only checkpoint with no source: only the transcript."""
    record = records.new_record(
        checkpoint_id="ckpt-7",
        sequence=7,
        created_at="2026-12-02T15:00:00Z",
        authority=AUTHORITY,
        project="app",
        compatibility_key="registry.local/agent-worker:1.4.2",
        transcript=records.Blob.of(TRANSCRIPT),
        watermark=2,
    )
    record.update(copy.deepcopy(overrides))
    return record


def legacy_record() -> dict[str, Any]:
    """The native record as schema version 1 wrote it: no execution_generation."""
    record = native_record(schema_version=1)
    del record["authority"]["execution_generation"]
    return record


def stocked_store() -> memory_store.MemoryStore:
    """A store holding every object the records above name, and no manifest yet."""
    store = memory_store.MemoryStore(SCOPE)
    for data in OBJECTS:
        store.add(data)
    return store


def commit(store: memory_store.MemoryStore, record: dict[str, Any], name: str = "") -> None:
    """Write the record's manifest under `name` (its own checkpoint id by default)."""
    store.manifests[name or record["checkpoint_id"]] = records.encode_manifest(record)
