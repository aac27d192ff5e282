"""The controller's HTTP API through a real aiohttp server on loopback, over real Redis and a
Hub on the controller harness's fake runtime (spec: "Choosing resume or fresh", "Repeated and
conflicting requests", "Observing recovery"; DESIGN 3: only the lease holder writes)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from services.common import directives, errors
from services.controller import hub as controller_hub
from services.controller import recovering, replacing
from services.controller.api import http_api
from services.controller.state import keys, reading, records
from tests.integration.controller import harness
from tests.integration.controller.harness import SWARM, first, second
from tests.support import binaries, ports

OPERATOR_TOKEN = "operator-token-" + "o" * 32
NOT_PENDING = "no recovery decision is pending for this attempt"
NO_CHECKPOINT = "no complete compatible checkpoint to resume from"
SEATS = ("eng-1", "eng-2", "eng-3")
NATIVE_REASON = "oom_killed; native resume from ckpt-7 at record 412"
CONTEXT_REASON = "evicted; continuation from context from ckpt-3 at record 300"

# The spec's example, word for word; the test supplies its three variables.
CURL_EXAMPLE = """curl -sS -X POST "$CONTROL_URL/v1/executions/$EXECUTION/restore-decision" \\
  -H "Authorization: Bearer $OPERATOR_TOKEN" \\
  -H "Content-Type: application/json" \\
  -d '{"choice": "resume", "agent": "master@example-1"}'"""


@dataclasses.dataclass
class Served:
    """A Hub serving HTTP on loopback, with swarm `example` waiting for decisions:

    - eng-1 held session sess-1 and failed oom_killed; its newest checkpoint ckpt-7 is native
      (card: `Resume native`).
    - eng-2 failed evicted; its newest checkpoint ckpt-3 is context only (`Continue from
      context`).
    - eng-3 failed node_lost with no checkpoint: only fresh is offered.
    """

    hub: controller_hub.Hub
    runtime: harness.FakeRuntime
    checkpoints: harness.FakeCheckpoints
    url: str

    async def recovery(self) -> recovering.Recovery:
        return await self.hub.recovery(SWARM)

    async def worker_token(self, execution_id: str) -> str:
        return self.runtime.specs[execution_id].worker_credential


def new_hub(
    client: aioredis.Redis,
    runtime: harness.FakeRuntime,
    checkpoints: replacing.CheckpointSource | None,
    *,
    holder: str | None = None,
) -> controller_hub.Hub:
    """A controller process over the harness's fake runtime."""
    return controller_hub.Hub(
        client,
        runtime,
        grant_key=harness.GRANT_KEY,
        operator_token=OPERATOR_TOKEN,
        worker_image=harness.IMAGE,
        checkpoints=checkpoints,
        holder=holder,
        pass_interval_s=0.05,
    )


@contextlib.asynccontextmanager
async def serving(hub: controller_hub.Hub) -> AsyncIterator[str]:
    """Serve `hub` over HTTP on a free loopback port; yields its base URL."""
    runner, port = await http_api.start_http(hub, "127.0.0.1:0")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def _awaiting(recovery: recovering.Recovery) -> None:
    status = await recovery.status()
    decisions = {c.seat: c.decision for c in status.handoffs}
    assert decisions == dict.fromkeys(SEATS, records.RECOVERY_PENDING), decisions


@contextlib.asynccontextmanager
async def awaiting_swarm(
    client: aioredis.Redis,
    *,
    text: str = "build the thing",
    checkpoints: harness.FakeCheckpoints | None = None,
) -> AsyncIterator[Served]:
    """Apply the swarm (automation off), fail every seat and wait until each awaits a decision;
    the Hub's own recovery loop does the fencing, as in a deployment."""
    runtime = harness.FakeRuntime()
    source = checkpoints or harness.FakeCheckpoints()
    hub = new_hub(client, runtime, source)
    try:
        await hub.wait_until_leader(SWARM)
        recovery = await hub.recovery(SWARM)
        await recovery.apply_swarm(harness.document(automation=False, seats=SEATS, text=text))
        worker = harness.Harness(client, runtime, source, recovery)
        await recovery.report_capture(
            await worker.worker(first("eng-1")), native_session_id="sess-1", archive_watermark=400
        )
        source.by_execution[first("eng-1")] = [
            harness.summary("ckpt-6", sequence=6, watermark=300),
            harness.summary("ckpt-7"),
        ]
        source.by_execution[first("eng-2")] = [
            harness.summary("ckpt-3", native=False, sequence=3, watermark=300)
        ]
        runtime.fail(first("eng-1"), "oom_killed")
        runtime.fail(first("eng-2"), "evicted")
        runtime.fail(first("eng-3"), "node_lost")
        await ports.eventually(lambda: _awaiting(recovery), timeout=10)
        async with serving(hub) as url:
            yield Served(hub, runtime, source, url)
    finally:
        await hub.stop()


@pytest.fixture
async def served(redis_client: aioredis.Redis) -> AsyncIterator[Served]:
    async with awaiting_swarm(redis_client) as found:
        yield found


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post_decision(
    http: aiohttp.ClientSession,
    served: Served,
    execution: str,
    body: Any,
    token: str | None = OPERATOR_TOKEN,
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    async with http.post(
        f"{served.url}/v1/executions/{execution}/restore-decision",
        data=data,
        headers={**headers, "Content-Type": "application/json"},
    ) as response:
        return response.status, await response.json()


async def get(
    http: aiohttp.ClientSession, url: str, token: str | None = OPERATOR_TOKEN
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with http.get(url, headers=headers) as response:
        return response.status, await response.json()


async def snapshot(client: aioredis.Redis) -> dict[bytes, object]:
    """Every key but the lease (its holder renews its expiry) with its value."""
    out: dict[bytes, object] = {}
    for key in await client.keys("*"):
        if not isinstance(key, bytes) or key == keys.lease(SWARM).encode():
            continue
        kind = await client.type(key)
        if kind == b"hash":
            out[key] = await client.hgetall(key)
        elif kind == b"string":
            out[key] = await client.get(key)
        elif kind == b"stream":
            out[key] = await client.xlen(key)
        elif kind == b"zset":
            out[key] = await client.zrange(key, 0, -1, withscores=True)
        elif kind == b"set":
            out[key] = await client.smembers(key)
    return out


async def run_curl(script: str, env: Mapping[str, str]) -> Any:
    """Run a shell command line with the real curl binary; its stdout parsed as JSON."""
    binaries.require("curl")
    proc = await asyncio.create_subprocess_exec(
        binaries.require("bash"),
        "-c",
        script,
        env={"PATH": os.environ["PATH"], **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


# Choosing resume or fresh.


async def test_the_spec_curl_example_accepts_the_decision(served: Served) -> None:
    """Spec: "Callers with a controller credential can post the choice directly" — the curl
    example as written resumes natively from the newest complete, compatible checkpoint and
    admits one replacement with the next generation."""
    answer = await run_curl(
        CURL_EXAMPLE,
        {
            "CONTROL_URL": served.url,
            "EXECUTION": first("eng-1"),
            "OPERATOR_TOKEN": OPERATOR_TOKEN,
        },
    )
    assert answer == {
        "execution_id": first("eng-1"),
        "state": "accepted",
        "choice": "resume",
        "source": "operator",
        "agent": "master@example-1",
        "directive": {
            "checkpoint_id": "ckpt-7",
            "recovery": "native",
            "session_id": "sess-1",
            "watermark": 412,
        },
        "replacement_execution_id": second("eng-1"),
        "replacement_generation": 2,
        "repeated": False,
        "controller_epoch": answer["controller_epoch"],
        "decided_at": answer["decided_at"],
    }
    assert second("eng-1") in served.runtime.specs
    task = await reading.task(served.hub.client, SWARM, "t-eng-1")
    assert task is not None and task.awaiting == records.RECOVERY_PENDING
    assert task.recovery is not None and task.recovery["status"] == "accepted"


async def test_a_registered_master_chooses_as_its_own_agent(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """Spec: a registered master of the swarm whose credential is bound to the named agent can
    choose; resume from a context-only checkpoint is reconstructed."""
    status, body = await post_decision(
        http,
        served,
        first("eng-2"),
        {"choice": "resume", "agent": "master@example-1"},
        harness.MASTER_SECRET,
    )
    assert status == 200, body
    assert body["source"] == "master" and body["agent"] == "master@example-1"
    assert body["directive"] == {
        "checkpoint_id": "ckpt-3",
        "recovery": "reconstructed",
        "session_id": None,
        "watermark": 300,
    }


async def test_a_decision_resolves_the_callers_credential_once(
    served: Served, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22: a decision over HTTP authenticates once: the master's credential is looked up
    among the swarm's masters once for the whole call (before: the middleware and the route
    each looked it up)."""
    looked_up: list[str] = []
    lookup = reading.master_for_token

    async def counted(client: Any, swarm: str, token: str | None) -> records.Master | None:
        looked_up.append(swarm)
        return await lookup(client, swarm, token)

    monkeypatch.setattr(reading, "master_for_token", counted)
    status, body = await post_decision(
        http,
        served,
        first("eng-3"),
        {"choice": "fresh", "agent": "master@example-1"},
        harness.MASTER_SECRET,
    )
    assert status == 200, body
    assert looked_up == [SWARM]


async def test_operator_agent_is_optional_and_fresh_names_no_checkpoint(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """Spec: fresh admits a replacement with no checkpoint; the operator may leave out the
    agent (it is recorded as `operator`)."""
    status, body = await post_decision(http, served, first("eng-3"), {"choice": "fresh"})
    assert status == 200, body
    assert body["agent"] == "operator" and body["source"] == "operator"
    assert body["directive"] == directives.FRESH.to_json()
    assert body["replacement_execution_id"] == second("eng-3")


async def test_repeating_the_choice_returns_the_same_decision(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """Spec: "Repeating the accepted choice … returns the same decision, the same checkpoint
    and the same replacement, and admits nothing new"."""
    body = {"choice": "resume", "agent": "master@example-1"}
    status, accepted = await post_decision(http, served, first("eng-1"), body)
    assert status == 200 and accepted["repeated"] is False
    launched = list(served.runtime.launch_calls)
    before = await snapshot(served.hub.client)
    for _ in range(2):
        status, again = await post_decision(http, served, first("eng-1"), body)
        assert status == 200
        assert again == {**accepted, "repeated": True}
    assert served.runtime.launch_calls == launched
    assert keys.execution_id(SWARM, "eng-1", 3) not in served.runtime.specs
    after = await snapshot(served.hub.client)
    assert {k: v for k, v in after.items() if not k.endswith(b":events")} == {
        k: v for k, v in before.items() if not k.endswith(b":events")
    }


async def test_a_different_choice_is_refused_and_changes_nothing(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """Spec: "A different choice after a decision was accepted is refused with no recovery
    decision is pending for this attempt, and the accepted decision, fence, directive and
    ledger row stay as they were"."""
    status, _ = await post_decision(http, served, first("eng-1"), {"choice": "resume"})
    assert status == 200
    before = await snapshot(served.hub.client)
    status, body = await post_decision(http, served, first("eng-1"), {"choice": "fresh"})
    assert (status, body) == (409, {"reason": NOT_PENDING, "message": NOT_PENDING})
    assert await snapshot(served.hub.client) == before


async def test_resume_without_a_checkpoint_is_refused_and_the_seat_keeps_waiting(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """Spec: "With no usable checkpoint the request is refused with no complete compatible
    checkpoint to resume from and the seat keeps waiting"."""
    status, body = await post_decision(http, served, first("eng-3"), {"choice": "resume"})
    assert status == 409
    assert body == {"reason": NO_CHECKPOINT, "message": NO_CHECKPOINT}
    decision = await reading.decision(served.hub.client, SWARM, first("eng-3"))
    assert decision is not None and decision.state is records.DecisionState.RECOVERY_PENDING


async def test_a_choice_for_an_attempt_that_was_never_fenced_is_not_pending(
    redis_client: aioredis.Redis, http: aiohttp.ClientSession
) -> None:
    """Spec: a choice is only accepted for a fenced attempt; otherwise `no recovery decision is
    pending for this attempt`."""
    runtime, source = harness.FakeRuntime(), harness.FakeCheckpoints()
    hub = new_hub(redis_client, runtime, source)
    try:
        await hub.wait_until_leader(SWARM)
        await (await hub.recovery(SWARM)).apply_swarm(harness.document(automation=False))
        async with serving(hub) as url:
            found = Served(hub, runtime, source, url)
            status, body = await post_decision(http, found, first("eng-1"), {"choice": "fresh"})
    finally:
        await hub.stop()
    assert (status, body) == (409, {"reason": NOT_PENDING, "message": NOT_PENDING})


# Who may choose.


@pytest.mark.parametrize(
    ("caller", "agent"),
    [
        ("worker credential", "master@example-1"),
        ("fenced worker credential", "master@example-1"),
        ("master naming an agent that is not its own", "master@example-9"),
        ("display-name spoof: another master claiming master@example-1", "master@example-1"),
        ("master naming no agent", None),
    ],
)
async def test_anyone_else_is_refused_forbidden_scope(
    served: Served, http: aiohttp.ClientSession, caller: str, agent: str | None
) -> None:
    """Spec: "Only the operator, or a registered master of the swarm whose credential is bound
    to the named agent, can choose. Any other caller is refused with forbidden_scope; the
    choice is never inferred from a display name." Nothing is written."""
    if caller == "worker credential":
        token = await served.worker_token(first("eng-2"))
    elif caller == "fenced worker credential":
        token = await served.worker_token(first("eng-1"))
    elif caller.startswith("display-name spoof"):
        token = harness.OTHER_SECRET
    else:
        token = harness.MASTER_SECRET
    body: dict[str, Any] = {"choice": "fresh"}
    if agent is not None:
        body["agent"] = agent
    before = await snapshot(served.hub.client)
    status, answer = await post_decision(http, served, first("eng-1"), body, token)
    assert (status, answer) == (403, {"reason": "forbidden_scope", "message": "forbidden_scope"})
    assert await snapshot(served.hub.client) == before


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer ",
        "Basic b3BlcmF0b3I6eA==",
        "Bearer not-a-credential",
        f"Token {OPERATOR_TOKEN}",
    ],
)
async def test_without_a_valid_credential_the_caller_is_unauthenticated(
    served: Served, http: aiohttp.ClientSession, header: str | None
) -> None:
    """Credentials travel as `Authorization: Bearer …`; none, another scheme or an unknown
    token is 401 and nothing is written."""
    headers = {"Authorization": header} if header is not None else {}
    before = await snapshot(served.hub.client)
    async with http.post(
        f"{served.url}/v1/executions/{first('eng-1')}/restore-decision",
        json={"choice": "fresh"},
        headers=headers,
    ) as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"
        body = await response.json()
    assert body["reason"] == "unauthenticated" and body["message"].startswith("credential ")
    assert await snapshot(served.hub.client) == before


# Malformed and unknown.


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "the request body is not JSON"),
        (b"\xff\xfe", "the request body is not JSON"),
        (b"", "the request body is not JSON"),
        (["resume"], "the request body must be a JSON object"),
        ({}, 'choice must be "resume" or "fresh"'),
        ({"choice": "maybe"}, 'choice must be "resume" or "fresh"'),
        ({"choice": "RESUME"}, 'choice must be "resume" or "fresh"'),
        ({"choice": 1}, 'choice must be "resume" or "fresh"'),
        ({"choice": "fresh", "agent": 7}, "agent must be a non-empty string"),
        ({"choice": "fresh", "agent": " "}, "agent must be a non-empty string"),
        ({"choice": "fresh", "agnet": "master@example-1"}, "unknown field: agnet"),
    ],
)
async def test_a_malformed_request_is_400(
    served: Served, http: aiohttp.ClientSession, body: Any, message: str
) -> None:
    """A body that is not JSON, or a choice other than resume or fresh, is 400 `malformed`
    and writes nothing."""
    before = await snapshot(served.hub.client)
    status, answer = await post_decision(http, served, first("eng-1"), body)
    assert (status, answer) == (400, {"reason": "malformed", "message": message})
    assert await snapshot(served.hub.client) == before


async def test_an_oversized_body_is_413(served: Served, http: aiohttp.ClientSession) -> None:
    """A body far larger than any decision is refused as too large, unread."""
    big = json.dumps({"choice": "fresh", "agent": "x" * (http_api.MAX_BODY_BYTES + 1)})
    status, answer = await post_decision(http, served, first("eng-1"), big)
    assert status == 413 and answer["reason"] == "too_large"


@pytest.mark.parametrize(
    ("execution", "reason"),
    [
        (keys.execution_id(SWARM, "eng-9", 1), "execution_not_found"),
        (keys.execution_id(SWARM, "eng-1", 9), "execution_not_found"),
        (keys.execution_id("nowhere", "eng-1", 1), "swarm_not_found"),
        ("e-42", "execution_not_found"),
        ("example.eng-1.x", "execution_not_found"),
    ],
)
async def test_an_unknown_execution_is_404(
    served: Served, http: aiohttp.ClientSession, execution: str, reason: str
) -> None:
    """The swarm comes from the execution id; an id that names no attempt of an applied swarm
    is 404."""
    status, answer = await post_decision(http, served, execution, {"choice": "fresh"})
    assert status == 404 and answer["reason"] == reason


async def test_unknown_routes_and_methods_answer_json(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """Every error is `{"reason", "message"}` JSON, never an HTML page or a traceback. (An
    authenticated caller; without a credential every /v1/ call is 401 first.)"""
    assert (await get(http, f"{served.url}/v1/nothing-here"))[0] == 404
    async with http.get(
        f"{served.url}/v1/executions/{first('eng-1')}/restore-decision",
        headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
    ) as r:
        assert r.status == 405 and "POST" in r.headers["Allow"]
        assert (await r.json())["reason"] == "method_not_allowed"


class _BrokenCheckpoints(harness.FakeCheckpoints):
    """A checkpoint source that fails with a message that must reach no one."""

    broken = False

    async def newest_compatible(
        self, scope: records.AttemptScope, compatibility_key: str
    ) -> Sequence[Any]:
        if self.broken:
            raise RuntimeError("secret-value-in-message")
        return await super().newest_compatible(scope, compatibility_key)


async def test_an_unexpected_failure_is_500_logged_by_type_only(
    redis_client: aioredis.Redis, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Secrets never reach logs or answers: an unexpected exception is `500 internal error`,
    and the log names its type only."""
    source = _BrokenCheckpoints()
    async with awaiting_swarm(redis_client, checkpoints=source) as found:
        source.broken = True
        with caplog.at_level(logging.ERROR, logger="services.controller.http"):
            status, answer = await post_decision(http, found, first("eng-1"), {"choice": "resume"})
    assert (status, answer) == (500, {"reason": "internal", "message": "internal error"})
    failed = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "http_failed"]
    assert len(failed) == 1
    assert failed[0].fields["exception"] == "RuntimeError"  # type: ignore[attr-defined]
    assert "secret-value-in-message" not in caplog.text


# The pause switch.


@pytest.mark.parametrize(
    ("who", "expected"),
    [("operator", 200), ("master", 403), ("worker", 403), ("nobody", 401)],
)
async def test_only_the_operator_unpauses(
    served: Served, http: aiohttp.ClientSession, who: str, expected: int
) -> None:
    """Issue 20 part 5: `POST /v1/swarms/{swarm}/unpause` clears the swarm's recovery-paused
    key (spec, Rollback) for the operator only; anyone else gets the refusal `UnpauseRecovery`
    gives, forbidden_scope, and the swarm stays paused. (The worker is a live replacement:
    a fenced attempt's credential is refused before any route.)"""
    status, answer = await post_decision(http, served, first("eng-3"), {"choice": "fresh"})
    assert status == 200, answer
    await (await served.recovery()).pause()
    token = {
        "operator": OPERATOR_TOKEN,
        "master": harness.MASTER_SECRET,
        "worker": await served.worker_token(second("eng-3")),
        "nobody": None,
    }[who]
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with http.post(f"{served.url}/v1/swarms/{SWARM}/unpause", headers=headers) as r:
        status, body = r.status, await r.json()
    assert status == expected, body
    if expected == 200:
        assert body == {"swarm": SWARM, "paused": False}
    elif expected == 403:
        assert body == {"reason": "forbidden_scope", "message": "forbidden_scope"}
    assert await reading.paused(served.hub.client, SWARM) is (expected != 200)


async def test_unpause_checks_the_credential_before_the_swarm_it_names(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """The credential first, then the swarm named: without one, an unknown swarm is 401 like a
    known one; with the operator's, unknown is 404 and a name that cannot be a swarm 400."""
    for name in (SWARM, "nowhere"):
        async with http.post(f"{served.url}/v1/swarms/{name}/unpause") as response:
            assert response.status == 401
    for name, expected in (("nowhere", 404), ("No_Such", 400)):
        async with http.post(
            f"{served.url}/v1/swarms/{name}/unpause",
            headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
        ) as response:
            assert response.status == expected


# Observing recovery.


async def test_the_swarm_panel_counts_each_swarm_the_caller_may_read(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """Spec: "The ledger, swarm status and the swarm panel show that kind" (the continuity).
    `GET /v1/swarms`: every swarm (for the operator) with its seats counted by state and by
    continuity (native, reconstructed, fresh, pending), paused or not."""
    status, answer = await post_decision(http, served, first("eng-1"), {"choice": "resume"})
    assert status == 200, answer
    recovery = await served.recovery()
    await recovery.pause()
    replacement = harness.Harness(served.hub.client, served.runtime, served.checkpoints, recovery)
    await recovery.report_restore(
        await replacement.worker(second("eng-1")),
        recovery=directives.Continuity.NATIVE,
        checkpoint_id="ckpt-7",
        session_id="sess-1",
        watermark=412,
    )
    status, body = await get(http, f"{served.url}/v1/swarms")
    assert status == 200, body
    assert body == {
        "caller": "operator",
        "swarms": [
            {
                "swarm": SWARM,
                "paused": True,
                "seats": 3,
                "states": {
                    "running": 1,
                    "fenced": 0,
                    "awaiting_decision": 2,
                    "replacing": 0,
                    "restore_refused": 0,
                },
                "continuity": {"native": 1, "reconstructed": 0, "fresh": 0, "pending": 2},
            }
        ],
    }
    # A master reads its own swarm; a (live) worker's credential reads none; none is 401.
    status, body = await get(http, f"{served.url}/v1/swarms", harness.MASTER_SECRET)
    assert status == 200 and body["caller"] == "master"
    assert [row["swarm"] for row in body["swarms"]] == [SWARM]
    worker = await served.worker_token(second("eng-1"))
    assert (await get(http, f"{served.url}/v1/swarms", worker))[0] == 403
    assert (await get(http, f"{served.url}/v1/swarms", None))[0] == 401


async def test_status_lists_tasks_seats_and_handoff_cards(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """Spec: status "lists the same cards under handoffs, each with checkpoint,
    resume_available, resume_label and continuity (pending until the replacement reports)";
    the task row reads recovery_pending while the replacement is pending."""
    status, body = await get(http, f"{served.url}/v1/swarms/{SWARM}/status")
    assert status == 200
    assert set(body) == {
        "swarm",
        "paused",
        "runtime",
        "caller",
        "tasks",
        "seats",
        "handoffs",
        "restore_outcomes_by_type",
    }
    assert (body["swarm"], body["paused"], body["runtime"]) == (SWARM, False, "local")
    assert body["caller"] == "operator"
    assert [t["awaiting"] for t in body["tasks"]] == [records.RECOVERY_PENDING] * 3
    assert set(body["tasks"][0]) == {"task_id", "seat", "text", "awaiting", "recovery"}
    assert [s["seat"] for s in body["seats"]] == list(SEATS)
    assert set(body["seats"][0]) == {"seat", "execution_id", "generation", "state"}
    cards = {c["seat"]: c for c in body["handoffs"]}
    fence = await reading.fence(served.hub.client, SWARM, first("eng-1"))
    assert fence is not None
    assert cards["eng-1"] == {
        "seat": "eng-1",
        "execution_id": first("eng-1"),
        "failure": "oom_killed",
        "fenced_at": fence.fenced_at,
        "reason": NATIVE_REASON,
        "checkpoint": "ckpt-7",
        "resume_available": True,
        "resume_label": "Resume native",
        "continuity": "pending",
        "decision": records.RECOVERY_PENDING,
        "replacement_execution_id": None,
        "refusal": None,
    }
    assert cards["eng-2"]["reason"] == CONTEXT_REASON
    assert cards["eng-2"]["resume_label"] == "Continue from context"
    assert (cards["eng-3"]["reason"], cards["eng-3"]["resume_available"]) == ("node_lost", False)
    assert cards["eng-3"]["checkpoint"] is None
    assert body["restore_outcomes_by_type"] == {"native": 0, "reconstructed": 0, "fresh": 0}


async def test_status_shows_the_reported_continuity_and_metrics_count_it(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """Spec: the card shows the continuity type once reported; "Recovery.
    restore_outcomes_by_type counts verified outcomes as native, reconstructed and fresh", and
    /metrics exposes it as agentihooks_restore_outcomes_total."""
    status, _ = await post_decision(http, served, first("eng-1"), {"choice": "resume"})
    assert status == 200
    recovery = await served.recovery()
    replacement = harness.Harness(served.hub.client, served.runtime, served.checkpoints, recovery)
    await recovery.report_restore(
        await replacement.worker(second("eng-1")),
        recovery=directives.Continuity.NATIVE,
        checkpoint_id="ckpt-7",
        session_id="sess-1",
        watermark=412,
    )
    _, body = await get(http, f"{served.url}/v1/swarms/{SWARM}/status")
    card = next(c for c in body["handoffs"] if c["seat"] == "eng-1")
    assert (card["continuity"], card["decision"]) == ("native", "accepted")
    assert card["replacement_execution_id"] == second("eng-1")
    task = next(t for t in body["tasks"] if t["seat"] == "eng-1")
    assert task["awaiting"] == "worker" and task["recovery"]["status"] == "verified"
    assert body["restore_outcomes_by_type"]["native"] == 1
    async with http.get(f"{served.url}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await response.text()
    assert 'agentihooks_restore_outcomes_total{swarm="example",type="native"} 1.0' in text
    assert 'agentihooks_restore_outcomes_total{swarm="example",type="fresh"} 0.0' in text


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("operator", 200),
        ("master", 200),
        ("worker", 403),
        ("nobody", 401),
    ],
)
async def test_status_is_for_the_operator_and_masters(
    served: Served, http: aiohttp.ClientSession, who: str, expected: int
) -> None:
    """DESIGN 2: `GetSwarmStatus` (and its HTTP form) is for the operator and masters."""
    token = {
        "operator": OPERATOR_TOKEN,
        "master": harness.MASTER_SECRET,
        "worker": await served.worker_token(first("eng-2")),
        "nobody": None,
    }[who]
    status, body = await get(http, f"{served.url}/v1/swarms/{SWARM}/status", token)
    assert status == expected, body
    if expected == 403:
        assert body == {"reason": "forbidden_scope", "message": "forbidden_scope"}
    if expected == 200:
        assert body["caller"] == who


async def test_status_of_an_unknown_or_malformed_swarm(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """A swarm that was never applied is 404; a name that cannot be a swarm is 400."""
    assert (await get(http, f"{served.url}/v1/swarms/nowhere/status"))[0] == 404
    assert (await get(http, f"{served.url}/v1/swarms/No_Such/status"))[0] == 400


async def test_health_readiness_and_metrics_need_no_credential(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """/healthz is 200 while serving; /readyz is 200 while the replica serves; /metrics is
    open."""
    for path in ("/healthz", "/readyz", "/metrics"):
        async with http.get(served.url + path) as response:
            assert response.status == 200, path


async def test_a_replica_without_the_lease_serves_and_refuses_what_it_cannot_forward(
    served: Served, http: aiohttp.ClientSession
) -> None:
    """A replica that does not hold the swarm's lease is ready (it serves every call) and
    serves reads; a decision or an unpause it cannot forward (the holder advertised no
    address) is refused with 503 `not_leader` and nothing is written."""
    standby = new_hub(served.hub.client, served.runtime, served.checkpoints, holder="standby")
    try:
        await standby.recovery(SWARM)
        assert standby.ready()
        async with serving(standby) as url:
            async with http.get(f"{url}/readyz") as response:
                assert response.status == 200
            async with http.get(f"{url}/healthz") as response:
                assert response.status == 200
            before = await snapshot(served.hub.client)
            on_standby = dataclasses.replace(served, url=url)
            status, body = await post_decision(
                http, on_standby, first("eng-1"), {"choice": "resume"}
            )
            assert (status, body["reason"]) == (503, "not_leader")
            async with http.post(
                f"{url}/v1/swarms/{SWARM}/unpause",
                headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
            ) as response:
                assert response.status == 503
                assert (await response.json())["reason"] == "not_leader"
            assert await snapshot(served.hub.client) == before
            assert second("eng-1") not in served.runtime.specs
            status, read = await get(http, f"{url}/v1/swarms/{SWARM}/status")
            assert status == 200 and len(read["handoffs"]) == 3
    finally:
        await standby.stop()
    assert served.hub.ready()


async def test_a_started_hub_is_ready_once_it_has_joined_its_peers_with_no_swarm(
    redis_client: aioredis.Redis, http: aiohttp.ClientSession
) -> None:
    """Readiness means serving, not holding leases: a started replica with no swarm at all
    answers /readyz 200 once its first heartbeat registered it among the controllers."""
    hub = new_hub(redis_client, harness.FakeRuntime(), None)
    try:
        await hub.start()
        await asyncio.wait_for(hub.sharing.joined.wait(), 60)
        assert hub.holder in (await hub.sharing.beat()).peers
        async with serving(hub) as url, http.get(f"{url}/readyz") as response:
            assert response.status == 200, await response.text()
    finally:
        await hub.stop()


# Pages.


@pytest.mark.parametrize(
    ("path", "marker"),
    [("/", "Swarm panel"), (f"/swarms/{SWARM}/ledger", "Handoff outcomes")],
    ids=["panel", "ledger"],
)
async def test_pages_are_served_under_a_strict_policy_and_hold_no_swarm_data(
    served: Served, http: aiohttp.ClientSession, path: str, marker: str
) -> None:
    """The swarm panel (`/`) and the ledger page need no external asset: each policy allows
    only the page's own inline script and style and calls to this origin. Issue 20 part 5: the
    panel needs the credential too: served without one, a page names no swarm and holds no
    data (it reads `/v1/` with the tab's credential)."""
    async with http.get(f"{served.url}{path}") as response:
        assert response.status == 200 and response.content_type == "text/html"
        policy = response.headers["Content-Security-Policy"]
        text = await response.text()
    assert marker in text and "innerHTML" not in text and "@include" not in text
    assert "AGENTIHOOKS_OPERATOR_TOKEN" in text  # the sign-in prompt says where to get it
    assert f">{SWARM}<" not in text and "eng-1" not in text
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert "script-src 'sha256-" in policy and "style-src 'sha256-" in policy
    assert "unsafe-inline" not in policy


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("nowhere", "nowhere"),
        ("No_Such", "No_Such"),
        ('<img src=x onerror="alert(1)">', "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"),
    ],
    ids=["unknown", "not-a-name", "markup"],
)
async def test_an_unknown_swarm_ledger_is_a_readable_404_page(
    served: Served, http: aiohttp.ClientSession, name: str, shown: str
) -> None:
    """Issue 20 part 5: an unknown swarm's ledger "must answer a readable page (404) that says
    no swarm named that exists and links back to the panel. Escape any echoed name"."""
    quoted = urllib.parse.quote(name, safe="")
    async with http.get(f"{served.url}/swarms/{quoted}/ledger") as response:
        assert response.status == 404 and response.content_type == "text/html"
        policy = response.headers["Content-Security-Policy"]
        text = await response.text()
    assert "No swarm named <span" in text and f">{shown}</span> exists" in text
    assert '<a href="/" data-testid="panel-link">Back to the swarm panel</a>' in text
    assert "<img" not in text and "script-src" not in policy


def test_refusal_kinds_map_to_one_status_each() -> None:
    """One error mapper: every refusal kind has exactly one HTTP status."""
    assert set(http_api.STATUS) == set(errors.Kind)
    assert http_api.STATUS[errors.Kind.REFUSED] == 409
    assert http_api.STATUS[errors.Kind.UNAVAILABLE] == 503


async def test_start_http_refuses_a_bad_address(served: Served) -> None:
    """The HTTP address is HOST:PORT."""
    with pytest.raises(ValueError, match="HOST:PORT"):
        await http_api.start_http(served.hub, "localhost")
