"""Revoked token ids, kept in Redis so every replica sees a revocation at once."""

from __future__ import annotations

import time

from services.common import redis_link

# Keep a revocation a little past the token's expiry: after that the signature check refuses it.
_MARGIN_S = 120


def key(swarm: str, token_id: str) -> str:
    """The Redis key of one revoked token id, hash-tagged by swarm."""
    return f"agentihooks:{{{swarm}}}:revoked:{token_id}"


class RedisRevocations:
    """The `tokens.Revocations` port on Redis."""

    def __init__(self, client: redis_link.Client) -> None:
        self._redis = client

    async def is_revoked(self, swarm: str, token_id: str) -> bool:
        return bool(await self._redis.exists(key(swarm, token_id)))

    async def revoke(self, swarm: str, token_id: str, expires_at: int) -> None:
        ttl = max(1, int(expires_at - time.time()) + _MARGIN_S)
        await self._redis.set(key(swarm, token_id), "1", ex=ttl)
