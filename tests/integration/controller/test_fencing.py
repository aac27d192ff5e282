"""Fence and Release on real Redis (spec: "What happens when a Pod fails")."""

from __future__ import annotations

import json
import logging

import pytest

from services.common import errors, revocations, tokens
from services.controller import releasing
from services.controller.state import keys, reading, records, writing
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second


async def test_fence_records_the_attempt_and_its_lost_tail(hx: h.Harness) -> None:
    """Spec: one fence record for the attempt: execution id, generation, seat, reason,
    controller epoch, the native session id it held, the archive watermark and the lost tail."""
    e1 = first("eng-2")
    await hx.recovery.report_capture(
        await hx.worker(e1), native_session_id="sess-9", archive_watermark=412
    )
    hx.runtime.fail(e1, "evicted")
    report = await hx.recovery.reconcile()
    assert report.fenced == [e1]
    fence = await reading.fence(hx.client, SWARM, e1)
    assert fence is not None
    j = fence.to_json()
    assert (j["execution_id"], j["generation"], j["seat"], j["reason"]) == (
        e1,
        1,
        "eng-2",
        "evicted",
    )
    assert j["controller_epoch"] == hx.recovery.lease.epoch
    assert j["native_session_id"] == "sess-9"
    assert j["archive_watermark"] == 412
    assert j["lost_tail"] == {"after_watermark": 412, "length": "unknown"}


async def test_a_fence_after_the_final_capture_names_no_lost_tail(hx: h.Harness) -> None:
    """Issue 21: "The fence then states its lost tail truthfully: none after a final capture":
    the sidecar's last report, taken once the worker stopped, is marked final; the fence keeps
    its watermark and names no lost tail, in the record and in the fence event."""
    e1 = first("eng-2")
    worker = await hx.worker(e1)
    await hx.recovery.report_capture(worker, native_session_id="sess-9", archive_watermark=412)
    await hx.recovery.report_capture(
        worker, native_session_id="sess-9", archive_watermark=415, final=True
    )
    hx.runtime.fail(e1, "oom_killed")
    report = await hx.recovery.reconcile()
    assert report.fenced == [e1]
    fence = await reading.fence(hx.client, SWARM, e1)
    assert fence is not None
    assert fence.to_json()["lost_tail"] == {"after_watermark": 415, "length": "none"}
    raw = await hx.client.xrange(keys.events(SWARM))
    details = [json.loads(f[b"detail"]) for _, f in raw if f[b"kind"] == b"fence"]
    assert details[-1]["lost_tail"] == {"after_watermark": 415, "length": "none"}


async def test_a_second_fence_returns_the_first(hx: h.Harness) -> None:
    """Spec: a second fence for the same attempt returns the first."""
    e1 = first("eng-1")
    hx.runtime.fail(e1)
    await hx.recovery.reconcile()
    before = await reading.fence(hx.client, SWARM, e1)
    assert await hx.recovery.writer.fence("eng-1", e1, 1, "node_lost") == "exists"
    assert await reading.fence(hx.client, SWARM, e1) == before


async def test_only_the_current_attempt_can_be_fenced(hx: h.Harness) -> None:
    """Spec: only the current attempt of a seat can be fenced (an old generation is refused)."""
    assert await hx.recovery.writer.fence("eng-1", first("eng-1"), 7, "oom_killed") == "not_current"
    assert (
        await hx.recovery.writer.fence("eng-1", second("eng-1"), 2, "oom_killed") == "not_current"
    )
    assert await reading.fence(hx.client, SWARM, first("eng-1")) is None


async def test_release_revokes_grants_ends_the_slot_and_removes_the_pod_once(
    hx: h.Harness,
) -> None:
    """Spec: the fenced attempt's launch grant is revoked and its account slot ends; each
    release is recorded in the fence, so a restart never releases twice; a fenced worker keeps
    no claim, grant or account authority."""
    e1 = first("eng-1")
    token = hx.runtime.specs[e1].worker_credential
    held = await reading.execution(hx.client, SWARM, e1)
    assert held is not None and held.account is not None
    assert e1 in await reading.slots(hx.client, SWARM)
    hx.runtime.fail(e1, alive=True)  # a zombie that still runs
    await hx.recovery.reconcile()
    fence = await reading.fence(hx.client, SWARM, e1)
    assert fence is not None
    assert {r.kind for r in fence.releases} == set(records.ReleaseKind)
    rev = revocations.RedisRevocations(hx.client)
    with pytest.raises(errors.Unauthenticated, match="revoked"):
        await tokens.check_worker_credential(h.GRANT_KEY, token, rev)
    for grant_id in (held.capture_grant_id,):
        assert await rev.is_revoked(SWARM, grant_id)
        assert await hx.client.ttl(keys.revoked(SWARM, grant_id)) > 0
    assert e1 not in await reading.slots(hx.client, SWARM)
    assert hx.runtime.remove_calls == [e1]
    # Later passes and a restarted controller release nothing again.
    stamps = [r.released_at for r in fence.releases]
    await hx.recovery.reconcile()
    await hx.restart()
    await hx.recovery.reconcile()
    again = await reading.fence(hx.client, SWARM, e1)
    assert again is not None and [r.released_at for r in again.releases] == stamps
    assert hx.runtime.remove_calls == [e1]


async def test_each_revocation_is_kept_as_long_as_its_token_could_pass_a_check(
    hx: h.Harness,
) -> None:
    """The fence script reads what to revoke from the attempt's record: the worker credential
    until its own expiry (issue time plus its lifetime) and a little past, each store grant
    for a grant's whole lifetime, its leeway and the margin."""
    e1 = first("eng-1")
    held = await reading.execution(hx.client, SWARM, e1)
    assert held is not None and held.capture_grant_id and not held.restore_grant_id
    hx.runtime.fail(e1)
    await hx.recovery.reconcile()
    now = int(hx.recovery.writer.clock())
    credential_ttl = await hx.client.ttl(keys.revoked(SWARM, held.credential_id))
    expected = (
        held.credential_issued_at + writing.WORKER_CREDENTIAL_TTL_S + writing.REVOCATION_MARGIN_S
    ) - now
    assert expected - 5 <= credential_ttl <= expected, (credential_ttl, expected)
    grant_ttl = await hx.client.ttl(keys.revoked(SWARM, held.capture_grant_id))
    assert writing.GRANT_REVOCATION_S - 5 <= grant_ttl <= writing.GRANT_REVOCATION_S
    assert writing.GRANT_REVOCATION_S == (
        tokens.DEFAULT_GRANT_TTL_S + tokens.LEEWAY_S + writing.REVOCATION_MARGIN_S
    )
    # Nothing else was revoked: the two tokens the attempt held.
    revoked = [k async for k in hx.client.scan_iter(match=keys.revoked(SWARM, "*"))]
    assert len(revoked) == 2, revoked


async def test_authority_is_not_released_without_the_attempts_record(hx: h.Harness) -> None:
    """A fence whose attempt has no record: the authority releases are refused
    (`execution_missing`) and nothing is recorded or revoked; the Pod's release needs no
    record."""
    e1 = first("eng-1")
    assert await hx.recovery.writer.fence("eng-1", e1, 1, "node_lost") == "fenced"
    await hx.client.delete(keys.execution(SWARM, e1))
    kinds = records.AUTHORITY_RELEASES
    assert await hx.recovery.writer.release(e1, kinds) == "execution_missing"
    fence = await reading.fence(hx.client, SWARM, e1)
    assert fence is not None and fence.releases == ()
    with pytest.raises(errors.NotFound, match="no record"):
        await releasing.release_authority(hx.recovery.ctx, fence)
    assert [k async for k in hx.client.scan_iter(match=keys.revoked(SWARM, "*"))] == []
    assert await hx.recovery.writer.release(e1, [records.ReleaseKind.POD]) == "released"


async def test_fenced_attempt_keeps_no_authority(hx: h.Harness) -> None:
    """Issue 3: the fence works on credentials; a fenced attempt still running can no longer
    report a capture or read its launch record (forbidden_scope, nothing stored)."""
    e1 = first("eng-1")
    zombie = await hx.worker(e1)
    hx.runtime.fail(e1, alive=True)
    await hx.recovery.reconcile()
    before = await reading.execution(hx.client, SWARM, e1)
    with pytest.raises(errors.ForbiddenScope):
        await hx.recovery.report_capture(zombie, native_session_id="x", archive_watermark=9)
    with pytest.raises(errors.ForbiddenScope):
        await hx.recovery.launch_record(zombie)
    assert await reading.execution(hx.client, SWARM, e1) == before


async def test_hold_sets_awaiting_recovery_pending(hx: h.Harness) -> None:
    """Spec: while a fenced attempt has no launched replacement the task's awaiting reads
    recovery_pending."""
    hx.runtime.fail(first("eng-1"))
    await hx.recovery.reconcile()
    task = await reading.task(hx.client, SWARM, "t-eng-1")
    assert task is not None and task.awaiting == "recovery_pending"
    other = await reading.task(hx.client, SWARM, "t-eng-2")
    assert other is not None and other.awaiting == "worker"


async def test_fence_event_in_stream_and_one_log_line(
    hx: h.Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Spec: every fence is recorded as a fence event with the expected and observed
    generation and the controller epoch (Redis stream, written by the same script, and one
    JSON log line)."""
    caplog.set_level(logging.INFO, logger="services.controller.telemetry")
    hx.runtime.fail(first("eng-2"), "node_lost")
    await hx.recovery.reconcile()
    events = [e for e in await hx.recovery.events() if e.kind == "fence"]
    assert len(events) == 1
    ev = events[0]
    assert (ev.execution_id, ev.expected_generation, ev.observed_generation) == (
        first("eng-2"),
        1,
        1,
    )
    assert ev.controller_epoch == hx.recovery.lease.epoch
    assert ev.detail["reason"] == "node_lost"
    lines = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "fence"]
    assert len(lines) == 1
    fields = lines[0].fields  # type: ignore[attr-defined]
    assert fields["event_id"] == ev.id and fields["controller_epoch"] == ev.controller_epoch
    assert "eyJ" not in json.dumps(fields)
