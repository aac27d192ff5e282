"""`sharing.assign`: how live controller replicas split the swarms (pure logic)."""

from __future__ import annotations

import collections
import math
import random

from services.controller import sharing

SWARMS = [f"swarm-{i:03d}" for i in range(30)]


def loads(assignment: dict[str, str]) -> collections.Counter[str]:
    return collections.Counter(assignment.values())


def test_every_swarm_goes_to_one_live_replica_and_none_over_its_share() -> None:
    for members in (["a"], ["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d", "e", "f", "g"]):
        out = sharing.assign(SWARMS, members, {})
        assert sorted(out) == SWARMS
        assert set(out.values()) <= set(members)
        share = math.ceil(len(SWARMS) / len(members))
        assert max(loads(out).values()) <= share, loads(out)
        assert sum(loads(out).values()) == len(SWARMS)


def test_three_replicas_split_thirty_swarms_ten_each() -> None:
    assert sorted(loads(sharing.assign(SWARMS, ["a", "b", "c"], {})).values()) == [10, 10, 10]


def test_every_replica_computes_the_same_assignment_whatever_the_order_it_read() -> None:
    holders = {s: random.Random(s).choice(["a", "b", None]) for s in SWARMS}
    first = sharing.assign(SWARMS, ["a", "b", "c"], holders)
    shuffled = list(SWARMS)
    random.Random(7).shuffle(shuffled)
    assert sharing.assign(shuffled, ["c", "a", "b"], dict(reversed(holders.items()))) == first


def test_a_holder_under_its_share_keeps_what_it_holds() -> None:
    holders = {s: ("a" if i < 10 else "b" if i < 20 else "c") for i, s in enumerate(SWARMS)}
    assert sharing.assign(SWARMS, ["a", "b", "c"], holders) == holders


def test_a_joining_replica_takes_only_what_the_others_hold_beyond_their_new_share() -> None:
    before = sharing.assign(SWARMS, ["a", "b"], {})
    after = sharing.assign(SWARMS, ["a", "b", "c"], before)
    moved = {s for s in SWARMS if before[s] != after[s]}
    assert all(after[s] == "c" for s in moved), "only moves to the new replica"
    assert len(moved) == 10 and sorted(loads(after).values()) == [10, 10, 10]


def test_a_dead_replicas_swarms_are_spread_over_the_others_and_theirs_stay() -> None:
    before = sharing.assign(SWARMS, ["a", "b", "c"], {})
    after = sharing.assign(SWARMS, ["a", "b"], before)
    assert all(after[s] == before[s] for s in SWARMS if before[s] != "c")
    assert sorted(loads(after).values()) == [15, 15]


def test_holders_that_are_not_live_replicas_are_ignored() -> None:
    out = sharing.assign(SWARMS, ["a", "b"], dict.fromkeys(SWARMS, "gone"))
    assert set(out.values()) == {"a", "b"}


def test_no_swarm_or_no_replica_assigns_nothing() -> None:
    assert sharing.assign([], ["a"], {}) == {}
    assert sharing.assign(SWARMS, [], {}) == {}
