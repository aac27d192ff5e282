"""A call resolves its credential once (issue 22: "principals resolved once per call")."""

from __future__ import annotations

from services.common import tokens
from services.controller import authorizing
from services.controller.state import records

SHA = tokens.hash_secret("m" * 32)


class CountingPrincipals(authorizing.Principals):
    """Principals whose lookups are counted; `registered` maps a swarm to its master."""

    def __init__(self, registered: dict[str, records.Master]) -> None:
        self.registered = registered
        self.resolved: list[str | None] = []
        self.looked_up: list[str] = []

    async def resolve(self, token: str | None, swarm: str | None) -> records.Principal:
        self.resolved.append(swarm)
        if swarm in self.registered:
            return self.registered[swarm]
        return next(iter(self.registered.values()))

    async def master_in(self, swarm: str, token: str | None) -> records.Master | None:
        self.looked_up.append(swarm)
        return self.registered.get(swarm)


async def test_the_handler_gets_the_principal_the_transport_resolved() -> None:
    principals = CountingPrincipals({"example": records.Master("example", "m@e", SHA)})
    caller = principals.caller("m" * 32)
    first = await caller.principal(None)
    assert await caller.principal("example") is first
    assert await caller.principal("example") is first
    assert principals.resolved == [None] and principals.looked_up == []


async def test_a_master_of_another_swarm_is_looked_up_in_the_swarm_named() -> None:
    """A credential registered in two swarms is the master of the one the handler acts on;
    one that is not registered there stays what it was (the policy then refuses it)."""
    a = records.Master("alpha", "m@a", SHA)
    b = records.Master("beta", "m@b", SHA)
    principals = CountingPrincipals({"alpha": a, "beta": b})
    caller = principals.caller("m" * 32)
    assert await caller.principal(None) is a
    assert await caller.principal("beta") is b
    assert await caller.principal("gamma") is a
    assert await caller.principal("Not A Name") is a
    assert principals.resolved == [None] and principals.looked_up == ["beta", "gamma"]
