"""Credentials: store grants and worker credentials as signed tokens, plus the operator token.

Grants and worker credentials are JWTs (HS256, PyJWT) signed with the shared grant key; each has
an id (`jti`) so it can be revoked before it expires. Revocation itself is I/O and lives behind the
`Revocations` port (`services.common.revocations` keeps it in Redis). This module is the one token
checker of the project: every service calls it, none parses a token itself.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from typing import Any, Protocol

import jwt
from jwt.algorithms import HMACAlgorithm

from services.common import errors

ISSUER = "agentihooks-controller"
STORE_AUDIENCE = "agentihooks-checkpoint-store"
CONTROL_AUDIENCE = "agentihooks-controller"
ALGORITHM = "HS256"
DEFAULT_GRANT_TTL_S = 24 * 3600
# Tolerate small clock differences between the controller and the store.
LEEWAY_S = 30


class Right(enum.StrEnum):
    """What a store grant allows."""

    READ = "read"
    WRITE = "write"


@dataclasses.dataclass(frozen=True)
class Grant:
    """A store grant: one attempt's scope with read and/or write rights."""

    grant_id: str
    swarm: str
    seat: str
    task_id: str
    task_generation: int
    execution_id: str
    execution_generation: int
    rights: frozenset[Right]
    expires_at: int

    def allows(self, right: Right) -> bool:
        return right in self.rights


@dataclasses.dataclass(frozen=True)
class WorkerCredential:
    """An attempt's own credential for calling the controller."""

    credential_id: str
    swarm: str
    seat: str
    execution_id: str
    execution_generation: int
    expires_at: int


class Revocations(Protocol):
    """Where revoked token ids are kept."""

    async def is_revoked(self, swarm: str, token_id: str) -> bool: ...

    async def revoke(self, swarm: str, token_id: str, expires_at: int) -> None: ...


def new_token_id() -> str:
    """A fresh random token id."""
    return secrets.token_hex(16)


def mint_grant(
    key: str,
    *,
    swarm: str,
    seat: str,
    task_id: str,
    task_generation: int,
    execution_id: str,
    execution_generation: int,
    rights: frozenset[Right],
    ttl_s: int = DEFAULT_GRANT_TTL_S,
    grant_id: str | None = None,
    now: float | None = None,
) -> tuple[Grant, str]:
    """Mint a store grant for one attempt's scope; returns the grant and its token."""
    issued = int(now if now is not None else time.time())
    grant = Grant(
        grant_id=grant_id or new_token_id(),
        swarm=swarm,
        seat=seat,
        task_id=task_id,
        task_generation=task_generation,
        execution_id=execution_id,
        execution_generation=execution_generation,
        rights=rights,
        expires_at=issued + ttl_s,
    )
    claims = {
        "iss": ISSUER,
        "aud": STORE_AUDIENCE,
        "typ": "grant",
        "jti": grant.grant_id,
        "iat": issued,
        "exp": grant.expires_at,
        "swarm": swarm,
        "seat": seat,
        "task": task_id,
        "tgen": task_generation,
        "exe": execution_id,
        "egen": execution_generation,
        "rights": sorted(r.value for r in rights),
    }
    return grant, _encode(claims, key)


def mint_worker_credential(
    key: str,
    *,
    swarm: str,
    seat: str,
    execution_id: str,
    execution_generation: int,
    ttl_s: int = 30 * 24 * 3600,
    credential_id: str | None = None,
    now: float | None = None,
) -> tuple[WorkerCredential, str]:
    """Mint an attempt's worker credential; returns it and its token."""
    issued = int(now if now is not None else time.time())
    cred = WorkerCredential(
        credential_id=credential_id or new_token_id(),
        swarm=swarm,
        seat=seat,
        execution_id=execution_id,
        execution_generation=execution_generation,
        expires_at=issued + ttl_s,
    )
    claims = {
        "iss": ISSUER,
        "aud": CONTROL_AUDIENCE,
        "typ": "worker",
        "jti": cred.credential_id,
        "iat": issued,
        "exp": cred.expires_at,
        "swarm": swarm,
        "seat": seat,
        "exe": execution_id,
        "egen": execution_generation,
    }
    return cred, _encode(claims, key)


_HS256 = HMACAlgorithm(HMACAlgorithm.SHA256)


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


_HEADER = _b64(
    json.dumps({"alg": ALGORITHM, "typ": "JWT"}, separators=(",", ":"), sort_keys=True).encode()
)


@functools.lru_cache(maxsize=4)
def _signing_key(key: str) -> bytes:
    """The grant key as PyJWT signs with it, checked once per key (it refuses an empty key and
    an asymmetric one, as `jwt.encode` would on every call)."""
    prepared: bytes = _HS256.prepare_key(key)
    return prepared


def _encode(claims: Mapping[str, Any], key: str) -> str:
    """`claims` as an HS256 JWT, byte for byte what `jwt.encode(claims, key, "HS256")` makes
    (the same header and JSON, RFC 7515's compact form), without re-checking the key on every
    call: that check loads the key as JSON and as an X.509 certificate, and was most of a
    replacement's credential cost. `_decode` verifies with PyJWT, as every checker does."""
    payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = _HEADER + b"." + payload
    signature = _HS256.sign(signing_input, _signing_key(key))
    return (signing_input + b"." + _b64(signature)).decode("ascii")


def _decode(key: str, token: str, audience: str, typ: str) -> Mapping[str, Any]:
    try:
        claims: Mapping[str, Any] = jwt.decode(
            token,
            key,
            algorithms=[ALGORITHM],
            audience=audience,
            issuer=ISSUER,
            leeway=LEEWAY_S,
            options={"require": ["exp", "iat", "jti", "aud", "iss"]},
        )
    except jwt.ExpiredSignatureError:
        raise errors.Unauthenticated("credential expired") from None
    except jwt.PyJWTError:
        # Forged, malformed, wrong audience: say no more than that.
        raise errors.Unauthenticated("credential invalid") from None
    if claims.get("typ") != typ:
        raise errors.Unauthenticated("credential invalid")
    return claims


def _claim_str(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value:
        raise errors.Unauthenticated("credential invalid")
    return value


def _claim_int(claims: Mapping[str, Any], name: str) -> int:
    value = claims.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise errors.Unauthenticated("credential invalid")
    return value


async def check_grant(key: str, token: str | None, revocations: Revocations) -> Grant:
    """Check a store grant's signature, expiry and revocation; return the grant."""
    if not token:
        raise errors.Unauthenticated("credential missing")
    claims = _decode(key, token, STORE_AUDIENCE, "grant")
    raw_rights = claims.get("rights")
    if not isinstance(raw_rights, list) or not all(r in ("read", "write") for r in raw_rights):
        raise errors.Unauthenticated("credential invalid")
    grant = Grant(
        grant_id=_claim_str(claims, "jti"),
        swarm=_claim_str(claims, "swarm"),
        seat=_claim_str(claims, "seat"),
        task_id=_claim_str(claims, "task"),
        task_generation=_claim_int(claims, "tgen"),
        execution_id=_claim_str(claims, "exe"),
        execution_generation=_claim_int(claims, "egen"),
        rights=frozenset(Right(r) for r in raw_rights),
        expires_at=_claim_int(claims, "exp"),
    )
    if await revocations.is_revoked(grant.swarm, grant.grant_id):
        raise errors.Unauthenticated("credential revoked")
    return grant


async def check_worker_credential(
    key: str, token: str | None, revocations: Revocations
) -> WorkerCredential:
    """Check a worker credential's signature, expiry and revocation; return it."""
    if not token:
        raise errors.Unauthenticated("credential missing")
    claims = _decode(key, token, CONTROL_AUDIENCE, "worker")
    cred = WorkerCredential(
        credential_id=_claim_str(claims, "jti"),
        swarm=_claim_str(claims, "swarm"),
        seat=_claim_str(claims, "seat"),
        execution_id=_claim_str(claims, "exe"),
        execution_generation=_claim_int(claims, "egen"),
        expires_at=_claim_int(claims, "exp"),
    )
    if await revocations.is_revoked(cred.swarm, cred.credential_id):
        raise errors.Unauthenticated("credential revoked")
    return cred


def is_worker_token(token: str) -> bool:
    """True when `token` is shaped like a signed token (it may still be forged)."""
    return token.count(".") == 2 and token.startswith("eyJ")


def operator_matches(expected: str, presented: str | None) -> bool:
    """Constant-time comparison of the operator token."""
    if not presented:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())


def hash_secret(secret: str) -> str:
    """How master credentials are stored: only their SHA-256."""
    return hashlib.sha256(secret.encode()).hexdigest()


def bearer(metadata: Mapping[str, str] | None) -> str | None:
    """The token of an `authorization: Bearer …` header, or None."""
    if not metadata:
        return None
    value = metadata.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
