"""Who may do what: the one policy table, as a pure function (spec: "Choosing resume or fresh",
"How the replacement restores"; DESIGN 2, "who may call")."""

from __future__ import annotations

import pytest

from services.common import errors, tokens
from services.controller import policy
from services.controller.state import records

A = policy.Action
R = policy.Role
SWARM = "example"

OPERATOR = records.Operator()
MASTER = records.Master(SWARM, "master@example-1", tokens.hash_secret("m" * 32))
OTHER_MASTER = records.Master("other", "master@example-1", tokens.hash_secret("m" * 32))
WORKER = records.Worker(
    tokens.WorkerCredential(
        credential_id="cred-1",
        swarm=SWARM,
        seat="eng-1",
        execution_id="example.eng-1.1",
        execution_generation=1,
        expires_at=2**31,
    )
)
OTHER_WORKER = records.Worker(
    tokens.WorkerCredential(
        credential_id="cred-2",
        swarm="other",
        seat="eng-1",
        execution_id="other.eng-1.1",
        execution_generation=1,
        expires_at=2**31,
    )
)
CALLERS: dict[str, records.Principal] = {
    "operator": OPERATOR,
    "master": MASTER,
    "master of another swarm": OTHER_MASTER,
    "worker": WORKER,
    "worker of another swarm": OTHER_WORKER,
}

BOUND = "master@example-1"
"""The agent `MASTER`'s credential is bound to."""

# (action, caller, agent named) -> the role that allows it, or None: forbidden_scope.
TABLE: list[tuple[policy.Action, str, str | None, policy.Role | None]] = [
    (A.APPLY, "operator", None, R.OPERATOR),
    (A.APPLY, "master", None, None),
    (A.APPLY, "worker", None, None),
    # Spec: only the operator, or a registered master bound to the named agent, can choose.
    (A.CHOOSE, "operator", None, R.OPERATOR),
    (A.CHOOSE, "operator", "someone", R.OPERATOR),
    (A.CHOOSE, "master", BOUND, R.BOUND_MASTER),
    (A.CHOOSE, "master", None, None),
    (A.CHOOSE, "master", "master@example-2", None),
    (A.CHOOSE, "master of another swarm", BOUND, None),
    (A.CHOOSE, "worker", BOUND, None),
    (A.READ, "operator", None, R.OPERATOR),
    (A.READ, "master", None, R.MASTER),
    (A.READ, "master of another swarm", None, None),
    (A.READ, "worker", None, None),
    (A.LIST, "operator", None, R.OPERATOR),
    (A.LIST, "master", None, R.MASTER),
    (A.LIST, "master of another swarm", None, R.MASTER),
    (A.LIST, "worker", None, None),
    (A.SWITCH, "operator", None, R.OPERATOR),
    (A.SWITCH, "master", None, None),
    (A.SWITCH, "worker", None, None),
    # Spec: an outcome only from the replacement's own worker credential.
    (A.LAUNCH, "worker", None, R.OWN_ATTEMPT),
    (A.LAUNCH, "worker of another swarm", None, None),
    (A.LAUNCH, "operator", None, None),
    (A.LAUNCH, "master", None, None),
    (A.REPORT, "worker", None, R.OWN_ATTEMPT),
    (A.REPORT, "worker of another swarm", None, None),
    (A.REPORT, "operator", None, None),
    (A.REPORT, "master", None, None),
]

NAMELESS = {A.LIST, A.APPLY}
"""Actions that name no swarm."""


@pytest.mark.parametrize(("action", "caller", "agent", "role"), TABLE)
def test_the_table_allows_each_role_it_names_and_refuses_everyone_else(
    action: policy.Action, caller: str, agent: str | None, role: policy.Role | None
) -> None:
    """Spec: "Any other caller is refused with forbidden_scope; the choice is never inferred
    from a display name"."""
    swarm = None if action in NAMELESS else SWARM
    if role is None:
        with pytest.raises(errors.ForbiddenScope) as refused:
            policy.role_for(action, CALLERS[caller], swarm, agent)
        assert (refused.value.reason, refused.value.message) == (
            "forbidden_scope",
            "forbidden_scope",
        )
    else:
        assert policy.role_for(action, CALLERS[caller], swarm, agent) is role


def test_every_action_has_a_row_and_the_table_covers_every_action() -> None:
    """One table: each action names who may, and the table's cases above try each one."""
    assert set(policy.MAY) == set(A)
    assert {row[0] for row in TABLE} == set(A)


def test_roles_that_depend_on_recorded_state_are_checked_in_redis() -> None:
    """A master's binding and an attempt being current are only claimed by a credential
    (`authorizing` checks them against Redis)."""
    assert policy.claims(MASTER, SWARM, BOUND) == {R.MASTER, R.BOUND_MASTER}
    assert policy.claims(WORKER, SWARM) == {R.OWN_ATTEMPT}
    assert policy.claims(WORKER, None) == set()


def test_a_worker_call_is_answered_by_its_own_swarm() -> None:
    assert policy.attempt_swarm(WORKER) == SWARM
    for caller in (OPERATOR, MASTER):
        with pytest.raises(errors.ForbiddenScope):
            policy.attempt_swarm(caller)
