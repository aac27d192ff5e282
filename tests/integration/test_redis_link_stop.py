"""RedisLink against a real redis-server: a stop always ends its follower.

Found by a loaded run: a controller fixture's teardown waited forever on the link's follower
(`redis-link`, cancelling, still inside `asyncio.wait_for`). On Python 3.11 `wait_for` returns
the inner result instead of raising when the cancellation lands just as the awaited event is
set, so the follower swallowed its stop and went on following. A controller being stopped
(SIGTERM) could hang the same way.
"""

from __future__ import annotations

import asyncio

from services.common import redis_link
from tests.support import redis_server


class Counting(redis_link.RedisLink):
    """Counts the pings its follower sends after its stop was asked for."""

    stopping = False
    after_stop = 0

    async def _probe(self) -> BaseException | None:
        if self.stopping:
            self.after_stop += 1
        return await super()._probe()


async def test_a_stop_that_lands_as_a_check_is_asked_for_still_ends_the_link(
    redis_server: redis_server.RedisServer,
) -> None:
    client = redis_link.connect(redis_server.url)
    try:
        for _ in range(20):
            link = Counting(client, check_every_s=3600)
            await link.start()
            assert await link.wait_known(60) is True
            await asyncio.sleep(0.01)  # the follower now waits for a reason to check
            link.suspect()  # a check is asked for: the follower's wait ends ...
            link.stopping = True
            async with asyncio.timeout(60):  # ... as its stop lands: it must end there
                await link.stop()
            assert link.after_stop == 0  # it did not go on to check Redis once stopped
    finally:
        await client.aclose()
