"""Spec: the controller accepts a report only from the attempt's own worker credential while
that attempt is the seat's current, unfenced one. The report's script is the one place that
checks it, under the lease and atomically with the write: these tests reach the script with
what the Python side lets through (a credential of the wrong generation, an attempt fenced
since its record was read)."""

from __future__ import annotations

import dataclasses

import pytest
import redis.asyncio as aioredis

from services.common import errors
from services.controller.state import reading, records, transitions
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first


async def test_a_credential_of_another_generation_is_refused_by_the_script(
    redis_client: aioredis.Redis,
) -> None:
    """The credential's generation, not the record's, is compared with the attempt's."""
    hx = await h.start(redis_client)
    own = await hx.worker(first("eng-1"))
    generation = own.credential.execution_generation
    other = records.Worker(dataclasses.replace(own.credential, execution_generation=generation + 1))
    with pytest.raises(errors.ForbiddenScope):
        await hx.recovery.report_capture(other, native_session_id="s", archive_watermark=1)
    with pytest.raises(errors.ForbiddenScope):
        await hx.recovery.report_refusal(other, "corrupt_object")
    held = await reading.execution(hx.client, SWARM, first("eng-1"))
    assert held is not None and held.native_session_id is None
    assert await reading.refusal(hx.client, SWARM, first("eng-1")) is None
    await hx.recovery.report_capture(own, native_session_id="s", archive_watermark=1)


async def test_an_attempt_fenced_after_its_record_was_read_reports_nothing(
    redis_client: aioredis.Redis,
) -> None:
    """A report racing the fence: the record read before the fence says running, the script
    finds it fenced and writes nothing."""
    hx = await h.start(redis_client)
    worker = await hx.worker(first("eng-1"))
    read_before = await reading.execution(hx.client, SWARM, first("eng-1"))
    assert read_before is not None
    fenced = await hx.recovery.writer.fence("eng-1", first("eng-1"), 1, "oom_killed")
    assert fenced is transitions.FenceStatus.FENCED
    writer = hx.recovery.writer
    captured = await writer.capture(read_before, worker.credential, "late", 9, None)
    assert captured is transitions.CaptureStatus.FORBIDDEN
    refused = await writer.refusal(read_before, worker.credential, "corrupt_object", "{}")
    assert refused is transitions.RefusalStatus.FORBIDDEN
    after = await reading.execution(hx.client, SWARM, first("eng-1"))
    assert after is not None and after.native_session_id is None
    assert after.state is records.ExecutionState.FENCED


async def test_a_fenced_attempts_malformed_report_is_forbidden_first(
    redis_client: aioredis.Redis,
) -> None:
    """Every entry point checks the credential first, then validates: a fenced attempt's
    refusal without a reason, or capture with a negative watermark, is forbidden_scope, not
    malformed; its own current attempt's is malformed."""
    hx = await h.start(redis_client)
    worker = await hx.worker(first("eng-1"))
    with pytest.raises(errors.Malformed):
        await hx.recovery.report_refusal(worker, "")
    with pytest.raises(errors.Malformed):
        await hx.recovery.report_capture(worker, native_session_id="s", archive_watermark=-1)
    await hx.recovery.writer.fence("eng-1", first("eng-1"), 1, "oom_killed")
    with pytest.raises(errors.ForbiddenScope):
        await hx.recovery.report_refusal(worker, "")
    with pytest.raises(errors.ForbiddenScope):
        await hx.recovery.report_capture(worker, native_session_id="s", archive_watermark=-1)
