"""Records in their Redis hash and JSON forms (spec words, round trips, the lost tail)."""

from __future__ import annotations

import re

import pytest

from services.common import directives
from services.controller.state import keys, records, scripting

C = directives.Continuity


def execution(directive: directives.Directive = directives.FRESH) -> records.Execution:
    return records.Execution(
        execution_id=records.ExecutionId("example.eng-2.3"),
        swarm="example",
        seat=records.SeatName("eng-2"),
        generation=3,
        task_id="t-eng-2",
        task_generation=1,
        image="img:1",
        state=records.ExecutionState.RUNNING,
        directive=directive,
        credential_id="c1",
        credential_issued_at=1_700_000_000,
        capture_grant_id="g1",
        restore_grant_id="g2",
        restores_from_execution=records.ExecutionId("example.eng-2.2"),
        restores_from_generation=2,
        legacy_spawn=False,
        account="acct-a",
        native_session_id=None,
        archive_watermark=None,
        captured_checkpoint_id=None,
        launched=True,
        admitted_at="2026-12-02T15:00:00Z",
        task_text="do it",
    )


@pytest.mark.parametrize(
    "directive",
    [
        directives.FRESH,
        directives.Directive("ckpt-7", C.NATIVE, "s", 412),
        directives.Directive("ckpt-7", C.RECONSTRUCTED, None, 0),
    ],
)
def test_execution_round_trips_through_its_hash(directive: directives.Directive) -> None:
    """An attempt's record reads back as written (absent fields are None)."""
    e = execution(directive)
    assert records.Execution.from_hash(e.to_hash()) == e


def test_a_directive_whose_fields_disagree_is_never_written() -> None:
    """Spec: a directive whose fields disagree, e.g. a fresh one naming a checkpoint, is refused
    as malformed; the controller never writes one."""
    with pytest.raises(directives.DirectiveError):
        records.directive_fields(directives.Directive("ckpt-7", C.FRESH, None, None))
    with pytest.raises(directives.DirectiveError):
        execution(directives.Directive("ckpt-7", C.NATIVE, None, 3)).to_hash()


def test_fence_json_names_the_lost_tail_and_each_release() -> None:
    """Spec: the fence names the tail that is lost (after the watermark, length unknown) and
    records each release."""
    h = {
        "execution_id": "example.eng-2.1",
        "swarm": "example",
        "generation": "1",
        "seat": "eng-2",
        "reason": "oom_killed",
        "controller_epoch": "4",
        "native_session_id": "sess",
        "archive_watermark": "412",
        "fenced_at": "2026-12-02T15:00:00Z",
        "task_id": "t-eng-2",
        "task_generation": "1",
        "release:launch_grant": '{"released_at": "2026-12-02T15:00:01Z", "controller_epoch": 4}',
    }
    f = records.Fence.from_hash(h)
    j = f.to_json()
    assert j["lost_tail"] == {"after_watermark": 412, "length": "unknown"}
    assert j["reason"] == "oom_killed" and j["controller_epoch"] == 4
    assert [r["kind"] for r in j["releases"]] == ["launch_grant"]
    assert f.released(records.ReleaseKind.LAUNCH_GRANT)
    assert not f.released(records.ReleaseKind.POD)
    assert f.scope.execution_generation == 1


def test_outcome_round_trips_and_uses_spec_words() -> None:
    """The stored outcome is marked verified and keeps the archive watermark beside the
    restored one."""
    o = records.Outcome(
        records.ExecutionId("example.eng-2.2"),
        C.NATIVE,
        "ckpt-7",
        "s",
        412,
        400,
        True,
        "2026-12-02T15:00:00Z",
    )
    assert records.Outcome.from_hash(o.to_hash()) == o
    assert o.to_json()["recovery"] == "native" and o.to_json()["verified"] is True


def test_a_pending_decision_keeps_the_compatibility_key_of_its_offer() -> None:
    """The offer is recorded with the worker image tag it was worked out under; a decision
    recorded before that key was kept reads without one (its offer is worked out again)."""
    offer = records.Offer("ckpt-7", C.NATIVE, 412)
    h = {
        "execution_id": "example.eng-2.1",
        "state": "recovery_pending",
        "controller_epoch": "3",
        "offer": '{"checkpoint_id": "ckpt-7", "continuity": "native", "watermark": 412}',
        "offer_key": "registry.local/agent-worker:1.4.2",
    }
    d = records.Decision.from_hash(h)
    assert (d.offer, d.offer_key) == (offer, "registry.local/agent-worker:1.4.2")
    del h["offer_key"]
    assert records.Decision.from_hash(h).offer_key is None


def test_text_hash_reads_bytes_replies() -> None:
    """redis-py without decode_responses answers bytes; records read both."""
    assert records.text_hash({b"a": b"1", "b": "2"}) == {"a": "1", "b": "2"}


def test_keys_share_the_swarm_hash_tag() -> None:
    """DESIGN 3: all keys of one swarm share the hash tag `agentihooks:{SWARM}:…`."""
    for key in (
        keys.lease("s"),
        keys.epoch("s"),
        keys.paused("s"),
        keys.seat("s", "a"),
        keys.fence("s", "x"),
        keys.events("s"),
        keys.revoked("s", "jti"),
    ):
        assert key.startswith("agentihooks:{s}:")
    assert keys.paused("s").endswith(":recovery-paused")


def test_a_record_key_is_its_prefix_and_its_name() -> None:
    """Scripts name keys from the records they read (the pass's first read: seats, fences,
    decisions, attempts; the fence: the task and the revoked tokens): each key is the prefix
    `keys` gives for an empty name, then the name."""
    eid = keys.execution_id("example", "eng-2", 3)
    for key, name in (
        (keys.seat, "eng-2"),
        (keys.fence, eid),
        (keys.decision, eid),
        (keys.execution, eid),
        (keys.task, "task-1"),  # the fence names the seat's task
        (keys.revoked, "tok-1"),  # and each token it revokes
    ):
        assert key("example", name) == key("example", "") + name


def test_execution_ids_are_deterministic_and_name_their_swarm() -> None:
    """A replacement's id is known before admission, so a restart cannot admit two."""
    eid = keys.execution_id("example", "eng-2", 3)
    assert eid == keys.execution_id("example", "eng-2", 3)
    assert keys.swarm_of(eid) == "example"
    assert keys.swarm_of("eng-2") is None
    assert keys.swarm_of("a.b.c") is None


def test_every_guarded_script_checks_the_lease_first() -> None:
    """Spec: every mutating script first checks the lease holder and epoch (the prelude)."""
    for name in scripting.SCRIPT_NAMES:
        source = scripting._SOURCES[name]
        if name == "lease_acquire":
            assert "'NX'" in source and "INCR" in source
        elif name == "pass_reads":
            # The one script run without the lease writes nothing.
            called = set(re.findall(r"redis\.call\('([A-Z]+)'", source))
            assert called and called <= {"SMEMBERS", "HGETALL", "HMGET", "HGET", "EXISTS"}, called
        else:
            assert source.startswith("-- Prepended by scripting.py")
            assert source.index("return 'lease_lost'") < source.index("local EPOCH")
