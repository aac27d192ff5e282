"""The ledger page in headless Chromium against a real controller HTTP server (spec: "Choosing
resume or fresh", "Observing recovery": the task row shows RECOVERY PENDING, the seat's card in
Handoff outcomes shows the failure, the offered checkpoint and, once reported, the continuity)."""

from __future__ import annotations

import pathlib

import redis.asyncio as aioredis
from playwright.async_api import Page, expect

from services.common import directives
from services.controller.state import reading, records
from tests.integration import test_http_api as api
from tests.integration.controller import harness
from tests.integration.controller.harness import SWARM, first, second
from tests.support import browser

TOKEN_KEY = "agentihooks.controller.token"
POLL_WAIT_MS = 8_000
"""Long enough for a few of the page's 2 s polls."""

HOSTILE = '<b id="injected">bold</b> & <img src=x onerror="window.pwned=1">'


async def confirm(page: Page, question: str) -> None:
    """Answer the confirmation a choice asks for (issue 20 part 5: nothing is sent before)."""
    dialog = page.get_by_test_id("confirm")
    await expect(dialog.get_by_test_id("confirm-text")).to_have_text(question)
    await dialog.get_by_role("button", name="Send decision").click()
    await expect(dialog).to_be_hidden()


async def sign_in(page: Page, url: str, token: str) -> None:
    await page.goto(f"{url}/swarms/{SWARM}/ledger")
    await expect(page.get_by_test_id("token-form")).to_be_visible()
    await page.get_by_label("Controller credential").fill(token)
    await page.get_by_role("button", name="Use credential").click()


async def test_operator_resumes_natively_and_starts_another_seat_fresh(
    redis_client: aioredis.Redis, tab: browser.Tab, tmp_path: pathlib.Path
) -> None:
    """Spec: "The task row shows RECOVERY PENDING while the replacement is pending"; the card's
    reason reads `oom_killed; native resume from ckpt-7 at record 412`; the resume control reads
    `Resume native` when the checkpoint supports native resume and the attempt held a session,
    and `Continue from context` otherwise; choosing accepts the decision and the card follows
    it to the reported continuity. Data is shown as text, never as markup."""
    page = tab.page
    async with api.awaiting_swarm(redis_client, text=HOSTILE) as served:
        await sign_in(page, served.url, api.OPERATOR_TOKEN)

        await expect(page.get_by_test_id("task-awaiting-t-eng-1")).to_have_text("RECOVERY PENDING")
        native = page.get_by_test_id("card-eng-1")
        await expect(native.get_by_test_id("card-reason")).to_have_text(api.NATIVE_REASON)
        await expect(native.get_by_test_id("card-checkpoint")).to_have_text("ckpt-7")
        await expect(native.get_by_test_id("card-continuity")).to_have_text("pending")
        await expect(native.get_by_test_id("card-decision")).to_have_text("awaiting decision")
        resume = native.get_by_role("button", name="Resume native", exact=True)
        await expect(resume).to_be_enabled()
        await expect(native.get_by_role("button", name="Continue from context")).to_have_count(0)

        context = page.get_by_test_id("card-eng-2")
        await expect(context.get_by_test_id("card-reason")).to_have_text(api.CONTEXT_REASON)
        await expect(
            context.get_by_role("button", name="Continue from context", exact=True)
        ).to_be_visible()
        await expect(context.get_by_role("button", name="Resume native")).to_have_count(0)

        bare = page.get_by_test_id("card-eng-3")
        await expect(bare.get_by_test_id("card-reason")).to_have_text("node_lost")
        await expect(bare.get_by_role("button")).to_have_count(1)
        fresh = bare.get_by_role("button", name="Fresh", exact=True)
        await expect(fresh).to_be_visible()

        # The token is kept in this tab's session storage, never in the URL.
        assert api.OPERATOR_TOKEN not in page.url
        stored = await page.evaluate(f"() => sessionStorage.getItem('{TOKEN_KEY}')")
        assert stored == api.OPERATOR_TOKEN

        await resume.click()
        await confirm(page, "Resume native for seat eng-1?")
        await expect(native.get_by_test_id("card-message")).to_have_text(
            "Accepted: resume \u2192 native from ckpt-7 at record 412; "
            f"replacement {second('eng-1')} (generation 2)"
        )
        await expect(native.get_by_test_id("card-decision")).to_have_text("accepted")
        await expect(native.get_by_test_id("card-replacement")).to_have_text(second("eng-1"))
        await expect(native.get_by_role("button")).to_have_count(0)
        await expect(page.get_by_test_id("task-awaiting-t-eng-1")).to_have_text("RECOVERY PENDING")
        decided = await reading.decision(redis_client, SWARM, first("eng-1"))
        assert decided is not None and decided.state is records.DecisionState.ACCEPTED
        assert decided.choice is records.Choice.RESUME
        assert decided.source is records.DecisionSource.OPERATOR and decided.agent == "operator"
        assert decided.directive == directives.Directive(
            "ckpt-7", directives.Continuity.NATIVE, "sess-1", 412
        )

        await fresh.click()
        await confirm(page, "Fresh for seat eng-3?")
        await expect(bare.get_by_test_id("card-message")).to_have_text(
            f"Accepted: fresh \u2192 fresh; replacement {second('eng-3')} (generation 2)"
        )
        await expect(bare.get_by_test_id("card-decision")).to_have_text("accepted")
        decided = await reading.decision(redis_client, SWARM, first("eng-3"))
        assert decided is not None and decided.choice is records.Choice.FRESH
        assert decided.directive == directives.FRESH

        # Once the replacement reports, the card shows the continuity it got and the task row
        # gets its prior awaiting value back.
        recovery = await served.recovery()
        replacement = harness.Harness(redis_client, served.runtime, served.checkpoints, recovery)
        await recovery.report_restore(
            await replacement.worker(second("eng-1")),
            recovery=directives.Continuity.NATIVE,
            checkpoint_id="ckpt-7",
            session_id="sess-1",
            watermark=412,
        )
        await expect(native.get_by_test_id("card-continuity")).to_have_text(
            "native", timeout=POLL_WAIT_MS
        )
        await expect(page.get_by_test_id("task-awaiting-t-eng-1")).to_have_text(
            "worker", timeout=POLL_WAIT_MS
        )
        await expect(page.get_by_test_id("task-recovery-t-eng-1")).to_have_text(
            "verified native from ckpt-7"
        )

        # Escaped: the hostile task text is shown literally and created no element.
        await expect(page.get_by_test_id("task-text-t-eng-1")).to_have_text(f"{HOSTILE} (eng-1)")
        assert await page.locator("#injected").count() == 0
        assert await page.locator("img").count() == 0
        assert await page.evaluate("() => window.pwned === undefined")

        await browser.screenshot(page, tmp_path / "ledger.png")


async def test_a_master_chooses_as_its_agent_and_refusals_show_in_the_card(
    redis_client: aioredis.Redis, tab: browser.Tab
) -> None:
    """Spec: a registered master bound to the named agent can choose; any other caller is
    refused with forbidden_scope (never inferred from a display name), and a choice after a
    decision was accepted is refused with `no recovery decision is pending for this attempt`;
    the card shows the refusal's message. The page asks for the credential once per tab."""
    page = tab.page
    async with api.awaiting_swarm(redis_client) as served:
        # A credential the controller does not know: refused, and the page asks again.
        await sign_in(page, served.url, "not-a-credential")
        await expect(page.get_by_test_id("load-error")).to_have_text(
            "Credential refused: credential invalid"
        )
        await expect(page.get_by_test_id("token-form")).to_be_visible()
        await page.get_by_label("Controller credential").fill(harness.MASTER_SECRET)
        await page.get_by_role("button", name="Use credential").click()
        await expect(page.get_by_test_id("task-awaiting-t-eng-2")).to_have_text("RECOVERY PENDING")

        # Asked once: a reload keeps the session's credential.
        await page.reload()
        await expect(page.get_by_test_id("token-form")).to_be_hidden()
        context = page.get_by_test_id("card-eng-2")
        button = context.get_by_role("button", name="Continue from context", exact=True)
        await expect(button).to_be_visible()

        # A display-name spoof: the master's credential naming the other master.
        agent = page.get_by_label("Choosing agent")
        await agent.fill("master@example-2")
        bare = page.get_by_test_id("card-eng-3")
        await bare.get_by_role("button", name="Fresh", exact=True).click()
        await confirm(page, "Fresh for seat eng-3?")
        await expect(bare.get_by_test_id("card-message")).to_have_text("Refused: forbidden_scope")
        await expect(bare.get_by_test_id("card-decision")).to_have_text("awaiting decision")
        await expect(bare.get_by_role("button", name="Fresh", exact=True)).to_be_enabled()

        await agent.fill("master@example-1")
        await button.click()
        await confirm(page, "Continue from context for seat eng-2?")
        await expect(context.get_by_test_id("card-message")).to_have_text(
            "Accepted: resume \u2192 reconstructed from ckpt-3 at record 300; "
            f"replacement {second('eng-2')} (generation 2)"
        )
        decided = await reading.decision(redis_client, SWARM, first("eng-2"))
        assert decided is not None and decided.source is records.DecisionSource.MASTER
        assert decided.agent == "master@example-1"

        # A stale view: hold the page's status reads while the operator chooses fresh for
        # eng-1 elsewhere; the page's resume is then refused and says why.
        native = page.get_by_test_id("card-eng-1")
        resume = native.get_by_role("button", name="Resume native", exact=True)
        await expect(resume).to_be_visible()
        await page.route("**/v1/swarms/*/status", lambda route: route.abort())
        recovery = await served.recovery()
        await recovery.restore_decision(
            first("eng-1"), records.Choice.FRESH, None, records.Operator()
        )
        await resume.click()
        await confirm(page, "Resume native for seat eng-1?")
        await expect(native.get_by_test_id("card-message")).to_have_text(
            f"Refused: {api.NOT_PENDING}"
        )
        await page.unroute("**/v1/swarms/*/status")
        await expect(native.get_by_test_id("card-decision")).to_have_text(
            "accepted", timeout=POLL_WAIT_MS
        )
        await expect(native.get_by_role("button")).to_have_count(0)
        decided = await reading.decision(redis_client, SWARM, first("eng-1"))
        assert decided is not None and decided.choice is records.Choice.FRESH
