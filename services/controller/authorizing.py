"""Who a caller is, resolved once per call, and whether the policy lets it act.

`Principals` turns a bearer credential into a principal: the operator, a registered master of a
swarm, or an attempt's worker credential. Each call gets one `Caller`, which resolves its
credential once (the transport's first check) and answers the handler from that; only a master
of another swarm than the one the handler names is looked up again, in that swarm.

`authorize` asks `policy` which role allows the action and checks what that role depends on in
Redis: a master still bound to the agent it names, an attempt still its seat's current one. The
gRPC and HTTP layers, the decisions and the outcome path all come here.

A check that needs Redis and cannot reach it raises the client's error, answered UNAVAILABLE
(`redis_unavailable`): never let through.
"""

from __future__ import annotations

import dataclasses
import hmac

from services.common import errors, redis_link, revocations, tokens
from services.controller import policy
from services.controller.state import keys, reading, records


class Principals:
    """Resolves credentials for every swarm of a controller.

    Args:
        client: Redis (masters' registrations, revoked worker credentials).
        operator_token: The operator's token.
        grant_key: The key worker credentials are signed with.
    """

    def __init__(self, client: redis_link.Client, *, operator_token: str, grant_key: str) -> None:
        self._client = client
        self._operator_token = operator_token
        self._grant_key = grant_key
        self._revoked = revocations.RedisRevocations(client)

    async def resolve(self, token: str | None, swarm: str | None) -> records.Principal:
        """Who holds `token`: the operator, a registered master (of `swarm` first), or an
        attempt.

        A revoked worker credential (a fenced attempt) is refused with forbidden_scope: a
        fenced worker keeps no authority. Anything else unknown is unauthenticated.
        """
        if not token:
            raise errors.Unauthenticated("credential missing")
        if tokens.operator_matches(self._operator_token, token):
            return records.Operator()
        if tokens.is_worker_token(token):
            try:
                cred = await tokens.check_worker_credential(self._grant_key, token, self._revoked)
            except errors.Unauthenticated as exc:
                if exc.message == "credential revoked":
                    raise errors.ForbiddenScope() from None
                raise
            return records.Worker(cred)
        if swarm and keys.is_name(swarm):
            master = await reading.master_for_token(self._client, swarm, token)
            if master is not None:
                return master
        # A master of another swarm is still a known caller: the policy refuses it with
        # forbidden_scope rather than calling its credential invalid.
        for other in await reading.swarm_names(self._client):
            if other != swarm:
                master = await reading.master_for_token(self._client, other, token)
                if master is not None:
                    return master
        raise errors.Unauthenticated("credential invalid")

    def caller(self, token: str | None) -> Caller:
        """The caller of one call, holding `token`: resolved on first use."""
        return Caller(self, token)

    async def master_in(self, swarm: str, token: str | None) -> records.Master | None:
        """The registered master of `swarm` that `token` is, if any."""
        return await reading.master_for_token(self._client, swarm, token)


class Caller:
    """The credential of one call, resolved once.

    The transport resolves it before it reads the request (`principal(None)`, or with the
    swarm the route names); the handler asks again with the swarm it acts on and gets the same
    principal, unless that is a master of another swarm: the credential is then looked up among
    this swarm's masters (a credential may be registered in several).
    """

    def __init__(self, principals: Principals, token: str | None) -> None:
        self._principals = principals
        self.token = token
        self._found: records.Principal | None = None

    async def principal(self, swarm: str | None = None) -> records.Principal:
        """Who the caller is, for `swarm` when it names one.

        Raises:
            errors.Unauthenticated: no credential, or an unknown one.
            errors.ForbiddenScope: a revoked worker credential.
        """
        found = self._found
        if found is None:
            found = self._found = await self._principals.resolve(self.token, swarm)
            return found
        if (
            isinstance(found, records.Master)
            and swarm
            and found.swarm != swarm
            and keys.is_name(swarm)
        ):
            return await self._principals.master_in(swarm, self.token) or found
        return found


@dataclasses.dataclass(frozen=True)
class Attempt:
    """The calling attempt as recorded, and its credential."""

    execution: records.Execution
    credential: tokens.WorkerCredential


async def authorize(
    client: redis_link.Client,
    swarm: str | None,
    action: policy.Action,
    principal: records.Principal,
    agent: str | None = None,
) -> policy.Role:
    """The role under which `principal` may do `action` in `swarm`, checked against Redis
    where the role depends on it.

    Raises:
        errors.ForbiddenScope: the policy does not allow it; a master no longer registered or
            not bound to the agent it names; an attempt fenced, superseded or not its own.
    """
    role = policy.role_for(action, principal, swarm, agent)
    if role is policy.Role.BOUND_MASTER:
        if not (isinstance(principal, records.Master) and await _bound(client, principal)):
            raise errors.ForbiddenScope()
    elif role is policy.Role.OWN_ATTEMPT and swarm is not None:
        await _current(client, swarm, principal)
    return role


async def attempt(
    client: redis_link.Client, swarm: str, action: policy.Action, principal: records.Principal
) -> Attempt:
    """`authorize` an attempt's own action; returns the attempt as recorded.

    Raises:
        errors.ForbiddenScope: not a worker credential of this swarm, not that attempt's own
            credential, or the attempt was fenced or superseded.
    """
    if policy.role_for(action, principal, swarm) is not policy.Role.OWN_ATTEMPT:
        raise errors.ForbiddenScope()
    return await _current(client, swarm, principal)


async def reporter(client: redis_link.Client, swarm: str, principal: records.Principal) -> Attempt:
    """The attempt a report (an outcome, a refusal, a capture) comes from, as recorded: the
    policy's role for reporting (an attempt's own worker credential of this swarm) and the
    attempt's record. Whether the credential is still that attempt's own and the attempt the
    seat's current, unfenced one is the report's script's check, under the lease
    (`state.reports`): checked there once, atomically with the write.

    Raises:
        errors.ForbiddenScope: not a worker credential of this swarm, or no such attempt.
    """
    role = policy.role_for(policy.Action.REPORT, principal, swarm)
    if role is not policy.Role.OWN_ATTEMPT or not isinstance(principal, records.Worker):
        raise errors.ForbiddenScope()
    held = await reading.execution(client, swarm, principal.credential.execution_id)
    if held is None:
        raise errors.ForbiddenScope()
    return Attempt(held, principal.credential)


async def _bound(client: redis_link.Client, master: records.Master) -> bool:
    """Whether the master's credential is still bound to its agent in the registration."""
    stored = (await reading.masters(client, master.swarm)).get(master.agent)
    return stored is not None and hmac.compare_digest(
        stored.encode(), master.credential_sha256.encode()
    )


async def _current(client: redis_link.Client, swarm: str, principal: records.Principal) -> Attempt:
    """The caller's own attempt, when it is still the seat's current, unfenced attempt."""
    if not isinstance(principal, records.Worker):
        raise errors.ForbiddenScope()
    cred = principal.credential
    held = await reading.execution(client, swarm, cred.execution_id)
    if (
        held is None
        or held.credential_id != cred.credential_id
        or held.generation != cred.execution_generation
        or held.state is not records.ExecutionState.RUNNING
    ):
        raise errors.ForbiddenScope()
    seat = await reading.seat(client, swarm, held.seat)
    if seat is None or seat.current_execution_id != held.execution_id:
        raise errors.ForbiddenScope()
    return Attempt(held, cred)
