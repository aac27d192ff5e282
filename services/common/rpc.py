"""gRPC glue shared by the three services: the one error mapper and the server bootstrap.

Refusals map to status codes here and nowhere else. The spec's reason code rides in the trailing
metadata key `agentihooks-reason`; the status message is the spec's text.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import functools
import inspect
import logging
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.common import addresses, errors, logs, redis_link, tls, tls_settings, tokens

REASON_KEY = "agentihooks-reason"
log = logging.getLogger("services.rpc")

STATUS: Mapping[errors.Kind, grpc.StatusCode] = {
    errors.Kind.MALFORMED: grpc.StatusCode.INVALID_ARGUMENT,
    errors.Kind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    errors.Kind.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
    errors.Kind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    errors.Kind.REFUSED: grpc.StatusCode.FAILED_PRECONDITION,
    errors.Kind.TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.Kind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
}

F = TypeVar("F", bound=Callable[..., Any])


async def abort(context: grpc.aio.ServicerContext[Any, Any], refusal: errors.Refusal) -> None:
    """End the call with the refusal's status code, reason and message."""
    context.set_trailing_metadata(((REASON_KEY, refusal.reason),))
    await context.abort(STATUS[refusal.kind], refusal.message)


Authenticator = Callable[[str | None], Awaitable[object]]
"""Checks a bearer credential (None when the call carries none); raises an `errors.Refusal`.
What it returns is the call's caller (`authenticated`)."""

_AUTHENTICATED: contextvars.ContextVar[tuple[str | None, object] | None] = contextvars.ContextVar(
    "authenticated", default=None
)


def authenticated(token: str | None) -> object | None:
    """What the authenticator returned for this call's credential `token`, so a handler does
    not check the credential a second time; None when no authenticator ran for it."""
    found = _AUTHENTICATED.get()
    if found is None or found[0] != token:
        return None
    return found[1]


class Authenticating(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Checks the credential of every call to `services` before anything else happens.

    The handler never runs for a caller with no valid credential: no request is read,
    validated or looked up, so a call with no credential and one with a forged credential get
    the same answer whatever the request names. Health checking and reflection are not among
    `services` (they need no credential).
    """

    def __init__(self, services: Iterable[str], authenticate: Authenticator) -> None:
        self._services = frozenset(services)
        self._authenticate = authenticate

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        service = details.method.lstrip("/").rpartition("/")[0]
        if handler is None or service not in self._services:
            return handler
        metadata = {str(k).lower(): str(v) for k, v in details.invocation_metadata or ()}
        token = tokens.bearer(metadata)
        try:
            caller = await self._authenticate(token)
        except errors.Refusal as refusal:
            return _refusing(handler, refusal)
        except Exception as exc:
            # Redis unreachable while checking a credential (a revocation, a master's binding):
            # UNAVAILABLE, never a pass.
            if not redis_link.unreachable(exc):
                raise
            return _refusing(handler, redis_link.unavailable())
        # The handler runs in this call's task, after this: it finds the caller here.
        _AUTHENTICATED.set((token, caller))
        return handler


def _refusing(handler: grpc.RpcMethodHandler, refusal: errors.Refusal) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that only ends the call with `refusal`."""

    async def unary(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await abort(context, refusal)

    async def streaming(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        await abort(context, refusal)
        yield None  # never reached: abort raises

    serde = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(streaming, **serde)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(unary, **serde)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(streaming, **serde)
    return grpc.unary_unary_rpc_method_handler(unary, **serde)


def _report_unexpected(method: str, exc: BaseException) -> None:
    logs.event(log, "rpc_failed", logging.ERROR, method=method, exception=type(exc).__name__)


async def _unexpected(
    context: grpc.aio.ServicerContext[Any, Any], method: str, exc: Exception
) -> None:
    if redis_link.unreachable(exc):
        # Redis unreachable: a state the caller retries through, not a fault of this call.
        await abort(context, redis_link.unavailable())
    _report_unexpected(method, exc)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error")


def handled(method: F) -> F:
    """Wrap a servicer method so refusals become statuses and surprises become INTERNAL.

    Works for unary and client-streaming methods (coroutines) and server-streaming methods
    (async generators). An unexpected exception is logged by type only: its message may hold
    values that must not reach a log or a caller. An unreachable Redis answers UNAVAILABLE
    (`redis_unavailable`).
    """
    name = method.__qualname__
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def stream(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                async for item in method(self, request, context):
                    yield item
            except errors.Refusal as refusal:
                await abort(context, refusal)
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as exc:
                await _unexpected(context, name, exc)

        return stream  # type: ignore[return-value]

    @functools.wraps(method)
    async def unary(self: Any, request: Any, context: Any) -> Any:
        try:
            return await method(self, request, context)
        except errors.Refusal as refusal:
            await abort(context, refusal)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            await _unexpected(context, name, exc)

    return unary  # type: ignore[return-value]


def metadata(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str]:
    """The call's invocation metadata as a dict (text values only)."""
    out: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            out[key.lower()] = value
    return out


Registrar = Callable[[grpc.aio.Server], None]


class ListenError(OSError):
    """A server could not listen on its address (in use, not this host's, not allowed).

    The entry points turn it into one line naming the address and the flag or variable that
    sets it; it carries no traceback to the operator.
    """

    def __init__(self, address: str, why: str) -> None:
        super().__init__(f"cannot listen on {address}: {why}")
        self.address = address
        self.why = why

    @classmethod
    def of(cls, address: str, exc: OSError) -> ListenError:
        """The error for `address` from the system's `exc` (EADDRINUSE said plainly)."""
        if exc.errno == errno.EADDRINUSE:
            return cls(address, "the address is in use (is another server running there?)")
        return cls(address, exc.strerror or str(exc))

    def line(self, prog: str, setting: str) -> str:
        """The operator's line: what failed, why, and what to change."""
        return (
            f"{prog}: cannot listen on {self.address}: {self.why}; "
            f"set {setting} to another HOST:PORT"
        )


def bind_refusal(listen: str) -> ListenError:
    """Why `listen` cannot be bound, found by binding it the way the servers do (no
    SO_REUSEPORT): gRPC's own error does not say."""
    try:
        host, port = addresses.parse(listen, listening=True)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        return ListenError.of(listen, exc)
    except addresses.Malformed as exc:
        return ListenError(listen, str(exc))
    return ListenError(listen, "the address could not be bound")


async def start_server(
    listen: str,
    registrars: Iterable[Registrar],
    service_names: Iterable[str],
    *,
    authenticate: Authenticator | None = None,
    health_servicer: health.aio.HealthServicer | None = None,
    serving: bool = True,
    tls_conf: tls_settings.TLSSettings | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Start a gRPC server with health checking and reflection; return it and its port.

    `listen` is HOST:PORT; port 0 picks a free port (tests). An address that cannot be bound
    (a busy port above all) raises `ListenError`. With `authenticate`, every call
    to the named services is authenticated first (`Authenticating`). The overall service ("")
    and each named one start SERVING, or NOT_SERVING when `serving` is False; pass
    `health_servicer` to switch them later (`set_serving`). `tls_conf` (default: the process's
    environment) serves TLS, or mutual TLS with a client CA; without a certificate, plaintext.
    """
    tls_conf = tls_settings.from_environment() if tls_conf is None else tls_conf
    credentials = tls.server_credentials(tls_conf)
    names = list(service_names)
    interceptors = [] if authenticate is None else [Authenticating(names, authenticate)]
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", 8 * 1024 * 1024),
            ("grpc.max_send_message_length", 8 * 1024 * 1024),
            # gRPC sets SO_REUSEPORT by default: a second server on a busy port would look
            # started and take half the connections. A busy port is refused instead.
            ("grpc.so_reuseport", 0),
        ],
    )
    for register in registrars:
        register(server)
    health_servicer = health_servicer or health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    await set_serving(health_servicer, ["", *names], serving)
    reflection.enable_server_reflection(
        [
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    try:
        if credentials is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, credentials)
    except RuntimeError:  # grpcio's "Failed to bind to address ..."
        port = 0
    if port == 0:
        raise bind_refusal(listen)
    await server.start()
    return server, port


async def set_serving(
    health_servicer: health.aio.HealthServicer, names: Iterable[str], serving: bool
) -> None:
    """Set the health status of `names` ("" is the server as a whole)."""
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in names:
        await health_servicer.set(name, status)


async def wait_for_termination(
    stop_grace_s: float = 5.0, *servers: grpc.aio.Server, stopping: asyncio.Event | None = None
) -> None:
    """Run until SIGTERM or SIGINT (or `stopping` is set), then stop `servers` with a grace
    period."""
    loop = asyncio.get_running_loop()
    stopping = stopping or asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    await asyncio.gather(*(s.stop(stop_grace_s) for s in servers))
