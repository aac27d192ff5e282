"""Which client a Redis URL builds, and what is said about it (pure: nothing connects)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from services.common import redis_link


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://10.0.0.7:7000",
        "redis+cluster://:secret-pass@10.0.0.7:7000/0",
        "rediss+cluster://user:secret-pass@redis.example:6380",
    ],
)
def test_a_cluster_url_builds_a_cluster_client_and_its_address_hides_the_password(
    url: str,
) -> None:
    redis_link.check_url(url)
    client = redis_link.connect(url)
    assert isinstance(client, RedisCluster)
    address = redis_link.address(client)
    assert address.startswith("cluster:") and "secret-pass" not in address
    host = url.rsplit("@", 1)[-1].split("://")[-1].split("/")[0]
    assert address == f"cluster:{host}"
    asyncio.run(client.aclose())


def test_a_plain_url_builds_a_plain_client() -> None:
    client = redis_link.connect("redis://:secret-pass@127.0.0.1:6379/2")
    assert isinstance(client, aioredis.Redis)
    assert redis_link.address(client) == "127.0.0.1:6379"
    asyncio.run(client.aclose())


@pytest.mark.parametrize("url", ["redis+cluster://10.0.0.7:7000/3", "redis+clusterx://h:1"])
def test_a_cluster_database_or_an_unknown_scheme_is_refused(url: str) -> None:
    with pytest.raises(ValueError):
        redis_link.check_url(url)
    with pytest.raises(ValueError):
        redis_link.connect(url)


async def test_a_plain_url_builds_a_client_whose_pool_waits_for_a_free_connection() -> None:
    """A burst of calls beyond the pool's size waits for a connection instead of failing with
    "Too many connections" (redis-py's default pool refuses the 101st call in flight)."""
    client = redis_link.connect("redis://127.0.0.1:6399/0")
    try:
        pool = client.connection_pool
        assert isinstance(pool, aioredis.BlockingConnectionPool)
        assert pool.max_connections == redis_link.MAX_CONNECTIONS
        assert pool.timeout == redis_link.POOL_WAIT_S
    finally:
        await client.aclose()


async def test_wait_up_returns_false_only_when_stopped_not_when_the_link_flaps() -> None:
    """Redis answering and failing again before the waiter runs (a flapping link) is waited
    through: False means the stop event, never a missed moment of answering."""
    link = redis_link.RedisLink(redis_link.connect("redis://127.0.0.1:6399/0"))
    stop = asyncio.Event()
    waiter = asyncio.create_task(link.wait_up(stop))
    await asyncio.sleep(0)
    link.up.set()
    link.up.clear()  # down again before the waiter ran
    await asyncio.sleep(0.05)
    assert not waiter.done()
    stop.set()
    assert await asyncio.wait_for(waiter, 60) is False
    link.up.set()
    assert await asyncio.wait_for(link.wait_up(asyncio.Event()), 60) is True
