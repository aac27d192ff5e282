"""`agentihooks-checkpoint-store`: serve the scoped upload route."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from services.checkpoint_store import service
from services.common import logs, rpc, settings

log = logging.getLogger("services.checkpoint_store")


async def _serve(conf: settings.StoreSettings) -> None:
    store = await service.open_service(conf)
    try:
        server, port = await rpc.start_server(conf.listen, [store.register], [service.SERVICE_NAME])
        logs.event(log, "listening", service="checkpoint_store", port=port)
        await rpc.wait_for_termination(5.0, server)
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
    except settings.SettingsError as exc:
        print(f"agentihooks-checkpoint-store: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    asyncio.run(_serve(conf))


if __name__ == "__main__":
    main()
