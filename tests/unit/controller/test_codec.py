"""The one record codec: each record's Redis hash is the stored format the Lua scripts read and
write, so the codec must write exactly the fields and encodings the records always had."""

from __future__ import annotations

from typing import Any

import pytest

from services.common import directives
from services.controller.state import codec, records

C = directives.Continuity

EXECUTION_HASH = {
    "directive.recovery": "native",
    "directive.checkpoint_id": "ckpt-7",
    "directive.session_id": "s-1",
    "directive.watermark": "412",
    "execution_id": "example.eng-2.3",
    "swarm": "example",
    "seat": "eng-2",
    "task_id": "t-eng-2",
    "image": "img:1",
    "credential_id": "c1",
    "capture_grant_id": "g1",
    "restores_from_execution": "example.eng-2.2",
    "account": "acct-a",
    "admitted_at": "2026-12-02T15:00:00Z",
    "generation": "3",
    "task_generation": "1",
    "credential_issued_at": "1700000000",
    "restores_from_generation": "2",
    "archive_watermark": "0",
    "relaunches": "0",
    "state": "running",
    "legacy_spawn": "0",
    "launched": "1",
    "admission": '{"agent": "m1", "archive_watermark": 9, "choice": "resume", '
    '"decided_at": "2026-12-02T15:00:00Z", "decision_epoch": 3, "fence_epoch": 2, '
    '"fence_reason": "oom_killed", "fenced_at": "2026-12-02T14:59:00Z", '
    '"final_capture": true, "native_session_id": "s-1", "source": "master"}',
}

EXECUTION = records.Execution.from_hash(EXECUTION_HASH)


def test_an_execution_reads_every_field_of_its_hash() -> None:
    """Numbers, booleans, the flat directive and the admission JSON; absent ones are None."""
    e = EXECUTION
    assert e.directive == directives.Directive("ckpt-7", C.NATIVE, "s-1", 412)
    assert (e.generation, e.credential_issued_at, e.archive_watermark) == (3, 1_700_000_000, 0)
    assert (e.launched, e.legacy_spawn, e.relaunches) == (True, False, 0)
    assert (e.restore_grant_id, e.native_session_id, e.task_text) == (None, None, "")
    assert e.admission is not None and e.admission.final_capture
    assert e.admission.choice is records.Choice.RESUME


OUTCOME = records.Outcome(
    records.ExecutionId("example.eng-2.3"), C.FRESH, None, None, None, 12, True, "2026-12-02T1"
)
OUTCOME_HASH = {
    "execution_id": "example.eng-2.3",
    "recovery": "fresh",
    "archive_watermark": "12",
    "verified": "1",
    "reported_at": "2026-12-02T1",
}

CONFIG = records.SwarmConfig(
    "example",
    "img:1",
    "claude-code",
    ("claude", "-p"),
    (records.Project("app", "https://example.com/app.git"),),
    True,
    False,
)
CONFIG_HASH = {
    "swarm": "example",
    "worker_image": "img:1",
    "harness": "claude-code",
    "command": '["claude", "-p"]',
    "projects": '[{"name": "app", "repository": "https://example.com/app.git"}]',
    "restore_automation": "1",
    "checkpoint_remote": "0",
    # Kept although empty: every config field is always present.
    "continuation_prompt": "",
}


@pytest.mark.parametrize(
    ("record", "expected"),
    [(EXECUTION, EXECUTION_HASH), (OUTCOME, OUTCOME_HASH), (CONFIG, CONFIG_HASH)],
    ids=["execution", "outcome", "config"],
)
def test_records_write_the_hash_fields_they_always_wrote(
    record: codec.Hashed, expected: dict[str, str]
) -> None:
    """The stored format: field names and encodings the Lua scripts read, byte for byte
    (absent when None or empty, booleans as 1/0, enums as their word, JSON for documents)."""
    assert record.to_hash() == expected
    assert type(record).from_hash(expected) == record


SEAT_HASH = {
    "seat": "eng-1",
    "task_id": "t-1",
    "current": "example.eng-1.2",
    "generation": "2",
    "state": "fenced",
    "fenced_execution": "example.eng-1.1",
}

FENCE_HASH = {
    "execution_id": "example.eng-1.1",
    "swarm": "example",
    "generation": "1",
    "seat": "eng-1",
    "reason": "oom_killed",
    "controller_epoch": "3",
    "fenced_at": "2026-12-02T15:00:00Z",
    "task_id": "t-1",
    "task_generation": "1",
    "archive_watermark": "7",
    "lost_tail": "none",
    "release:pod": '{"released_at": "2026-12-02T15:00:02Z", "controller_epoch": 4}',
}

DECISION_HASH = {
    "execution_id": "example.eng-1.1",
    "state": "accepted",
    "controller_epoch": "3",
    "offer": '{"checkpoint_id": "ckpt-1", "continuity": "native", "watermark": 5}',
    "offer_key": "",
    "choice": "resume",
    "source": "operator",
    "replacement": "example.eng-1.2",
    "replacement_generation": "2",
    "decided_at": "2026-12-02T15:00:01Z",
    "directive.recovery": "native",
    "directive.checkpoint_id": "ckpt-1",
    "directive.session_id": "s-1",
    "directive.watermark": "5",
}

TASK_HASH = {"task_id": "t-1", "seat": "eng-1", "held": "1", "recovery": '{"a": 1}'}


def test_hashes_the_scripts_write_read_as_records() -> None:
    """Renamed fields (`current`, `fenced_execution`, `replacement`), a fence's releases and
    lost tail, a decision's flat directive, and the defaults of fields older records lack."""
    seat = records.Seat.from_hash(SEAT_HASH)
    assert (seat.current_execution_id, seat.fenced_execution_id) == (
        "example.eng-1.2",
        "example.eng-1.1",
    )
    fence = records.Fence.from_hash(FENCE_HASH)
    assert fence.final_capture and fence.archive_watermark == 7
    assert fence.releases == (records.Release(records.ReleaseKind.POD, "2026-12-02T15:00:02Z", 4),)
    assert fence.native_session_id is None
    decision = records.Decision.from_hash(DECISION_HASH)
    assert decision.offer == records.Offer("ckpt-1", C.NATIVE, 5)
    assert decision.directive == directives.Directive("ckpt-1", C.NATIVE, "s-1", 5)
    assert decision.replacement_execution_id == "example.eng-1.2"
    assert decision.offer_key == ""  # kept as recorded: an empty key is not a missing one
    assert decision.agent is None
    task = records.Task.from_hash(TASK_HASH)
    assert (task.text, task.awaiting, task.task_generation, task.held) == ("", "", 1, True)
    assert task.recovery == {"a": 1}


RECORD_HASHES: list[tuple[type[codec.Hashed], Any]] = [
    (records.Seat, SEAT_HASH),
    (records.Fence, FENCE_HASH),
    (records.Decision, DECISION_HASH),
    (records.Task, {**TASK_HASH, "text": "x", "awaiting": "y", "task_generation": "2"}),
    (records.Execution, EXECUTION_HASH),
    (records.Outcome, OUTCOME_HASH),
    (records.SwarmConfig, CONFIG_HASH),
]


@pytest.mark.parametrize(("cls", "h"), RECORD_HASHES)
def test_every_record_round_trips_through_the_codec(cls: type[codec.Hashed], h: Any) -> None:
    """A record read from a hash writes a hash that reads back as the same record."""
    record = cls.from_hash(h)
    assert cls.from_hash(record.to_hash()) == record


def test_a_record_without_a_field_it_needs_is_refused() -> None:
    """A hash missing a required field is not read as a record with an empty one."""
    with pytest.raises(KeyError):
        records.Seat.from_hash({k: v for k, v in SEAT_HASH.items() if k != "current"})
    with pytest.raises(ValueError):
        records.Fence.from_hash({**FENCE_HASH, "generation": ""})


def test_an_absent_optional_field_is_none_and_an_empty_one_too() -> None:
    """Spec of the hash form: a missing field is None; an empty optional field reads alike."""
    h = {**SEAT_HASH, "fenced_execution": ""}
    assert records.Seat.from_hash(h).fenced_execution_id is None
    h.pop("fenced_execution")
    assert records.Seat.from_hash(h).fenced_execution_id is None


def test_prepared_records_work_nothing_out_on_their_first_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`codec.prepare` (a controller's start) makes every record class's reader beforehand: a
    first read or write reads no type hints and compiles nothing (they cost the first failure
    a controller handles milliseconds)."""
    monkeypatch.setattr(codec, "_FIELDS", {})
    monkeypatch.setattr(codec, "_DECODERS", {})
    codec.prepare()

    def worked_out(*_: object, **__: object) -> None:
        raise AssertionError("a record class worked out on its first use")

    monkeypatch.setattr(codec.typing, "get_type_hints", worked_out)
    monkeypatch.setattr(codec, "_compiled_decoder", worked_out)
    for cls, h in RECORD_HASHES:
        record = cls.from_hash(h)
        assert cls.from_hash(record.to_hash()) == record
