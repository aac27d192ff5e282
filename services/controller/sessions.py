"""A swarm's seat queue over time: at most one `working.Session` at a time, shared by
everyone working on the swarm's seats.

The lease holder's loop keeps one running while it holds the lease (`Seats.holding`), and
halts it when it stops holding it. A call made outside that loop (a pass or a decision called
directly) joins the running session, or starts one that lives as long as somebody uses it
(`Seats.using`). A halted session is replaced only once its workers ended, so a seat is never
worked by two sessions at once either.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from services.common import logs
from services.controller import observations, working
from services.controller.state import scripting

log = logging.getLogger("services.controller.recovery")


class Seats:
    """A swarm's seat queue: at most one `working.Session` at a time.

    The lease holder's loop keeps one running while it holds the lease (`holding`). Without
    it (a call made outside the loop), the first caller starts one and the last one to leave
    lets it run dry and stops it (`using`).

    Args:
        make: A new session (not started).
        stop_s: How long a halted session's workers are waited for before the next session
            starts (a call stuck past its cancellation must not stall the swarm for good).
    """

    def __init__(self, make: Callable[[], working.Session], *, stop_s: float = 10.0) -> None:
        self._make = make
        self.stop_s = stop_s
        self.session: working.Session | None = None

    @contextlib.asynccontextmanager
    async def using(self) -> AsyncIterator[working.Session]:
        """Join the running session, or start one for as long as somebody uses it."""
        session = await self._current()
        session.users += 1
        try:
            yield session
        finally:
            session.users -= 1
            if session.users == 0 and not session.holder:
                await self._wind_down(session)

    async def _current(self) -> working.Session:
        """The running session; a new one when there is none or it was halted (once the
        halted one's workers ended, or `stop_s` passed: one worker per seat, across sessions
        too)."""
        while (session := self.session) is not None and session.failure is not None:
            await session.stopped(self.stop_s)
            if self.session is session:
                self.session = None
        if session is None:
            session = self.session = self._make()
            session.start()
        return session

    async def _wind_down(self, session: working.Session) -> None:
        """The last caller left: let the queue run dry (the seats queued now and those brought
        while they are worked), then stop the workers, unless somebody joined meanwhile. A
        session that halted stays current until its workers ended (`_current` waits for
        them)."""
        if session.failure is None:
            await session.run_dry()
            if session.failure is None:
                if session.users or session.holder:
                    return  # joined meanwhile: the session is theirs now
                # Dry: no seat is being worked, and nobody joins a session no longer current.
                if self.session is session:
                    self.session = None
                session.queue.shut_down()
        await session.stopped(self.stop_s)
        if self.session is session:
            self.session = None

    @contextlib.asynccontextmanager
    async def holding(
        self, on_report: Callable[[observations.PassReport], None] | None
    ) -> AsyncIterator[working.Session]:
        """The lease holder's session, until the block ends: then nothing more is worked, the
        seats being worked are cancelled (and waited for, at most `stop_s`), and a caller still
        waiting is told the lease is gone. The session stays current until then, so a call
        meanwhile waits for it rather than start a second one beside its workers."""
        session = await self._current()
        session.holder = True
        session.on_report = on_report
        session.users += 1
        try:
            yield session
        finally:
            session.users -= 1
            session.halt(scripting.LeaseLost("stopped"))
            for task in await session.stopped(self.stop_s):
                logs.event(
                    log,
                    "helper_stop_timeout",
                    logging.WARNING,
                    swarm=session.swarm,
                    helper=task.get_name(),
                )
            if self.session is session:
                self.session = None
