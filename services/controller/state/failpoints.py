"""The script runner's test-only failpoint: SIGKILL the controller process at an exact write.

Inert unless its environment variables (`KILL_AFTER_WRITES`, `KILL_BEFORE_WRITES`) are set: the
end-to-end crash test kills a controller process right before or right after its N-th counted
write. The runner (`scripting`) numbers each guarded script call it sends and reports each
reply here; production never sets these.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from collections.abc import Mapping
from typing import Any, Final

from services.common import logs

log = logging.getLogger("services.controller.failpoint")

KILL_AFTER_WRITES: Final = "AGENTIHOOKS_FAULT_KILL_AFTER_WRITES"
KILL_BEFORE_WRITES: Final = "AGENTIHOOKS_FAULT_KILL_BEFORE_WRITES"

UNCOUNTED: Final = frozenset({"lease_renew", "lease_release"})
"""Lease bookkeeping runs on timers and at a clean stop, so counting it would make the N-th
write depend on timing; acquisition is not a guarded script and is not counted either."""


@dataclasses.dataclass
class Failpoint:
    """TEST-ONLY failpoint: SIGKILL this process at an exact write. Inert unless set.

    With `AGENTIHOOKS_FAULT_KILL_AFTER_WRITES=N` the process kills itself right after its N-th
    counted write came back from Redis (the write happened, nobody acted on it); with
    `AGENTIHOOKS_FAULT_KILL_BEFORE_WRITES=N` right before its N-th counted write is sent (so
    whatever the step did first, such as creating a Pod, happened and is not recorded).
    Counted writes are every guarded script call of this process (all swarms, one counter),
    whatever its status, except lease renewals and releases. While armed, each counted write
    is logged as a `failpoint_write` event (number, script, status, release kind, lease key)
    so a clean run lists the writes of a recovery in order. Production never sets these.
    """

    kill_after: int | None
    kill_before: int | None
    count: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Failpoint | None:
        """The failpoint the environment arms, or None (the inert default).

        Raises:
            ValueError: a variable is set to anything but a positive integer.
        """

        def number(name: str) -> int | None:
            text = env.get(name, "").strip()
            if not text:
                return None
            if not text.isdigit() or int(text) < 1:
                raise ValueError(f"{name} must be a positive integer")
            return int(text)

        after, before = number(KILL_AFTER_WRITES), number(KILL_BEFORE_WRITES)
        if after is None and before is None:
            return None
        return cls(after, before)

    def before_write(self, name: str, lease_key: str) -> int:
        """Number the write about to be sent; kill first when it is the chosen one."""
        self.count += 1
        if self.count == self.kill_before:
            self._kill("before", name, lease_key)
        return self.count

    def after_write(self, number: int, name: str, lease_key: str, reply: Mapping[str, Any]) -> None:
        """Log the write that just ran; kill when it is the chosen one."""
        logs.event(
            log,
            "failpoint_write",
            number=number,
            script=name,
            status=reply.get("status"),
            kind=reply.get("kind"),
            lease_key=lease_key,
        )
        if number == self.kill_after:
            self._kill("after", name, lease_key)

    def _kill(self, when: str, name: str, lease_key: str) -> None:
        logs.event(
            log,
            "failpoint_kill",
            logging.WARNING,
            number=self.count,
            when=when,
            script=name,
            lease_key=lease_key,
        )
        # SIGKILL, not an exception: no finally block, lease release or flush runs, as in a
        # real crash (the log handler has already written the line above).
        os.kill(os.getpid(), signal.SIGKILL)


FAILPOINT: Final = Failpoint.from_env(os.environ)
"""This process's failpoint: None (inert) unless a test armed it through the environment."""
