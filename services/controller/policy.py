"""Who may do what in the controller: the one table of roles per action (pure: no I/O).

Spec: "Only the operator, or a registered master of the swarm whose credential is bound to the
named agent, can choose. Any other caller is refused with forbidden_scope; the choice is never
inferred from a display name." The controller "accepts an outcome only from the replacement's
own worker credential, only while that replacement is still the seat's current attempt".

The table (`MAY`) names the roles each action allows; `claims` says which roles a principal can
hold in a swarm as far as its credential shows. Two roles also depend on what Redis records (a
master still bound to its agent, an attempt still its seat's current one): `authorizing` checks
those, and every transport (gRPC, HTTP) and the core calls it.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Mapping
from typing import Final

from services.common import errors
from services.controller.state import records


class Action(enum.Enum):
    """What a caller asks to do."""

    APPLY = "apply"
    """Declare or update a swarm (`ApplySwarm`)."""
    CHOOSE = "choose"
    """Choose resume or fresh (`RestoreDecision`, `RequestRestoreDecision`, `POST
    /v1/executions/{execution}/restore-decision`, a recorded request applied by the pass)."""
    READ = "read"
    """Read a swarm's status and events (`GetSwarmStatus`, `WatchRecovery`, `GET
    /v1/swarms/{swarm}/status`, a row of the swarm panel)."""
    LIST = "list"
    """Open the swarm panel (`GET /v1/swarms`): it names no swarm; its rows are each READ."""
    SWITCH = "switch"
    """Set or clear the recovery-paused switch (`PauseRecovery`, `UnpauseRecovery`, `POST
    /v1/swarms/{swarm}/unpause`)."""
    LAUNCH = "launch"
    """Fetch the attempt's launch record (`GetLaunchRecord`)."""
    REPORT = "report"
    """Report a restore outcome, refusal or capture (`ReportRestore`, `ReportCapture`)."""


class Role(enum.Enum):
    """Who a caller is for one swarm; declared from the most to the least authority."""

    OPERATOR = "operator"
    """The holder of the operator token."""
    BOUND_MASTER = "bound_master"
    """A registered master of the swarm whose credential is bound to the agent it names."""
    MASTER = "master"
    """A registered master of the swarm (of any swarm, for an action that names none)."""
    OWN_ATTEMPT = "own_attempt"
    """The seat's current attempt, calling with its own worker credential."""


MAY: Final[Mapping[Action, frozenset[Role]]] = {
    Action.APPLY: frozenset({Role.OPERATOR}),
    Action.CHOOSE: frozenset({Role.OPERATOR, Role.BOUND_MASTER}),
    Action.READ: frozenset({Role.OPERATOR, Role.MASTER}),
    Action.LIST: frozenset({Role.OPERATOR, Role.MASTER}),
    Action.SWITCH: frozenset({Role.OPERATOR}),
    Action.LAUNCH: frozenset({Role.OWN_ATTEMPT}),
    Action.REPORT: frozenset({Role.OWN_ATTEMPT}),
}
"""The roles each action allows; anyone else is refused with forbidden_scope."""


def claims(principal: records.Principal, swarm: str | None, agent: str | None = None) -> set[Role]:
    """The roles `principal` claims in `swarm` (None: an action that names no swarm), as far
    as its credential shows.

    A master's agent is the name its credential is bound to in the registration, never one
    the caller names: naming another agent claims no binding (compared in constant time).
    """
    if isinstance(principal, records.Operator):
        return {Role.OPERATOR}
    if isinstance(principal, records.Master):
        if swarm is None:
            return {Role.MASTER}
        if principal.swarm != swarm:
            return set()
        bound = agent is not None and hmac.compare_digest(principal.agent.encode(), agent.encode())
        return {Role.MASTER, Role.BOUND_MASTER} if bound else {Role.MASTER}
    if swarm is not None and principal.credential.swarm == swarm:
        return {Role.OWN_ATTEMPT}
    return set()


def role_for(
    action: Action, principal: records.Principal, swarm: str | None, agent: str | None = None
) -> Role:
    """The role under which `principal` may do `action` in `swarm`, the one with the most
    authority when it holds several.

    Raises:
        errors.ForbiddenScope: none of its roles may.
    """
    allowed = claims(principal, swarm, agent) & MAY[action]
    for role in Role:
        if role in allowed:
            return role
    raise errors.ForbiddenScope()


def attempt_swarm(principal: records.Principal) -> str:
    """The swarm whose attempt a worker credential belongs to: the one that answers its calls.

    Raises:
        errors.ForbiddenScope: not a worker credential.
    """
    if not isinstance(principal, records.Worker):
        raise errors.ForbiddenScope()
    return principal.credential.swarm
