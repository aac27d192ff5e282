"""The `agentihooks` command as an operator's script runs it: a real process against a real
controller (gRPC, Redis, the Kubernetes API emulator), branching on its exit code.

Exit codes: 0 done, 1 other error, 2 usage, 3 refused, 4 forbidden or unauthenticated, 5 not
found, 6 controller unavailable.
"""

from __future__ import annotations

import json

from services.cli import exits
from tests.support import controller_server as cs
from tests.support import ports
from tests.support.cli_process import RUN_TIMEOUT_S, agentihooks


async def test_status_json_exits_0_with_the_documented_fields(controller: cs.Controller) -> None:
    """`status --json` prints the swarm's cards under `handoffs` and exits 0."""
    await controller.apply()
    ran = await agentihooks("swarm", "example", "status", "--json", control=controller.addr)
    assert ran.code == exits.EXIT_OK, ran.err
    status = json.loads(ran.out)
    assert status["swarm"] == "example"
    assert set(status) == {
        "swarm",
        "paused",
        "runtime",
        "tasks",
        "seats",
        "handoffs",
        "restore_outcomes_by_type",
    }
    assert set(status["seats"][0]) == {"seat", "execution_id", "generation", "state"}


async def test_usage_errors_exit_2(controller: cs.Controller) -> None:
    """A missing or unknown argument is a usage error: exit 2, nothing sent."""
    ran = await agentihooks(
        "swarm", "example", "restore-decision", "eng-1", control=controller.addr
    )
    assert ran.code == exits.EXIT_USAGE
    ran = await agentihooks(
        "swarm", "example", "restore-decision", "eng-1", "maybe", control=controller.addr
    )
    assert ran.code == exits.EXIT_USAGE and "invalid choice" in ran.err


async def _awaiting(controller: cs.Controller, seat: str) -> None:
    """Fail the seat's first attempt (no checkpoint) and wait until it awaits a decision."""
    execution = f"example.{seat}.1"
    await cs.wait_for_pod(controller, execution)
    controller.fail(execution, cs.terminated("OOMKilled", 137))

    async def pending() -> None:
        cards = [h for h in (await controller.status()).handoffs if h.seat == seat]
        assert cards and cards[0].decision == "recovery_pending", cards

    await ports.eventually(pending, timeout=RUN_TIMEOUT_S)


async def test_a_choice_for_a_seat_with_nothing_pending_is_refused_exit_3(
    controller: cs.Controller,
) -> None:
    """Spec: for a Kubernetes attempt the command only records the request and the next pass
    applies it; the CLI waits for that pass. A seat with no fenced attempt has no recovery
    decision pending: the pass refuses it, and the CLI says so with exit 3."""
    await controller.apply()
    ran = await agentihooks(
        "swarm", "example", "restore-decision", "eng-1", "fresh", control=controller.addr
    )
    assert ran.code == exits.EXIT_REFUSED, (ran.out, ran.err)
    assert "recorded; the controller applies it on its next pass" in ran.out
    assert "no recovery decision is pending for this attempt" in ran.err


async def test_the_cli_waits_for_the_pass_that_applies_the_choice(
    controller: cs.Controller,
) -> None:
    """A fresh choice for a waiting seat: recorded, then applied by the next pass; the CLI
    prints the accepted decision and its replacement and exits 0. Repeating it is `already
    accepted`, exit 0; the other choice is refused, exit 3."""
    await controller.apply()
    await _awaiting(controller, "eng-2")
    ran = await agentihooks(
        "swarm", "example", "restore-decision", "eng-2", "fresh", control=controller.addr
    )
    assert ran.code == exits.EXIT_OK, (ran.out, ran.err)
    assert "applied: fresh accepted; replacement example.eng-2.2" in ran.out
    again = await agentihooks(
        "swarm", "example", "restore-decision", "eng-2", "fresh", control=controller.addr
    )
    assert again.code == exits.EXIT_OK and "fresh was already accepted" in again.out
    other = await agentihooks(
        "swarm", "example", "restore-decision", "eng-2", "resume", control=controller.addr
    )
    assert other.code == exits.EXIT_REFUSED
    assert "no recovery decision is pending for this attempt" in other.err


async def test_no_wait_only_records(controller: cs.Controller) -> None:
    """`--no-wait`: the request is recorded and the CLI exits 0 at once."""
    await controller.apply()
    await _awaiting(controller, "eng-2")
    ran = await agentihooks(
        "swarm",
        "example",
        "restore-decision",
        "eng-2",
        "fresh",
        "--no-wait",
        control=controller.addr,
    )
    assert ran.code == exits.EXIT_OK
    assert ran.out.strip().endswith("the controller applies it on its next pass")


async def test_a_wrong_credential_exits_4_and_says_what_to_check(
    controller: cs.Controller,
) -> None:
    """A forged token is unauthenticated, a master of the swarm choosing as another agent is
    forbidden_scope; both exit 4. The token never appears in the output."""
    await controller.apply()
    forged = "forged-token-0123456789abcdef"
    ran = await agentihooks("swarm", "example", "status", token=forged, control=controller.addr)
    assert ran.code == exits.EXIT_FORBIDDEN
    assert "AGENTIHOOKS_TOKEN" in ran.err and forged not in ran.err + ran.out
    ran = await agentihooks(
        "swarm",
        "example",
        "restore-decision",
        "eng-1",
        "fresh",
        "--agent",
        "master@example-2",
        token=cs.MASTER_SECRET,
        control=controller.addr,
    )
    assert ran.code == exits.EXIT_FORBIDDEN, (ran.out, ran.err)
    assert "forbidden_scope" in ran.err or "permission_denied" in ran.err


async def test_an_unknown_swarm_exits_5(controller: cs.Controller) -> None:
    ran = await agentihooks("swarm", "nosuch", "status", control=controller.addr)
    assert ran.code == exits.EXIT_NOT_FOUND, (ran.out, ran.err)


async def test_an_unreachable_controller_exits_6_naming_the_setting() -> None:
    """Nothing listens there: exit 6, and the message points at --control and
    AGENTIHOOKS_CONTROL_ADDR."""
    addr = f"127.0.0.1:{ports.free_port()}"
    ran = await agentihooks("swarm", "example", "status", control=addr)
    assert ran.code == exits.EXIT_UNAVAILABLE
    assert "the controller is unavailable" in ran.err
    assert "--control" in ran.err and "AGENTIHOOKS_CONTROL_ADDR" in ran.err and addr in ran.err


async def test_help_explains_name_seat_resume_and_fresh() -> None:
    ran = await agentihooks("swarm", "example", "restore-decision", "--help")
    assert ran.code == exits.EXIT_OK
    for words in ("NAME", "SEAT", "resume", "fresh", "examples:", "exit codes:"):
        assert words in ran.out
