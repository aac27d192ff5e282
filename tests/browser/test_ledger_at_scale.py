"""The ledger page and the swarm panel of a 1,000-seat swarm, in headless Chromium, against the
real controller (tests/support/controller_server.py: the Recovery gRPC service, the HTTP API,
real redis-server, the Kubernetes API emulator through kubernetes-asyncio). The swarm is built
only through the controller's APIs: applied, failed as the kubelet reports it, decided and
reported as the master, the operator and each replacement's restorer would.

Issue 20 part 5: pending seats first and highlighted, counts per state, a filter, failure
times, a confirmation before a decision is sent, unpause for the operator, a prompt before a
credential is entered, the swarm panel, a readable page for an unknown swarm, and a refresh
that touches only what changed. Responsiveness is asserted by structure (what a refresh
changed, and that each card stays the same element), never by time.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import pathlib
import urllib.parse
from collections.abc import AsyncIterator, Iterator

import pytest
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2
from playwright.async_api import Browser, Locator, Page, expect

from services.controller.api import http_api
from services.controller.state import keys, reading, records
from tests.support import browser, ports, redis_server
from tests.support import controller_server as cs
from tests.support.kube.apiserver import emulator as k8s_emulator

SWARM = "example"
SEATS = tuple(f"eng-{n:04d}" for n in range(1, 1001))
FENCED = SEATS[900:980]
"""eng-0901 … eng-0980 fail; every other seat keeps its first attempt."""
DECIDED, PENDING = FENCED[:60], FENCED[60:]
"""eng-0901 … eng-0960 are decided through the API; eng-0961 … eng-0980 await a decision (last
in seat order, so "pending first" is the page's doing)."""
NATIVE_SEAT, CONTEXT_SEAT = "eng-0901", "eng-0902"
"""Decided resume: natively, and from context."""
REPORTED_FRESH = ("eng-0903", "eng-0904", "eng-0905")
OFFERS_NATIVE, OFFERS_CONTEXT = "eng-0961", "eng-0962"
"""Pending seats whose cards offer `Resume native` and `Continue from context`."""
SESSION = "0b0c7a1e-1111-2222-3333-444455556666"

STATES = {
    "awaiting_decision": 20,
    "restore_refused": 0,
    "fenced": 0,
    "replacing": 55,  # decided; the replacement has not reported
    "running": 925,  # never failed (920), or replaced and reported (5)
}
CONTINUITY = {"native": 1, "reconstructed": 1, "fresh": 3, "pending": 75}
PAGE_SIZE = 50
POLL_WAIT_MS = 10_000
"""Long enough for a few of the page's 2 s polls of a 1,000-seat status."""


def first(seat: str) -> str:
    return keys.execution_id(SWARM, seat, 1)


def second(seat: str) -> str:
    return keys.execution_id(SWARM, seat, 2)


def outcome(
    execution_id: str,
    recovery: types_pb2.Continuity.ValueType,
    checkpoint_id: str = "",
    session_id: str = "",
    watermark: int | None = None,
) -> Iterator[pb.RestoreReport]:
    """What a replacement's restorer reports: the one outcome."""
    reported = types_pb2.RestoreOutcome(
        execution_id=execution_id,
        recovery=recovery,
        checkpoint_id=checkpoint_id,
        session_id=session_id,
    )
    if watermark is not None:
        reported.watermark = watermark
    yield pb.RestoreReport(outcome=reported)


async def decide(ctl: cs.Controller, seat: str, choice: types_pb2.Choice.ValueType) -> None:
    await ctl.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm=SWARM, execution_id=first(seat), choice=choice),
        metadata=cs.OPERATOR,
    )


async def report(ctl: cs.Controller, seat: str, stream: Iterator[pb.RestoreReport]) -> None:
    await cs.wait_for_pod(ctl, second(seat))
    token = cs.worker_credential(ctl, second(seat))
    await ctl.stub.ReportRestore(stream, metadata=cs.md(token))  # type: ignore[arg-type]


def pod_names(ctl: cs.Controller) -> dict[str, str]:
    """The name of each attempt's Pod, by execution id (one listing of the emulator)."""
    out = {}
    for pod in ctl.pods():
        execution = pod["metadata"].get("labels", {}).get("agentihooks.io/execution")
        if execution is not None:
            out[execution] = pod["metadata"]["name"]
    return out


async def thousand_seats(ctl: cs.Controller) -> None:
    """Apply 1,000 seats (restore automation off), fail `FENCED`, decide `DECIDED` and report
    the outcomes of `NATIVE_SEAT`, `CONTEXT_SEAT` and `REPORTED_FRESH`; wait until the status
    counts `STATES` and `CONTINUITY`."""
    document = json.loads(cs.document(seats=SEATS, automation=False))
    document["accounts"] = [{"name": "acct-a", "slots": 2 * len(SEATS)}]
    await ctl.apply(json.dumps(document))

    async def launched() -> dict[str, str]:
        pods = pod_names(ctl)
        assert all(first(seat) in pods for seat in FENCED), len(pods)
        return pods

    pods = await ports.eventually(launched, timeout=60)
    # Native sessions and checkpoints, captured before the failures.
    for seat in (NATIVE_SEAT, OFFERS_NATIVE):
        await cs.wait_for_pod(ctl, first(seat))
        await ctl.stub.ReportCapture(
            pb.ReportCaptureRequest(native_session_id=SESSION, archive_watermark=400),
            metadata=cs.md(cs.worker_credential(ctl, first(seat))),
        )
        await cs.put_checkpoint(ctl.checkpoint_root, seat, session=SESSION)
    for seat in (CONTEXT_SEAT, OFFERS_CONTEXT):
        await cs.put_checkpoint(
            ctl.checkpoint_root, seat, checkpoint_id="ckpt-3", session=None, watermark=300
        )
    for n, seat in enumerate(FENCED):
        failed = cs.terminated("OOMKilled", 137) if n % 2 else cs.terminated("Error", 1)
        ctl.emulator.set_pod_status(cs.NAMESPACE, pods[first(seat)], failed)

    async def all_pending() -> None:
        status = await ctl.status()
        assert len(status.handoffs) == len(FENCED), len(status.handoffs)
        assert {c.decision for c in status.handoffs} == {records.RECOVERY_PENDING}

    await ports.eventually(all_pending, timeout=60)
    for seat in DECIDED:
        resume = seat in (NATIVE_SEAT, CONTEXT_SEAT)
        await decide(ctl, seat, types_pb2.CHOICE_RESUME if resume else types_pb2.CHOICE_FRESH)
    await report(
        ctl,
        NATIVE_SEAT,
        outcome(second(NATIVE_SEAT), types_pb2.CONTINUITY_NATIVE, "ckpt-7", SESSION, 412),
    )
    await report(
        ctl,
        CONTEXT_SEAT,
        outcome(second(CONTEXT_SEAT), types_pb2.CONTINUITY_RECONSTRUCTED, "ckpt-3", "", 300),
    )
    for seat in REPORTED_FRESH:
        await report(ctl, seat, outcome(second(seat), types_pb2.CONTINUITY_FRESH))

    async def counted() -> None:
        status = await ctl.status()
        states = collections.Counter(s.state for s in status.seats)
        assert {s: states[s] for s in STATES} == STATES, states
        continuity = collections.Counter(c.continuity for c in status.handoffs)
        assert dict(continuity) == CONTINUITY, continuity

    await ports.eventually(counted, timeout=30)


@dataclasses.dataclass
class Site:
    ctl: cs.Controller
    url: str

    def ledger(self, swarm: str = SWARM) -> str:
        return f"{self.url}/swarms/{swarm}/ledger"


LEASE_TTL_MS = 60_000
"""The swarm lease's time to live. The test's controller, emulator and browser driver share one
event loop, which applying 1,000 seats keeps busy for seconds: with the fixture's 2 s lease the
renewal can come too late and a call in between is refused `not_leader`."""


@pytest.fixture
async def site(
    tmp_path: pathlib.Path,
    redis_server: redis_server.RedisServer,
    k8s_emulator: k8s_emulator.K8sEmulator,
) -> AsyncIterator[Site]:
    """A controller (empty Redis, a local checkpoint folder) serving its HTTP API and pages
    on a free loopback port."""
    root = await cs.empty_state(redis_server.url, tmp_path)
    ctl, server = await cs.start_controller(
        redis_server.url, k8s_emulator, root, lease_ttl_ms=LEASE_TTL_MS
    )
    try:
        runner, port = await http_api.start_http(ctl.hub, "127.0.0.1:0")
        try:
            yield Site(ctl, f"http://127.0.0.1:{port}")
        finally:
            await runner.cleanup()
    finally:
        await cs.stop_controller(ctl, server)


async def sign_in(page: Page, token: str) -> None:
    await expect(page.get_by_test_id("sign-in")).to_be_visible()
    await page.get_by_label("Controller credential").fill(token)
    await page.get_by_role("button", name="Use credential").click()
    await expect(page.get_by_test_id("sign-in")).to_be_hidden()


async def polls(page: Page) -> int:
    return int(await page.get_by_test_id("updated").get_attribute("data-polls") or "0")


async def next_polls(page: Page, count: int = 2) -> None:
    """Wait until the page has read and shown the status `count` more times."""
    after = await polls(page) + count
    await page.wait_for_function(
        "n => Number(document.querySelector('[data-testid=updated]').dataset.polls) >= n",
        arg=after,
        timeout=POLL_WAIT_MS,
    )


def utc(stamp: str) -> str:
    """How the page writes an RFC 3339 time: `2026-12-02 10:00:03 UTC`."""
    return stamp.replace("T", " ").replace("Z", " UTC")


def cards(page: Page) -> Locator:
    return page.get_by_test_id("handoffs").locator("article")


def task_rows(page: Page) -> Locator:
    return page.get_by_test_id("tasks").locator("tbody tr")


async def shown_seats(locator: Locator) -> list[str]:
    seats: list[str] = await locator.evaluate_all("nodes => nodes.map(n => n.dataset.seat)")
    return seats


async def test_a_thousand_seats_show_pending_first_counted_filtered_with_failure_times(
    site: Site, tab: browser.Tab, tmp_path: pathlib.Path
) -> None:
    """Issue 20 part 5: "pending seats (awaiting a decision) first and highlighted so a pending
    card does not look like every accepted one; counts per state at the top; a filter (by state
    and by seat name text); failure time on each card"; "before a token is entered the page
    shows a clear prompt of what to do"; a 1,000-seat swarm is not a wall of cards. Spec:
    "A seat awaiting a decision shows in the Handoff outcomes panel of the ledger page"."""
    await thousand_seats(site.ctl)
    page = tab.page
    await page.goto(site.ledger())

    # Before a credential: a prompt saying what to paste and where it comes from; no empty
    # table headers.
    prompt = page.get_by_test_id("sign-in")
    await expect(prompt).to_be_visible()
    await expect(prompt).to_contain_text("operator token")
    await expect(prompt).to_contain_text("AGENTIHOOKS_OPERATOR_TOKEN")
    await expect(prompt).to_contain_text("master's credential")
    await expect(page.get_by_test_id("ledger")).to_be_hidden()
    assert await page.locator("th:visible, article:visible").count() == 0
    await browser.screenshot(page, tmp_path / "ledger-sign-in.png")

    await sign_in(page, cs.OPERATOR_TOKEN)
    await expect(page.get_by_test_id("count-seats")).to_have_text("1000")
    for state, count in STATES.items():
        await expect(page.get_by_test_id(f"count-{state}")).to_have_text(str(count))

    # Not a wall: the first PAGE_SIZE cards and task rows, and how many more there are.
    await expect(cards(page)).to_have_count(PAGE_SIZE)
    await expect(page.get_by_test_id("cards-shown")).to_have_text("Showing 50 of 80 cards.")
    await expect(task_rows(page)).to_have_count(PAGE_SIZE)
    await expect(page.get_by_test_id("tasks-shown")).to_have_text("Showing 50 of 1000 tasks.")

    # Pending first (the seats last in seat order), then the others in seat order.
    shown = await shown_seats(cards(page))
    assert shown == [*PENDING, *DECIDED[: PAGE_SIZE - len(PENDING)]]
    assert (await shown_seats(task_rows(page)))[: len(PENDING)] == list(PENDING)
    # Highlighted: a pending card is marked, badged and drawn unlike an accepted one.
    pending_card, accepted_card = (
        page.get_by_test_id(f"card-{PENDING[0]}"),
        page.get_by_test_id(f"card-{DECIDED[0]}"),
    )
    await expect(pending_card).to_have_class("card card-pending")
    await expect(pending_card.get_by_test_id("card-badge")).to_have_text("Awaiting decision")
    await expect(accepted_card).to_have_class("card")
    await expect(accepted_card.get_by_test_id("card-badge")).to_be_hidden()
    style = "n => [getComputedStyle(n).borderLeftWidth, getComputedStyle(n).backgroundColor]"
    assert await pending_card.evaluate(style) != await accepted_card.evaluate(style)
    await expect(page.get_by_test_id(f"task-row-t-{PENDING[0]}")).to_have_class("row-pending")
    await expect(page.get_by_test_id(f"card-{OFFERS_NATIVE}").get_by_role("button")).to_have_text(
        ["Resume native", "Fresh"]
    )

    # Each card's failure time: when the controller fenced the attempt, as the fence records it.
    times = await cards(page).evaluate_all(
        "nodes => nodes.map(n => [n.dataset.seat,"
        " n.querySelector('[data-testid=card-fenced-at] time').getAttribute('datetime'),"
        " n.querySelector('[data-testid=card-fenced-at]').textContent])"
    )
    for seat, stamp, text in times:
        fence = await reading.fence(site.ctl.redis, SWARM, first(seat))
        assert fence is not None and (stamp, text) == (fence.fenced_at, utc(fence.fenced_at))
    await browser.screenshot(page, tmp_path / "ledger-1000-seats.png")

    # The filter: by state (the select, or a count at the top) …
    await page.get_by_label("Seat state").select_option("awaiting_decision")
    await expect(cards(page)).to_have_count(len(PENDING))
    assert await shown_seats(cards(page)) == list(PENDING)
    assert await shown_seats(task_rows(page)) == list(PENDING)
    await expect(page.get_by_test_id("cards-shown")).to_have_text(
        "Showing 20 of 20 cards matching the filter (80 in all)."
    )
    await page.get_by_test_id("state-running").click()
    await expect(page.get_by_label("Seat state")).to_have_value("running")
    await expect(page.get_by_test_id("state-running")).to_have_attribute("aria-pressed", "true")
    await expect(cards(page)).to_have_count(len(REPORTED_FRESH) + 2)
    assert await shown_seats(cards(page)) == [NATIVE_SEAT, CONTEXT_SEAT, *REPORTED_FRESH]
    await expect(page.get_by_test_id("tasks-shown")).to_have_text(
        "Showing 50 of 925 tasks matching the filter (1000 in all)."
    )
    # … by seat name text (any case) …
    await page.get_by_label("Seat state").select_option("")
    await page.get_by_label("Seat name contains").fill("ENG-097")
    expected = [f"eng-{n:04d}" for n in range(970, 980)]
    await expect(cards(page)).to_have_count(len(expected))
    assert await shown_seats(cards(page)) == expected
    assert await shown_seats(task_rows(page)) == expected
    # … and both; more on request.
    await page.get_by_label("Seat name contains").fill("eng-09")
    await page.get_by_label("Seat state").select_option("replacing")
    await expect(page.get_by_test_id("cards-shown")).to_have_text(
        "Showing 50 of 55 cards matching the filter (80 in all)."
    )
    await page.get_by_test_id("more-cards").click()
    await expect(cards(page)).to_have_count(55)
    await expect(page.get_by_test_id("more-cards")).to_be_hidden()
    await page.get_by_label("Seat name contains").fill("no-such-seat")
    await expect(cards(page)).to_have_count(0)
    await expect(page.get_by_test_id("cards-shown")).to_have_text(
        "No cards match the filter (80 in all)."
    )
    assert not any(cs.OPERATOR_TOKEN in line for line in tab.console), tab.console


async def test_the_swarm_panel_counts_seats_by_state_and_continuity(
    site: Site, tab: browser.Tab, tmp_path: pathlib.Path
) -> None:
    """Spec: "The ledger, swarm status and the swarm panel show that kind" (native,
    reconstructed, fresh; pending until the replacement reports). Issue 20 part 5: `/` is the
    swarm panel: every swarm with its seats counted by state and by continuity, paused or not,
    each linking to its ledger; it needs the credential too (the same prompt)."""
    await thousand_seats(site.ctl)
    small = json.loads(cs.document("small", seats=("eng-1", "eng-2")))
    small["masters"] = [{"agent": "master@small-1", "credential": "small-master-credential-01"}]
    await site.ctl.apply(json.dumps(small))
    await site.ctl.stub.PauseRecovery(pb.PauseRecoveryRequest(swarm="small"), metadata=cs.OPERATOR)
    page = tab.page
    await page.goto(f"{site.url}/")
    await expect(page.get_by_test_id("sign-in")).to_contain_text("AGENTIHOOKS_OPERATOR_TOKEN")
    await expect(page.get_by_test_id("panel")).to_be_hidden()
    await sign_in(page, cs.OPERATOR_TOKEN)

    row = page.get_by_test_id(f"swarm-{SWARM}")
    await expect(row.get_by_test_id("seats")).to_have_text("1000")
    for state, count in STATES.items():
        await expect(row.get_by_test_id(f"state-{state}")).to_have_text(str(count))
    for kind, count in CONTINUITY.items():
        await expect(row.get_by_test_id(f"continuity-{kind}")).to_have_text(str(count))
    await expect(row.get_by_test_id("recovery")).to_have_text("not paused")
    other = page.get_by_test_id("swarm-small")
    await expect(other.get_by_test_id("recovery")).to_have_text("paused")
    await expect(other.get_by_test_id("seats")).to_have_text("2")
    await expect(other.get_by_test_id("state-running")).to_have_text("2")
    await expect(page.get_by_test_id("swarms").locator("tbody tr")).to_have_count(2)
    await browser.screenshot(page, tmp_path / "panel.png")

    # A master sees the swarm it is registered in, and no other.
    await page.get_by_role("button", name="Forget credential").click()
    await sign_in(page, cs.MASTER_SECRET)
    await expect(row.get_by_test_id("seats")).to_have_text("1000")
    await expect(page.get_by_test_id("swarms").locator("tbody tr")).to_have_count(1)
    await page.get_by_role("button", name="Forget credential").click()
    await expect(page.get_by_test_id("panel")).to_be_hidden()

    # Each row links to its ledger, where the same tab's credential is used.
    await sign_in(page, cs.OPERATOR_TOKEN)
    await row.get_by_role("link", name=SWARM).click()
    await expect(page).to_have_url(site.ledger())
    await expect(page.get_by_test_id("count-seats")).to_have_text("1000")


async def test_a_refresh_touches_only_the_changed_card_and_keeps_every_element(
    site: Site, tab: browser.Tab, tmp_path: pathlib.Path
) -> None:
    """Issue 20 part 5: at 1,000 seats the page "must not stall on a full re-render at each
    refresh: update only what changed (keyed cards reused across polls)". A refresh with
    nothing changed touches nothing; one with one seat changed touches only that seat's card
    and task row; every card and row stays the same element across polls."""
    await thousand_seats(site.ctl)
    page = tab.page
    await page.goto(site.ledger())
    await sign_in(page, cs.OPERATOR_TOKEN)
    await page.get_by_label("Seat name contains").fill("eng-090")
    changed = "eng-0906"  # decided fresh, its replacement has not reported
    card = page.get_by_test_id(f"card-{changed}")
    await expect(card.get_by_test_id("card-continuity")).to_have_text("pending")
    await expect(cards(page)).to_have_count(9)
    await expect(task_rows(page)).to_have_count(10)  # eng-0900 never failed
    await page.evaluate(
        "() => { window.__cards = [...document.querySelectorAll('[data-testid=handoffs] > *')];"
        " window.__rows = [...document.querySelectorAll('[data-testid=tasks] tbody tr')]; }"
    )
    await browser.record_mutations(page, "[data-testid=handoffs]", "[data-testid=tasks] tbody")

    await next_polls(page)
    assert await browser.mutated_keys(page, "data-seat") == []

    await report(site.ctl, changed, outcome(second(changed), types_pb2.CONTINUITY_FRESH))
    await expect(card.get_by_test_id("card-continuity")).to_have_text("fresh", timeout=POLL_WAIT_MS)
    await expect(page.get_by_test_id(f"task-state-t-{changed}")).to_have_text("running")
    await next_polls(page)
    touched = await browser.mutated_keys(page, "data-seat")
    assert touched and set(touched) == {changed}, touched
    await expect(page.get_by_test_id("count-running")).to_have_text(str(STATES["running"] + 1))

    same = await page.evaluate(
        "() => {"
        " const cards = [...document.querySelectorAll('[data-testid=handoffs] > *')];"
        " const rows = [...document.querySelectorAll('[data-testid=tasks] tbody tr')];"
        " return cards.length === window.__cards.length"
        "   && cards.every((n, i) => n === window.__cards[i])"
        "   && rows.length === window.__rows.length"
        "   && rows.every((n, i) => n === window.__rows[i]); }"
    )
    assert same, "a refresh replaced card or row elements"
    await browser.screenshot(page, tmp_path / "ledger-one-seat-changed.png")


async def test_a_decision_is_sent_only_once_the_operator_confirms_it(
    site: Site, tab: browser.Tab, tmp_path: pathlib.Path
) -> None:
    """Issue 20 part 5: "clicking Resume native / Continue from context / fresh must ask to
    confirm, naming the seat and the choice, and only then POST". Dismissing sends nothing and
    changes nothing; confirming sends the decision. Spec: "The resume control reads Resume
    native when the checkpoint supports native resume and the attempt held a session, and
    Continue from context otherwise"."""
    await thousand_seats(site.ctl)
    page = tab.page
    posted: list[str] = []
    page.on(
        "request",
        lambda r: posted.append(r.url) if r.method == "POST" else None,
    )
    await page.goto(site.ledger())
    await sign_in(page, cs.OPERATOR_TOKEN)
    dialog = page.get_by_test_id("confirm")

    async def state() -> list[object]:
        out: list[object] = []
        for seat in PENDING:
            out.append(await reading.decision(site.ctl.redis, SWARM, first(seat)))
            out.append(await reading.seat(site.ctl.redis, SWARM, seat))
        return out

    before = await state()
    offers = [
        (OFFERS_NATIVE, "Resume native", "The harness reopens the same conversation"),
        (OFFERS_CONTEXT, "Continue from context", "the archived transcript as its opening"),
        (PENDING[2], "Fresh", "A new conversation with no restored state."),
    ]
    for seat, label, meaning in offers:
        button = page.get_by_test_id(f"card-{seat}").get_by_role("button", name=label, exact=True)
        await button.click()
        await expect(dialog).to_be_visible()
        question = dialog.get_by_test_id("confirm-text")
        await expect(question).to_have_text(f"{label} for seat {seat}?")
        await expect(dialog.get_by_test_id("confirm-detail")).to_contain_text(meaning)
        await expect(dialog.get_by_test_id("confirm-detail")).to_contain_text(first(seat))
        if label == "Fresh":
            await page.keyboard.press("Escape")
        else:
            await dialog.get_by_role("button", name="Cancel").click()
        await expect(dialog).to_be_hidden()
    await browser.screenshot(page, tmp_path / "ledger-before-confirming.png")
    await next_polls(page)
    assert posted == []
    assert await state() == before
    await expect(page.get_by_test_id(f"card-{OFFERS_NATIVE}")).to_have_attribute(
        "data-pending", "true"
    )

    card = page.get_by_test_id(f"card-{OFFERS_NATIVE}")
    await card.get_by_role("button", name="Resume native", exact=True).click()
    await browser.screenshot(page, tmp_path / "ledger-confirm.png")
    await dialog.get_by_role("button", name="Send decision").click()
    await expect(card.get_by_test_id("card-message")).to_have_text(
        "Accepted: resume \u2192 native from ckpt-7 at record 412; "
        f"replacement {second(OFFERS_NATIVE)} (generation 2)"
    )
    assert posted == [f"{site.url}/v1/executions/{first(OFFERS_NATIVE)}/restore-decision"]
    decided = await reading.decision(site.ctl.redis, SWARM, first(OFFERS_NATIVE))
    assert decided is not None and decided.state is records.DecisionState.ACCEPTED
    assert decided.choice is records.Choice.RESUME
    assert decided.source is records.DecisionSource.OPERATOR
    assert decided.directive is not None and decided.directive.recovery.value == "native"
    await expect(page.get_by_test_id("count-awaiting_decision")).to_have_text(
        str(len(PENDING) - 1), timeout=POLL_WAIT_MS
    )
    # Decided, the card is no longer pending; it stays in view, right after the pending ones.
    await expect(card).to_have_attribute("data-pending", "false")
    assert await shown_seats(cards(page)) == [
        *PENDING[1:],
        OFFERS_NATIVE,
        *DECIDED[: PAGE_SIZE - len(PENDING)],
    ]


async def test_unpause_is_offered_while_paused_and_only_the_operator_may_use_it(
    site: Site, tab: browser.Tab, chromium: Browser, tmp_path: pathlib.Path
) -> None:
    """Issue 20 part 5: "an unpause control shown when the swarm is paused … that only an
    operator may use"; a non-operator gets the refusal the gRPC API gives (forbidden_scope).
    Spec (Rollback): the pause switch is the swarm's recovery-paused key."""
    await site.ctl.apply(cs.document(seats=("eng-1", "eng-2")))
    await site.ctl.stub.PauseRecovery(pb.PauseRecoveryRequest(swarm=SWARM), metadata=cs.OPERATOR)

    context = await chromium.new_context()
    try:
        master = await context.new_page()
        await master.goto(site.ledger())
        await sign_in(master, cs.MASTER_SECRET)
        banner = master.get_by_test_id("paused")
        await expect(banner).to_be_visible()
        await expect(banner.get_by_role("button", name="Unpause recovery")).to_be_hidden()
        await expect(master.get_by_test_id("unpause-operator-only")).to_have_text(
            "Only the operator can unpause recovery."
        )
        # Sent anyway with the master's credential: refused as gRPC refuses it, still paused.
        answer = await master.evaluate(
            """async ([url, token]) => {
                const headers = { Authorization: `Bearer ${token}` };
                const r = await fetch(url, { method: "POST", headers });
                return [r.status, await r.json()];
            }""",
            [f"{site.url}/v1/swarms/{SWARM}/unpause", cs.MASTER_SECRET],
        )
        assert answer == [403, {"reason": "forbidden_scope", "message": "forbidden_scope"}]
        refused = await cs.refusal(
            site.ctl.stub.UnpauseRecovery(
                pb.PauseRecoveryRequest(swarm=SWARM), metadata=cs.md(cs.MASTER_SECRET)
            )
        )
        assert cs.reason_of(refused) == "forbidden_scope"
        assert await reading.paused(site.ctl.redis, SWARM)
    finally:
        await context.close()

    page = tab.page
    await page.goto(site.ledger())
    await sign_in(page, cs.OPERATOR_TOKEN)
    banner = page.get_by_test_id("paused")
    unpause = banner.get_by_role("button", name="Unpause recovery")
    await expect(unpause).to_be_visible()
    await expect(page.get_by_test_id("unpause-operator-only")).to_be_hidden()
    await browser.screenshot(page, tmp_path / "ledger-paused.png")
    await unpause.click()
    dialog = page.get_by_test_id("confirm")
    await expect(dialog.get_by_test_id("confirm-text")).to_have_text(
        f"Unpause recovery of swarm {SWARM}?"
    )
    await dialog.get_by_role("button", name="Cancel").click()
    await next_polls(page, 1)
    assert await reading.paused(site.ctl.redis, SWARM)
    await expect(banner).to_be_visible()

    await unpause.click()
    await dialog.get_by_role("button", name="Unpause recovery").click()
    await expect(banner).to_be_hidden()
    assert not await reading.paused(site.ctl.redis, SWARM)


async def test_an_unknown_swarm_answers_a_readable_page_that_links_to_the_panel(
    site: Site, tab: browser.Tab, tmp_path: pathlib.Path
) -> None:
    """Issue 20 part 5: "/swarms/typo/ledger (unknown swarm) … must answer a readable page
    (404) that says no swarm named that exists and links back to the panel. Escape any echoed
    name (no HTML injection)."""
    await site.ctl.apply(cs.document(seats=("eng-1",)))
    page = tab.page
    response = await page.goto(f"{site.url}/swarms/typo/ledger")
    assert response is not None and response.status == 404
    assert response.headers["content-type"].startswith("text/html")
    await expect(page.get_by_role("heading", name="No such swarm")).to_be_visible()
    await expect(page.get_by_test_id("missing")).to_have_text(
        "No swarm named typo exists on this controller."
    )
    await browser.screenshot(page, tmp_path / "unknown-swarm.png")

    hostile = '<img src=x onerror="window.pwned=1"><b id="injected">x'
    response = await page.goto(f"{site.url}/swarms/{urllib.parse.quote(hostile)}/ledger")
    assert response is not None and response.status == 404
    await expect(page.get_by_test_id("missing-name")).to_have_text(hostile)
    assert await page.locator("img, #injected").count() == 0
    assert await page.evaluate("() => window.pwned === undefined")

    await page.get_by_role("link", name="Back to the swarm panel").click()
    await expect(page).to_have_url(f"{site.url}/")
    await expect(page.get_by_test_id("sign-in")).to_be_visible()
