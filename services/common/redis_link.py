"""Whether Redis answers, as one process sees it: a missing or restarting Redis is a state.

`RedisLink` pings Redis in the background: every `check_every_s` while it answers, and after a
failure with an exponential backoff (`INITIAL_S` doubling up to `CAP_S`), logging one JSON line
per retry step (`redis_unavailable`) and one line when Redis answers again (`redis_available`).
The lines name the setting, `AGENTIHOOKS_REDIS_URL`, and Redis's host:port, never the URL itself
(it may hold a password) and never an exception's message (only its type).

Loops that lose Redis in the middle of their work report it (`suspect`), wait (`wait_up`) and
carry on; servers follow `subscribe` to switch their health status. Calls are not refused on the
link's word: each call that needs Redis asks it, and one that cannot reach it answers UNAVAILABLE
(`unavailable`), so a false alarm never refuses work and nothing is let through unchecked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from services.common import errors, logs, waiting

log = logging.getLogger("services.redis")

VARIABLE = "AGENTIHOOKS_REDIS_URL"
"""The setting that names Redis: what the log lines point an operator to."""

INITIAL_S = 0.5
"""The first wait after Redis failed to answer."""

CAP_S = 30.0
"""The longest wait between two attempts (the backoff doubles up to it)."""


class Backoff(waiting.Backoff):
    """`waiting.Backoff` from `INITIAL_S` up to `CAP_S`: the waits of everything that waits
    for Redis."""

    def __init__(self, initial_s: float = INITIAL_S, cap_s: float = CAP_S) -> None:
        super().__init__(initial_s, cap_s)


CHECK_EVERY_S = 1.0
"""How often Redis is pinged while it answers (so health follows an outage without traffic)."""

PROBE_TIMEOUT_S = 15.0
"""How long one ping may take before it counts as a failure: a backstop above the client's own
connect timeout (5 s), long enough that an event loop stalled by a busy machine is not taken
for an unreachable Redis."""

START_WAIT_S = 5.0
"""How long a service waits at start for the first ping's answer before it serves anyway."""

MAX_CONNECTIONS = 256
"""Connections one process opens to Redis at most; more calls in flight wait for one."""

POOL_WAIT_S = 60.0
"""How long a call waits for a free connection before it fails as if Redis did not answer."""

CLUSTER_CONNECTIONS = 1024
"""Connections to each node of a Redis Cluster at most (its client has no waiting pool: the
bound is set well above what a controller's swarms keep in flight)."""

Client = aioredis.Redis | RedisCluster
"""A Redis client as the services use it: one server, or a Redis Cluster (`redis+cluster://`).
Every key of one swarm shares the hash tag `{SWARM}`, so every script and every multi-key read
of a swarm stays on one slot and the same code runs on both."""

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""URL schemes that name a Redis Cluster (any one node; the client finds the rest), and the
plain scheme each stands for."""

URL_FORMS = (
    "redis://[:PASSWORD@]HOST:PORT/DB, rediss://…, unix://…, "
    "or redis+cluster://[:PASSWORD@]HOST:PORT for a Redis Cluster"
)
"""The URL forms a service takes, for the message that refuses another one."""

UNREACHABLE: tuple[type[Exception], ...] = (
    redis_errors.ConnectionError,  # also AuthenticationError and BusyLoadingError (LOADING)
    redis_errors.TimeoutError,
    # A cluster that cannot serve a slot right now (a failover under way, too few masters):
    # CLUSTERDOWN, TRYAGAIN, and a client that cannot reach any node it knows.
    redis_errors.ClusterDownError,
    redis_errors.TryAgainError,
    redis_errors.ClusterError,
    redis_errors.MasterDownError,
)
"""What a Redis call raises when Redis cannot be reached or cannot answer yet."""

REASON = "redis_unavailable"


def unreachable(exc: BaseException) -> bool:
    """True when `exc` says Redis cannot be reached (as opposed to a refused command)."""
    return isinstance(exc, UNREACHABLE)


def unavailable() -> errors.Unavailable:
    """The refusal a call gets while Redis is unreachable (UNAVAILABLE / 503)."""
    return errors.Unavailable(REASON, f"Redis does not answer ({VARIABLE}); try again later")


def _cluster_url(url: str) -> str | None:
    """The plain URL a `redis+cluster://` or `rediss+cluster://` URL stands for, else None."""
    scheme, sep, rest = url.partition("://")
    plain = CLUSTER_SCHEMES.get(scheme.lower()) if sep else None
    return f"{plain}://{rest}" if plain else None


def connect(url: str) -> Client:
    """A client for a service: bounded connects and reads, a few quick retries for a blip.

    `redis+cluster://HOST:PORT` (or `rediss+cluster://`) names any node of a Redis Cluster:
    the client reads the slot map there and follows MOVED/ASK redirections and failovers.
    A longer outage surfaces within about a second as a `redis.exceptions.ConnectionError` (or
    a cluster error) and is handled by the caller's own backoff (`RedisLink`). Options in the
    URL's query win.

    Raises:
        ValueError: the URL is not a Redis URL.
    """
    options: dict[str, Any] = {
        "socket_connect_timeout": 5,
        # Longer than any blocking read (WatchRecovery blocks for a second) and any script;
        # only a connection that went silent (a partition) waits this long.
        "socket_timeout": 30,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
    }
    cluster = _cluster_url(url)
    if cluster is not None:
        parse_url(cluster)
        # A database other than 0 does not exist on a cluster: refuse it rather than ignore it.
        if parse_url(cluster).get("db", 0) not in (0, "0"):
            raise ValueError("a Redis Cluster has only database 0")
        return RedisCluster.from_url(cluster, max_connections=CLUSTER_CONNECTIONS, **options)
    # A blocking pool: a burst of calls (a storm over many swarms) waits for a connection
    # rather than failing with "Too many connections" (redis-py's default pool refuses the
    # 101st call in flight).
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=MAX_CONNECTIONS, timeout=POOL_WAIT_S, **options
    )
    return aioredis.Redis.from_pool(pool)  # closing the client closes its pool


def check_url(url: str) -> None:
    """Check that `url` is a Redis URL without connecting.

    Raises:
        ValueError: it is not (the message may quote the URL: never log it).
    """
    cluster = _cluster_url(url)
    parsed = parse_url(cluster or url)
    if cluster is not None and parsed.get("db", 0) not in (0, "0"):
        raise ValueError("a Redis Cluster has only database 0")


def address(client: Client) -> str:
    """Redis's host:port (or socket path) as the client has it: never the password. For a
    cluster, the node it was pointed at, marked `cluster:`."""
    if isinstance(client, RedisCluster):
        nodes = client.nodes_manager.startup_nodes or {}
        first = next(iter(nodes.values()), None)
        return f"cluster:{first.host}:{first.port}" if first else "cluster"
    kwargs = client.connection_pool.connection_kwargs
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


async def wait(event: asyncio.Event, timeout: float) -> bool:
    """Wait for `event` at most `timeout` seconds; True when it is set."""
    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
    # lands as the event is set, and a loop cancelled that way never ends.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()


Subscriber = Callable[[bool], Awaitable[None]]
"""Called with True when Redis answers again (or at first), False when it stops answering."""


class RedisLink:
    """Whether Redis answers, followed by one background task (started by `start`).

    Args:
        client: The Redis client to ping (the one the process uses).
        initial_s, cap_s: The backoff between attempts while Redis does not answer.
        check_every_s: The interval between pings while it answers.
        probe_timeout_s: The longest one ping may take.
    """

    def __init__(
        self,
        client: Client,
        *,
        initial_s: float = INITIAL_S,
        cap_s: float = CAP_S,
        check_every_s: float = CHECK_EVERY_S,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
    ) -> None:
        self._client = client
        self.address = address(client)
        self._initial_s = initial_s
        self._cap_s = cap_s
        self._check_every_s = check_every_s
        self._probe_timeout_s = probe_timeout_s
        self._state: bool | None = None
        self.up = asyncio.Event()
        """Set while Redis answers (cleared while a reported failure is being checked)."""
        self.down = asyncio.Event()
        """Set while Redis is known not to answer."""
        self._known = asyncio.Event()
        self._suspect = asyncio.Event()
        self._subscribers: list[Subscriber] = []
        self._users = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def available(self) -> bool | None:
        """True while Redis answers, False while it does not, None before the first ping."""
        return self._state

    def subscribe(self, subscriber: Subscriber) -> None:
        """Call `subscriber` on every change of state (the first ping's answer included)."""
        self._subscribers.append(subscriber)

    def suspect(self) -> None:
        """A caller saw a Redis call fail as unreachable: check now (no-op while known down).
        Until that check answers, `wait_up` waits for it."""
        if self._state is not False:
            self.up.clear()
            self._suspect.set()

    async def wait_up(self, stop: asyncio.Event | None = None) -> bool:
        """Wait until Redis answers (True) or `stop` is set (False).

        False means `stop` only: Redis answering and failing again before this waiter ran (a
        flapping link) is waited through, never taken for a stop."""
        while not self.up.is_set():
            if stop is not None and stop.is_set():
                return False
            await waiting.first((self.up,) if stop is None else (self.up, stop))
        return True

    async def wait_known(self, timeout: float) -> bool | None:
        """Wait (at most `timeout`) for the first ping's answer; the state then."""
        await wait(self._known, timeout)
        return self._state

    async def start(self) -> None:
        """Start following Redis (counted: each `start` is matched by one `stop`)."""
        self._users += 1
        if self._task is None:
            self._task = asyncio.create_task(self._follow(), name="redis-link")

    async def stop(self) -> None:
        """Stop following Redis once every user stopped."""
        self._users = max(0, self._users - 1)
        if self._users == 0 and self._task is not None:
            task, self._task = self._task, None
            await waiting.cancel([task])

    async def _probe(self) -> BaseException | None:
        try:
            async with asyncio.timeout(self._probe_timeout_s):
                await self._client.ping()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # anything but PONG: Redis does not answer usefully
            return exc
        return None

    async def _set(self, state: bool) -> None:
        self._state = state
        if state:
            self.down.clear()
            self.up.set()
        else:
            self.up.clear()
            self.down.set()
        self._known.set()
        await waiting.tell(self._subscribers, state, log, "redis_subscriber_failed")

    async def _follow(self) -> None:
        backoff = Backoff(self._initial_s, self._cap_s)
        attempt = 0
        since = time.monotonic()
        while True:
            if self._state is True:
                await wait(self._suspect, self._check_every_s)
            self._suspect.clear()
            error = await self._probe()
            if error is None:
                if self._state is not True:
                    after: dict[str, Any] = {}
                    if attempt:
                        after = {
                            "attempts": attempt,
                            "unavailable_s": round(time.monotonic() - since, 1),
                        }
                    logs.event(
                        log, "redis_available", variable=VARIABLE, address=self.address, **after
                    )
                    await self._set(True)
                self.up.set()  # also after a suspicion the check did not confirm
                attempt = 0
                backoff.reset()
                continue
            if self._state is not False:
                since = time.monotonic()
                await self._set(False)
            attempt += 1
            delay = backoff.next()
            logs.event(
                log,
                "redis_unavailable",
                logging.WARNING,
                variable=VARIABLE,
                address=self.address,
                attempt=attempt,
                retry_in_s=delay,
                exception=type(error).__name__,
            )
            await asyncio.sleep(delay)
