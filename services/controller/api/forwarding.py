"""Forwarding a write to the replica that holds the swarm's lease: one road for gRPC and HTTP.

Every replica answers every call; a write that reaches one without the swarm's lease
(`hubs.NotHolder`) is sent on to the replica that holds it, with the caller's own credential
(checked there again), and answered with what the holder answered. Forwarded once at most: a
call already forwarded, or with no live holder to go to (or one that advertised no address for
this transport), is answered UNAVAILABLE `not_leader`; so is a holder that does not answer,
saying where it answers. The caller sends it again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeAlias, TypeVar

import aiohttp
import grpc
from aiohttp import web

from services.common import rpc, tls, tls_settings
from services.controller import hub as hubs
from services.controller import sharing

FORWARDED_BY_HEADER: Final = "X-Agentihooks-Forwarded-By"
"""The HTTP header a forwarded call carries (the forwarding replica's holder id)."""
FORWARDED_BY_METADATA: Final = "agentihooks-forwarded-by"
"""The gRPC metadata a forwarded call carries (the forwarding replica's holder id)."""
TIMEOUT_S: Final = 60.0
"""How long the holder has to answer a forwarded call."""

_T = TypeVar("_T")
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


class Unanswered(Exception):
    """The holder did not answer (gone, or not reachable from here)."""


async def to_holder(
    hub: hubs.Hub,
    refusal: hubs.NotHolder,
    *,
    forwarded: bool,
    address: Callable[[sharing.Peer], str | None],
    send: Callable[[str], Awaitable[_T]],
) -> _T:
    """Send a call refused with `refusal` to the holder of its swarm's lease at the address
    `address` picks from where it answers; `send` raises `Unanswered` when it does not.

    Raises:
        hubs.NotHolder: the call was `forwarded` already, no live holder advertised an address
            for this transport, or the holder did not answer.
    """
    if forwarded:
        raise refusal
    peer = await hub.holder_elsewhere(refusal.swarm)
    at = None if peer is None else address(peer)
    if at is None:
        raise refusal
    try:
        return await send(at)
    except Unanswered:
        raise hubs.NotHolder(
            refusal.swarm,
            f"this controller does not hold the lease of swarm {refusal.swarm}; its holder at"
            f" {at} did not answer: try again",
        ) from None


@dataclasses.dataclass(frozen=True)
class Relayed:
    """The holder's answer to a forwarded HTTP call."""

    status: int
    body: bytes
    content_type: str


async def http(hub: hubs.Hub, request: web.Request, swarm: str) -> Relayed:
    """Forward an HTTP write for `swarm` (its method, path, body and credential) to the holder
    of its lease."""

    async def send(at: str) -> Relayed:
        headers = {
            "Authorization": request.headers.get("Authorization", ""),
            "Content-Type": request.headers.get("Content-Type", "application/json"),
            FORWARDED_BY_HEADER: hub.holder,
        }
        conf = tls_settings.from_environment()
        context = tls.http_client_context(conf)
        scheme = "http" if context is None else "https"
        extra: dict[str, Any] = {}
        if context is not None:
            extra["ssl"] = context
            if conf.peer_name:  # replicas advertise Pod IPs; their certificates name the Service
                extra["server_hostname"] = conf.peer_name
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session,
                session.request(
                    request.method,
                    f"{scheme}://{at}{request.rel_url.path}",
                    data=await request.read(),
                    headers=headers,
                    **extra,
                ) as answer,
            ):
                return Relayed(
                    answer.status,
                    await answer.read(),
                    answer.headers.get("Content-Type", "application/json"),
                )
        except (aiohttp.ClientError, TimeoutError):
            raise Unanswered() from None

    return await to_holder(
        hub,
        hubs.NotHolder(swarm),
        forwarded=FORWARDED_BY_HEADER in request.headers,
        address=lambda peer: peer.http,
        send=send,
    )


class Channels:
    """Forwards gRPC calls, keeping one channel to each other replica."""

    def __init__(self, hub: hubs.Hub, service: str) -> None:
        self._hub = hub
        self._service = service
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def aclose(self) -> None:
        """Close the channels to the other replicas."""
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close()

    async def forward(
        self,
        name: str,
        response: Callable[[bytes], Any],
        refusal: hubs.NotHolder,
        request: Any,
        context: Context,
    ) -> Any:
        """Forward the call of method `name` (a list: a client stream's messages) to the
        holder, with the caller's metadata, and answer with what it answered (its refusal
        too, reason and all)."""
        incoming = rpc.metadata(context)

        async def send(at: str) -> Any:
            channel = self._channels.get(at)
            if channel is None:
                channel = self._channels[at] = tls.channel(at, peer=True)
            method = f"/{self._service}/{name}"
            metadata = [(k, v) for k, v in incoming.items() if not k.startswith((":", "grpc-"))] + [
                (FORWARDED_BY_METADATA, self._hub.holder)
            ]
            try:
                if isinstance(request, list):
                    stream = channel.stream_unary(
                        method, request_serializer=_serialize, response_deserializer=response
                    )
                    return await stream(iter(request), metadata=metadata, timeout=TIMEOUT_S)
                unary = channel.unary_unary(
                    method, request_serializer=_serialize, response_deserializer=response
                )
                return await unary(request, metadata=metadata, timeout=TIMEOUT_S)
            except grpc.aio.AioRpcError as error:
                trailing = error.trailing_metadata() or ()
                if not any(k == rpc.REASON_KEY for k, _ in trailing):
                    raise Unanswered() from None
                context.set_trailing_metadata(tuple((k, v) for k, v in trailing))
                await context.abort(error.code(), error.details() or "")

        return await to_holder(
            self._hub,
            refusal,
            forwarded=FORWARDED_BY_METADATA in incoming,
            address=lambda peer: peer.grpc,
            send=send,
        )


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())
