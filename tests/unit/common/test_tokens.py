"""Grants and worker credentials: signed, scoped, expiring, revocable (the one token checker)."""

from __future__ import annotations

import time

import jwt
import pytest

from services.common import errors, tokens

KEY = "k" * 40


class MemoryRevocations:
    """Pure-logic fake of the revocation port (the Redis one is tested in integration)."""

    def __init__(self) -> None:
        self.revoked: set[tuple[str, str]] = set()

    async def is_revoked(self, swarm: str, token_id: str) -> bool:
        return (swarm, token_id) in self.revoked

    async def revoke(self, swarm: str, token_id: str, expires_at: int) -> None:
        self.revoked.add((swarm, token_id))


def _grant(**over: object) -> tuple[tokens.Grant, str]:
    args: dict[str, object] = dict(
        swarm="example",
        seat="eng-2",
        task_id="t-1",
        task_generation=1,
        execution_id="e-1",
        execution_generation=1,
        rights=frozenset({tokens.Right.READ}),
    )
    args.update(over)
    return tokens.mint_grant(KEY, **args)  # type: ignore[arg-type]


async def test_grant_round_trip_keeps_its_scope() -> None:
    """A grant is minted for one attempt's scope with rights and an expiry."""
    grant, token = _grant(rights=frozenset({tokens.Right.READ, tokens.Right.WRITE}))
    checked = await tokens.check_grant(KEY, token, MemoryRevocations())
    assert checked == grant
    assert checked.allows(tokens.Right.WRITE)


async def test_forged_grant_is_refused() -> None:
    """A token signed with another key is refused as invalid."""
    _, token = tokens.mint_grant(
        "x" * 40,
        swarm="s",
        seat="a",
        task_id="t",
        task_generation=1,
        execution_id="e",
        execution_generation=1,
        rights=frozenset({tokens.Right.WRITE}),
    )
    with pytest.raises(errors.Unauthenticated, match="credential invalid"):
        await tokens.check_grant(KEY, token, MemoryRevocations())


async def test_tampered_claims_are_refused() -> None:
    """Changing a claim breaks the signature."""
    _, token = _grant()
    header, _payload, sig = token.split(".")
    claims = jwt.decode(token, options={"verify_signature": False})
    claims["task"] = "t-other"
    forged = jwt.encode(claims, "y" * 40, algorithm="HS256").split(".")[1]
    with pytest.raises(errors.Unauthenticated):
        await tokens.check_grant(KEY, f"{header}.{forged}.{sig}", MemoryRevocations())


async def test_expired_grant_is_refused() -> None:
    """A grant has an expiry."""
    _, token = _grant(ttl_s=1, now=time.time() - 3600)
    with pytest.raises(errors.Unauthenticated, match="expired"):
        await tokens.check_grant(KEY, token, MemoryRevocations())


async def test_revoked_grant_is_refused_on_its_next_call() -> None:
    """A revoked grant is refused at once."""
    grant, token = _grant()
    revoked = MemoryRevocations()
    await tokens.check_grant(KEY, token, revoked)
    await revoked.revoke(grant.swarm, grant.grant_id, grant.expires_at)
    with pytest.raises(errors.Unauthenticated, match="revoked"):
        await tokens.check_grant(KEY, token, revoked)


async def test_worker_credential_is_not_a_grant() -> None:
    """A worker credential cannot be used as a store grant, nor the reverse."""
    _, worker = tokens.mint_worker_credential(
        KEY, swarm="s", seat="a", execution_id="e", execution_generation=1
    )
    with pytest.raises(errors.Unauthenticated):
        await tokens.check_grant(KEY, worker, MemoryRevocations())
    _, grant = _grant()
    with pytest.raises(errors.Unauthenticated):
        await tokens.check_worker_credential(KEY, grant, MemoryRevocations())
    cred = await tokens.check_worker_credential(KEY, worker, MemoryRevocations())
    assert cred.execution_id == "e"


async def test_missing_token_is_refused() -> None:
    """No credential at all is refused."""
    with pytest.raises(errors.Unauthenticated, match="missing"):
        await tokens.check_grant(KEY, None, MemoryRevocations())


def test_bearer_header_parsing() -> None:
    """Credentials travel as `authorization: Bearer …` metadata."""
    assert tokens.bearer({"authorization": "Bearer abc"}) == "abc"
    assert tokens.bearer({"authorization": "bearer  abc "}) == "abc"
    assert tokens.bearer({"authorization": "Basic abc"}) is None
    assert tokens.bearer({}) is None


def test_operator_token_compare_and_secret_hash() -> None:
    """Operator token compared in constant time; master secrets kept only as hashes."""
    assert tokens.operator_matches("s" * 20, "s" * 20)
    assert not tokens.operator_matches("s" * 20, "t" * 20)
    assert not tokens.operator_matches("s" * 20, None)
    assert tokens.hash_secret("abc") != "abc" and len(tokens.hash_secret("abc")) == 64


@pytest.mark.parametrize("seat", ["eng-2", "équipe-1"])
def test_minted_tokens_are_what_pyjwt_makes_of_the_same_claims(seat: str) -> None:
    """Minting signs without PyJWT's per-call key check, and still makes, byte for byte, the
    token `jwt.encode` makes of the same claims: any JWT library reads it as before."""
    _, grant = _grant(seat=seat)
    _, worker = tokens.mint_worker_credential(
        KEY, swarm="example", seat=seat, execution_id="e-2", execution_generation=2
    )
    for token in (grant, worker):
        claims = jwt.decode(token, KEY, algorithms=["HS256"], options={"verify_aud": False})
        assert token == jwt.encode(claims, KEY, algorithm="HS256")
        assert jwt.get_unverified_header(token) == {"alg": "HS256", "typ": "JWT"}


@pytest.mark.parametrize(
    "key",
    [
        "",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n"
        "-----END PUBLIC KEY-----",
    ],
)
def test_a_key_pyjwt_refuses_for_hmac_mints_nothing(key: str) -> None:
    """An empty or asymmetric grant key is refused as `jwt.encode` refuses it."""
    with pytest.raises(jwt.InvalidKeyError):
        tokens.mint_worker_credential(
            key, swarm="example", seat="eng-2", execution_id="e-2", execution_generation=2
        )
