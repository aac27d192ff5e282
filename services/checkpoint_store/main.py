"""`agentihooks-checkpoint-store`: serve the scoped upload route."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import sys

from grpc_health.v1 import health

from services.checkpoint_store import service
from services.common import logs, redis_link, rpc, settings, tls_settings

log = logging.getLogger("services.checkpoint_store")


async def _serve(conf: settings.StoreSettings) -> None:
    """Serve until SIGTERM. Redis may be missing at start or go away later: the store serves
    all the same, NOT_SERVING and answering UNAVAILABLE meanwhile (it cannot check a grant's
    revocation), logs one line per retry step and serves again once Redis answers."""
    store = await service.open_service(conf)
    link = store.link
    assert link is not None  # open_service always gives it one
    health_servicer = health.aio.HealthServicer()
    link.subscribe(functools.partial(rpc.set_serving, health_servicer, ["", service.SERVICE_NAME]))
    try:
        server, port = await rpc.start_server(
            conf.listen,
            [store.register],
            [service.SERVICE_NAME],
            health_servicer=health_servicer,
            serving=False,
            tls_conf=conf.tls,
        )
        try:
            await link.start()
            try:
                logs.event(
                    log,
                    "listening",
                    service="checkpoint_store",
                    port=port,
                    transport=tls_settings.transport(conf.tls),
                )
                await rpc.wait_for_termination(5.0, server)
            finally:
                await link.stop()
        finally:
            await server.stop(None)
    finally:
        await store.aclose()
    logs.event(log, "stopped", service="checkpoint_store")


def main(argv: list[str] | None = None) -> None:
    """Run the checkpoint-store service until SIGTERM."""
    parser = argparse.ArgumentParser(prog="agentihooks-checkpoint-store", description=__doc__)
    parser.add_argument("--listen", help="HOST:PORT to serve gRPC on (default 127.0.0.1:50052)")
    args = parser.parse_args(argv)
    logs.configure("checkpoint_store")
    env = dict(os.environ)
    if args.listen:
        env[settings.PREFIX + "STORE_ADDR"] = args.listen
    try:
        conf = settings.load_store(env)
        redis_link.check_url(conf.redis_url)
    except settings.SettingsError as exc:
        print(f"agentihooks-checkpoint-store: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except ValueError:
        # The URL may hold a password: name the variable, never the value.
        print(
            f"agentihooks-checkpoint-store: {redis_link.VARIABLE} is not a Redis URL "
            f"({redis_link.URL_FORMS})",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    try:
        asyncio.run(_serve(conf))
    except rpc.ListenError as exc:
        print(
            exc.line("agentihooks-checkpoint-store", "--listen or AGENTIHOOKS_STORE_ADDR"),
            file=sys.stderr,
        )
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
