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
