"""What the CLI adds to the controller's refusals (issue 20, part 4, line 2: "`no such seat`
must name the seat asked and the seats that exist (bounded: list at most ~20 then 'and N
more')", "a refused second, different decision must still print the spec's exact message …
and then add which decision was accepted"; line 4: "Keep tokens out of every error message")."""

from __future__ import annotations

import json

from agentihooks.swarm.v2 import recovery_pb2 as pb

from services.cli import rendering


def status(
    *seats: str, handoffs: tuple[pb.HandoffCard, ...] = (), tasks: tuple[pb.Task, ...] = ()
) -> pb.SwarmStatus:
    return pb.SwarmStatus(
        swarm="example",
        seats=[pb.Seat(seat=s) for s in seats],
        handoffs=list(handoffs),
        tasks=list(tasks),
    )


def test_the_seats_that_exist_are_listed_up_to_the_bound() -> None:
    """A few seats are all named; past the bound, the first ones and how many more."""
    assert rendering.seat_names(status("eng-1", "eng-2")) == (
        "the seats of swarm example are eng-1, eng-2"
    )
    many = [f"s-{n:02d}" for n in range(1, 26)]
    text = rendering.seat_names(status(*many))
    assert text == (
        "the seats of swarm example are "
        + ", ".join(many[: rendering.SEATS_SHOWN])
        + f" and {25 - rendering.SEATS_SHOWN} more"
    )
    exactly = [f"s-{n:02d}" for n in range(1, rendering.SEATS_SHOWN + 1)]
    assert "more" not in rendering.seat_names(status(*exactly))
    assert rendering.seat_names(status()) == "swarm example has no seats"


def card(decision: str = "accepted", replacement: str = "example.eng-2.2") -> pb.HandoffCard:
    return pb.HandoffCard(
        seat="eng-2",
        execution_id="example.eng-2.1",
        decision=decision,
        replacement_execution_id=replacement if decision == "accepted" else "",
    )


def task(**recovery: object) -> pb.Task:
    return pb.Task(task_id="t-eng-2", seat="eng-2", recovery_json=json.dumps(recovery))


def test_the_accepted_decision_names_its_choice_and_replacement() -> None:
    """Found by the fenced attempt or its seat; the choice from the task's recovery field."""
    accepted = status(
        "eng-2",
        handoffs=(card(),),
        tasks=(task(status="accepted", choice="fresh", fenced_execution_id="example.eng-2.1"),),
    )
    expected = "fresh was accepted for example.eng-2.1, replacement example.eng-2.2"
    assert rendering.accepted_decision(accepted, "example.eng-2.1") == expected
    assert rendering.accepted_decision(accepted, "eng-2") == expected
    assert rendering.accepted_decision(accepted, "eng-1") == ""


def test_after_the_outcome_the_choice_follows_from_the_continuity() -> None:
    """A verified outcome replaces the directive on the task: native or reconstructed came
    from resume, fresh from fresh."""
    for continuity, choice in (
        ("native", "resume"),
        ("reconstructed", "resume"),
        ("fresh", "fresh"),
    ):
        verified = status(
            "eng-2",
            handoffs=(card(),),
            tasks=(
                task(status="verified", recovery=continuity, fenced_execution_id="example.eng-2.1"),
            ),
        )
        assert rendering.accepted_decision(verified, "eng-2").startswith(f"{choice} was accepted")


def test_nothing_is_added_while_nothing_was_accepted() -> None:
    """A seat still waiting (or never fenced) has no accepted decision to name."""
    assert (
        rendering.accepted_decision(status("eng-2", handoffs=(card("recovery_pending"),)), "eng-2")
        == ""
    )
    assert rendering.accepted_decision(status("eng-2"), "eng-2") == ""
    unknown = status("eng-2", handoffs=(card(),))
    assert rendering.accepted_decision(unknown, "eng-2") == (
        "a decision was accepted for example.eng-2.1, replacement example.eng-2.2"
    )


def test_credentials_are_redacted_wherever_they_appear() -> None:
    """Every occurrence of each credential, the longer first (one may contain the other);
    an unset one redacts nothing."""
    token = "operator-token-" + "o" * 24
    text = f"argument choice: invalid choice: '{token}' nor {token}x"
    assert rendering.redacted(text, [token, ""]) == (
        "argument choice: invalid choice: '<redacted>' nor <redacted>x"
    )
    assert rendering.redacted("op-tok-long", ["op-tok", "op-tok-long"]) == "<redacted>"
    assert rendering.redacted("nothing here", ["", ""]) == "nothing here"
    # argparse repeats a refused value as repr writes it: a backslash doubled, other quotes.
    odd = "tok\\en'quote"
    assert rendering.redacted(f"invalid choice: {odd!r}", [odd]) == 'invalid choice: "<redacted>"'
