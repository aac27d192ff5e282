"""gRPC glue shared by the three services: the one error mapper and the server bootstrap.

Refusals map to status codes here and nowhere else. The spec's reason code rides in the trailing
metadata key `agentihooks-reason`; the status message is the spec's text.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import signal
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.common import errors, logs

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


def _report_unexpected(method: str, exc: BaseException) -> None:
    logs.event(log, "rpc_failed", logging.ERROR, method=method, exception=type(exc).__name__)


def handled(method: F) -> F:
    """Wrap a servicer method so refusals become statuses and surprises become INTERNAL.

    Works for unary and client-streaming methods (coroutines) and server-streaming methods
    (async generators). An unexpected exception is logged by type only: its message may hold
    values that must not reach a log or a caller.
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
                _report_unexpected(name, exc)
                await context.abort(grpc.StatusCode.INTERNAL, "internal error")

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
            _report_unexpected(name, exc)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error")

    return unary  # type: ignore[return-value]


def metadata(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str]:
    """The call's invocation metadata as a dict (text values only)."""
    out: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            out[key.lower()] = value
    return out


Registrar = Callable[[grpc.aio.Server], None]


async def start_server(
    listen: str, registrars: Iterable[Registrar], service_names: Iterable[str]
) -> tuple[grpc.aio.Server, int]:
    """Start a gRPC server with health checking and reflection; return it and its port.

    `listen` is HOST:PORT; port 0 picks a free port (tests).
    """
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", 8 * 1024 * 1024),
            ("grpc.max_send_message_length", 8 * 1024 * 1024),
        ]
    )
    names = list(service_names)
    for register in registrars:
        register(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ["", *names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        [
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    port = server.add_insecure_port(listen)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    return server, port


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
