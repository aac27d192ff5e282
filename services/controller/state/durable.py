"""Acknowledge only what is durable: a write is answered `accepted` only once Redis confirms that
it reached the configured replicas (`WAIT`) and, with `AGENTIHOOKS_REDIS_WAIT_AOF`, was fsynced to
the append-only files (`WAITAOF`, Redis 7.2 or later).

Redis replicates asynchronously: a master answers a write before any replica has it, so a
failover that promotes a replica that had not caught up loses writes the master answered. WAIT
closes that window for the writes it confirms, with three things to get right:

- WAIT waits for the replication offset of the *calling connection's* last write. redis-py's
  pools hand out a different connection per command, and on a Redis Cluster it sends WAIT to
  every master on arbitrary connections. So the acknowledgement runs on one connection of the
  master serving the write's slot: a non-transactional pipeline on a single Redis, one
  connection of the slot's node on a cluster (`ClusterNode.execute_pipeline`).
- A repeated, idempotent call (the same accepted choice asked again) writes nothing, so no
  connection of its own has an offset covering the original write. The acknowledgement makes a
  tiny write of its own first (it increments the swarm's `acks` counter) and WAITs on that same
  connection: replication offsets only grow, so that covers every earlier write to the master,
  whichever connection made it.
- Between the write and the acknowledgement the slot may have failed over to a replica that
  never got the write. The same script that increments the counter first checks the write's
  `Fact`s on the master it runs on, and writes nothing when one does not hold.

A write that is not confirmed within `AGENTIHOOKS_REDIS_WAIT_TIMEOUT_MS` is answered UNAVAILABLE
`not_durable` (`NotDurable`): it may be there and may survive, but it was not acknowledged. Every
acknowledged step is idempotent, so the caller sends the call again and is answered once the
write is durable. An unreachable Redis raises the client's error (`redis_unavailable`).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.resources
import json
import logging
from collections.abc import Sequence
from typing import Any, Final

import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster

from services.common import errors, logs, redis_link, settings

log = logging.getLogger("services.controller.durable")

REASON: Final = "not_durable"
"""The reason code of an acknowledgement Redis did not confirm in time (UNAVAILABLE / 503)."""

REPLICAS: Final = settings.PREFIX + "REDIS_WAIT_REPLICAS"
AOF: Final = settings.PREFIX + "REDIS_WAIT_AOF"
TIMEOUT: Final = settings.PREFIX + "REDIS_WAIT_TIMEOUT_MS"

_SOURCE: Final = (
    importlib.resources.files(__package__)
    .joinpath("scripts", "acknowledge.lua")
    .read_text(encoding="utf-8")
)
_SCRIPT: Final = "\n".join(
    line for line in _SOURCE.splitlines() if not line.lstrip().startswith("--")
)
"""The script as sent with each EVAL: its comment lines left out."""


class Read(enum.Enum):
    """How the acknowledgement script reads a fact's key."""

    GET = "GET"
    HGET = "HGET"
    SISMEMBER = "SISMEMBER"
    XRANGE = "XRANGE"
    HLEN = "HLEN"


class Check(enum.Enum):
    """What the read must show."""

    PRESENT = "present"
    ABSENT = "absent"
    EQUALS = "equals"


@dataclasses.dataclass(frozen=True)
class Fact:
    """One thing an acknowledged write left in Redis, checked on the master that confirms it.

    Use the constructors: `is_set`, `is_unset`, `field_is`, `length_is`, `has_member`,
    `has_entry`.
    """

    key: str
    read: Read
    arg: str = ""
    check: Check = Check.PRESENT
    value: str = ""

    @classmethod
    def is_set(cls, key: str) -> Fact:
        """The string key exists."""
        return cls(key, Read.GET)

    @classmethod
    def is_unset(cls, key: str) -> Fact:
        """The string key does not exist."""
        return cls(key, Read.GET, check=Check.ABSENT)

    @classmethod
    def field_is(cls, key: str, field: str, value: str) -> Fact:
        """The hash's field holds `value`."""
        return cls(key, Read.HGET, field, Check.EQUALS, value)

    @classmethod
    def length_is(cls, key: str, fields: int) -> Fact:
        """The hash has exactly `fields` fields (none removed by the write came back)."""
        return cls(key, Read.HLEN, check=Check.EQUALS, value=str(fields))

    @classmethod
    def has_member(cls, key: str, member: str) -> Fact:
        """The set holds `member`."""
        return cls(key, Read.SISMEMBER, member)

    @classmethod
    def has_entry(cls, key: str, entry_id: str) -> Fact:
        """The stream holds the entry `entry_id`."""
        return cls(key, Read.XRANGE, entry_id)

    def to_json(self) -> dict[str, str]:
        return {
            "read": self.read.value,
            "arg": self.arg,
            "check": self.check.value,
            "value": self.value,
        }


class NotDurable(errors.Unavailable):
    """Redis did not confirm an acknowledged write in time: answered UNAVAILABLE `not_durable`
    instead of accepted; nothing more was done, and the call may be sent again."""

    def __init__(self, message: str) -> None:
        super().__init__(REASON, message)


class Unsupported(Exception):
    """The Redis reached cannot give what the settings ask for (WAITAOF on Redis before 7.2,
    or without its append-only file): the controller refuses to start with this message."""


AGAIN: Final = "send the call again: it is answered once the write is durable"

LOST: Final = (
    "Redis could not confirm the write: the master of its slot changed or no longer holds it "
    f"(a failover under way); {AGAIN}"
)


def _short(wait: settings.RedisWait, replicas: int, fsynced: bool) -> str:
    """Why the wait fell short, for `NotDurable`'s message."""
    what = []
    if replicas < wait.replicas:
        verb = "fsynced it" if wait.aof else "have it"
        what.append(f"{replicas} of the {wait.replicas} replicas {REPLICAS} asks for {verb}")
    if not fsynced:
        what.append(f"the master did not fsync it to its append-only file ({AOF})")
    return (
        f"Redis did not confirm the write within {wait.timeout_ms} ms ({TIMEOUT}): "
        f"{'; '.join(what)}. It is not durable yet and could be lost if the master fails; "
        f"{AGAIN}"
    )


class Durability:
    """Confirms acknowledged writes as the settings ask (see the module).

    Args:
        client: The Redis client the writes went through.
        wait: How durable a write must be; the default waits for nothing.
    """

    def __init__(self, client: redis_link.Client, wait: settings.RedisWait) -> None:
        self._client = client
        self.wait = wait
        self._unsupported_logged = False

    def _wait_command(self) -> tuple[str | int, ...]:
        if self.wait.aof:
            return ("WAITAOF", 1, self.wait.replicas, self.wait.timeout_ms)
        return ("WAIT", self.wait.replicas, self.wait.timeout_ms)

    async def confirm(self, anchor: str, facts: Sequence[Fact]) -> None:
        """Return once the writes to the master of `anchor`'s slot so far, `facts` among them,
        are as durable as the settings ask; at once when they ask for nothing.

        Args:
            anchor: A counter key in the slot of the facts' keys (`keys.acks`).
            facts: What the acknowledged write left there.

        Raises:
            NotDurable: not confirmed in time, a fact does not hold on that master, or the
                server refused the wait.
            redis.exceptions.ConnectionError, TimeoutError (and the cluster's own): Redis is
                unreachable (answered `redis_unavailable`).
        """
        if not self.wait.waits:
            return
        script: tuple[str | int, ...] = (
            "EVAL",
            _SCRIPT,
            1 + len(facts),
            anchor,
            *(f.key for f in facts),
            json.dumps([f.to_json() for f in facts]),
        )
        held, confirmed = await _on_one_connection(
            self._client, anchor, [script, self._wait_command()]
        )
        for reply in (held, confirmed):
            if isinstance(reply, Exception):
                raise self._refusal(reply, anchor)
        if int(held) != 1:
            logs.event(log, "not_durable", logging.WARNING, anchor=anchor, cause="fact_missing")
            raise NotDurable(LOST)
        self._check(confirmed, anchor)

    def _check(self, confirmed: Any, anchor: str) -> None:
        if self.wait.aof:
            fsynced, replicas = (int(n) for n in confirmed)
            local = fsynced >= 1
        else:
            replicas, local = int(confirmed), True
        if local and replicas >= self.wait.replicas:
            return
        logs.event(
            log,
            "not_durable",
            logging.WARNING,
            anchor=anchor,
            cause="timeout",
            replicas=replicas,
            wanted=self.wait.replicas,
            fsynced=local,
            timeout_ms=self.wait.timeout_ms,
        )
        raise NotDurable(_short(self.wait, replicas, local))

    def _refusal(self, exc: Exception, anchor: str) -> Exception:
        """What a failed acknowledgement raises: an unreachable Redis as it is, a moved slot
        or a refused wait as `NotDurable` (logged by type, never by message)."""
        if redis_link.unreachable(exc):
            return exc
        if isinstance(exc, redis_errors.AskError):  # MOVED or ASK: the slot is elsewhere now
            logs.event(log, "not_durable", logging.WARNING, anchor=anchor, cause="moved")
            return NotDurable(LOST)
        if self.wait.aof and _unknown_command(exc):
            if not self._unsupported_logged:
                self._unsupported_logged = True
                logs.event(log, "redis_waitaof_unsupported", logging.ERROR, variable=AOF)
            return NotDurable(f"the Redis master does not run WAITAOF (Redis 7.2 or later; {AOF})")
        logs.event(
            log,
            "not_durable",
            logging.ERROR,
            anchor=anchor,
            cause="refused",
            exception=type(exc).__name__,
        )
        return NotDurable(f"Redis refused to confirm the write ({type(exc).__name__}); {AGAIN}")


def _unknown_command(exc: Exception) -> bool:
    return isinstance(exc, redis_errors.ResponseError) and "unknown command" in str(exc).lower()


async def _on_one_connection(
    client: redis_link.Client, key: str, commands: Sequence[Sequence[str | int]]
) -> list[Any]:
    """Send `commands` in order on one connection to the master serving `key`'s slot; each
    reply, or the exception it came back as."""
    if isinstance(client, RedisCluster):
        node = await _master_of(client, key)
        sent = [PipelineCommand(i, *command) for i, command in enumerate(commands)]
        await node.execute_pipeline(sent)
        return [c.result for c in sent]
    async with client.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies


async def _master_of(client: RedisCluster, key: str) -> ClusterNode:
    await client.initialize()  # at once once initialized: the slot map the last call left
    try:
        node = client.get_node_from_key(key)
    except redis_errors.SlotNotCoveredError:
        node = None
    if node is None:
        raise redis_errors.ClusterDownError("the key's slot is not served")
    return node


async def _masters(client: redis_link.Client) -> list[aioredis.Redis | ClusterNode]:
    if isinstance(client, RedisCluster):
        await client.initialize()
        return list(client.get_primaries())
    return [client]


def _name(target: aioredis.Redis | ClusterNode) -> str:
    if isinstance(target, ClusterNode):
        return f"{target.host}:{target.port}"
    return redis_link.address(target)


async def check(client: redis_link.Client, wait: settings.RedisWait) -> None:
    """Check at start that every master can give what `wait` asks for.

    With `aof`, each master must run WAITAOF (Redis 7.2 or later) with its append-only file
    on; a master with fewer connected replicas than `replicas` is logged (`redis_replicas_short`),
    not refused: a replica may be on its way, and until then acknowledgements answer
    `not_durable`.

    Raises:
        Unsupported: what the settings ask for cannot be had here (the message says why).
        redis.exceptions.ConnectionError and the like: Redis does not answer.
    """
    if not wait.waits:
        return
    for target in await _masters(client):
        where = _name(target)
        if wait.aof:
            try:
                await target.execute_command("WAITAOF", 0, 0, 1)
            except redis_errors.ResponseError as exc:
                if not _unknown_command(exc):
                    raise
                server = await target.execute_command("INFO", "server")
                version = _info(server).get("redis_version", "unknown")
                raise Unsupported(
                    f"{AOF}=true needs WAITAOF (Redis 7.2 or later), but the Redis at {where} "
                    f"is {version}: upgrade Redis or set {AOF}=false"
                ) from None
            persistence = _info(await target.execute_command("INFO", "persistence"))
            if str(persistence.get("aof_enabled", "0")) != "1":
                raise Unsupported(
                    f"{AOF}=true needs the append-only file, but the Redis at {where} runs "
                    f"without it: set appendonly yes there or set {AOF}=false"
                )
        replication = _info(await target.execute_command("INFO", "replication"))
        connected = int(replication.get("connected_slaves", 0))
        if connected < wait.replicas:
            logs.event(
                log,
                "redis_replicas_short",
                logging.WARNING,
                address=where,
                connected=connected,
                wanted=wait.replicas,
                variable=REPLICAS,
            )


def _info(reply: Any) -> dict[str, Any]:
    """An INFO reply as a dict, whether the client parsed it or not."""
    if isinstance(reply, dict):
        return reply
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    found: dict[str, Any] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            found[name.strip()] = value.strip()
    return found
