"""`agentihooks-controller`: the recovery controller (gRPC on 50051, HTTP on 8080)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator, Mapping

import yaml
from grpc_health.v1 import health

from services.common import logs, redis_link, rpc, settings, tls_settings
from services.common.checkpoints import backends
from services.controller import hub as hubs
from services.controller import replacing
from services.controller.api import grpc_api, http_api
from services.controller.pods import runtime as pods
from services.controller.state import durable

log = logging.getLogger("services.controller")


def worker_settings(
    conf: settings.ControllerSettings, control_addr: str, env: Mapping[str, str]
) -> dict[str, str]:
    """The settings every worker gets from the controller's: where the controller and the
    store are, and the checkpoint storage, capture interval and qualified harness versions
    when this controller has them (a worker reads and writes its checkpoints there unless its
    swarm is `checkpoint_remote`).
    """
    found = {settings.PREFIX + "CONTROL_ADDR": control_addr}
    if conf.store_addr:
        found[settings.PREFIX + "STORE_ADDR"] = conf.store_addr
    for name in (
        "CHECKPOINT_ROOT",
        "CHECKPOINT_BUCKET",
        "S3_ENDPOINT_URL",
        "CAPTURE_INTERVAL_S",
        "QUALIFIED_VERSIONS",
    ):
        if env.get(settings.PREFIX + name):
            found[settings.PREFIX + name] = env[settings.PREFIX + name]
    if conf.runtime == "local":
        # Local workers run on this machine and share the controller's TLS files (their
        # sidecar serves with its certificate; they dial with its CA). Worker Pods mount
        # certificates of their own (the Pod template).
        for name in (
            tls_settings.CERT_FILE,
            tls_settings.KEY_FILE,
            tls_settings.CA_FILE,
            tls_settings.CLIENT_CA_FILE,
        ):
            if env.get(name):
                found[name] = env[name]
    return found


def advertised_host(conf: settings.ControllerSettings) -> str:
    """The host other replicas reach this one at (they forward writes to a swarm's holder):
    `AGENTIHOOKS_ADVERTISE_HOST`, else the gRPC listen host, else, for a wildcard listener,
    this machine's name as it resolves here (a Pod's IP on Kubernetes)."""
    if conf.advertise_host:
        return conf.advertise_host
    host = conf.listen.rpartition(":")[0]
    if host not in ("0.0.0.0", "[::]", "::", ""):  # noqa: S104
        return host
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


@contextlib.asynccontextmanager
async def open_runtime(conf: settings.ControllerSettings) -> AsyncIterator[pods.PodRuntime]:
    """The configured worker runtime: Kubernetes (in-cluster or kubeconfig) or local processes."""
    if conf.runtime == "kubernetes":
        from kubernetes_asyncio import config

        from services.controller.pods import kubernetes, templates

        try:
            config.load_incluster_config()
        except config.ConfigException:
            await config.load_kube_config()
        template = templates.default_pod_template()
        if conf.pod_template is not None:
            template = yaml.safe_load(conf.pod_template.read_text())
        if conf.tls.dialing and not templates.dials_tls(template):
            # The controller serves TLS but its workers would dial it in plaintext and fail:
            # say so once at start rather than in every worker's log.
            logs.event(
                log,
                "worker_pods_plaintext",
                logging.WARNING,
                hint="the worker Pod template sets no AGENTIHOOKS_TLS_CA_FILE on its worker"
                " container: mount the workers' certificate (deploy/k8s/templates/worker-pod.yaml)",
            )
        api = kubernetes.ApiClient()
        assert conf.worker_control_addr is not None  # always set for the kubernetes runtime
        cluster = kubernetes.KubernetesRuntime(
            api,
            conf.namespace,
            template,
            worker_env=worker_settings(conf, conf.worker_control_addr, os.environ),
        )
        try:
            yield cluster
        finally:
            await cluster.aclose()
            await api.close()
        return
    from services.controller.pods import local

    host, _, port = conf.listen.rpartition(":")
    # Workers on this machine reach a wildcard listener on loopback.
    reachable = "127.0.0.1" if host in ("0.0.0.0", "[::]", "::") else host  # noqa: S104
    worker_env = {
        k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    }
    worker_env.update(worker_settings(conf, f"{reachable}:{port}", os.environ))
    conf.workdir.mkdir(parents=True, exist_ok=True)
    runtime = local.LocalRuntime(conf.workdir, base_env=worker_env)
    try:
        yield runtime
    finally:
        await runtime.aclose()


class RedisWaitCheck:
    """Refuses durability settings the Redis reached cannot give (`durable.check`, WAITAOF
    before Redis 7.2): at start when Redis answers then, else when it first answers, which
    stops the controller (`stopping`; `refused` says why)."""

    def __init__(self, client: redis_link.Client, wait: settings.RedisWait) -> None:
        self._client = client
        self._wait = wait
        self.checked = not wait.waits
        self.refused: durable.Unsupported | None = None
        self.stopping = asyncio.Event()

    async def at_start(self) -> None:
        """Check now if Redis answers within `redis_link.START_WAIT_S`.

        Raises:
            durable.Unsupported: the settings ask for what this Redis cannot give.
        """
        if self.checked:
            return
        try:
            async with asyncio.timeout(redis_link.START_WAIT_S):
                await durable.check(self._client, self._wait)
        except TimeoutError:
            return
        except Exception as exc:
            if redis_link.unreachable(exc):
                return  # checked once Redis answers (`when_available`)
            raise
        self.checked = True

    async def when_available(self, available: bool) -> None:
        """A `RedisLink` subscriber: the check not done at start, done once Redis answers."""
        if self.checked or not available:
            return
        try:
            await durable.check(self._client, self._wait)
        except durable.Unsupported as exc:
            self.refused = exc
            logs.event(log, "redis_wait_refused", logging.ERROR, reason=str(exc))
            self.stopping.set()
        except Exception as exc:
            if not redis_link.unreachable(exc):
                raise
            return
        self.checked = True


async def serve(conf: settings.ControllerSettings, ready: asyncio.Event | None = None) -> None:
    """Run the controller until SIGTERM.

    Redis may be missing at start or go away later: the controller serves gRPC and HTTP all
    the same, reports NOT_SERVING and not ready meanwhile, logs one line per retry step and
    starts (or resumes) its work by itself once Redis answers.

    Raises:
        durable.Unsupported: `AGENTIHOOKS_REDIS_WAIT_AOF` on a Redis without WAITAOF (or its
            append-only file), found at start or when Redis first answered.
    """
    client = redis_link.connect(conf.redis_url)
    link = redis_link.RedisLink(client)
    wait_check = RedisWaitCheck(client, conf.redis_wait)
    try:
        await wait_check.at_start()
    except BaseException:
        await client.aclose()
        raise
    link.subscribe(wait_check.when_available)
    backend = backends.open_backend(
        str(conf.storage.checkpoint_root) if conf.storage.checkpoint_root else None,
        conf.storage.checkpoint_bucket,
        conf.storage.s3_endpoint_url,
    )
    checkpoints = replacing.BackendCheckpoints(backend) if backend is not None else None
    try:
        async with open_runtime(conf) as runtime:
            hub = hubs.Hub(
                client,
                runtime,
                grant_key=conf.grant_key,
                operator_token=conf.operator_token,
                worker_image=conf.worker_image,
                checkpoints=checkpoints,
                lease_ttl_ms=conf.lease_ms,
                pass_interval_s=conf.pass_interval_ms / 1000,
                store_addr=conf.store_addr,
                entry_point=conf.entry_point,
                runtime_name=conf.runtime,
                link=link,
                redis_wait=conf.redis_wait,
                resync_rate=conf.resync_rate,
                renewal_connect=functools.partial(redis_link.connect, conf.redis_url),
            )
            service = grpc_api.RecoveryService(hub)
            # NOT_SERVING until Redis answers, and again whenever it (or, on Kubernetes, the
            # API server) stops answering: no recovery can be done then.
            health_servicer = health.aio.HealthServicer()

            async def health_changed(_: bool) -> None:
                names = ["", grpc_api.SERVICE_NAME]
                await rpc.set_serving(health_servicer, names, hub.serving())

            link.subscribe(health_changed)
            hub.on_loss(health_changed)
            if isinstance(runtime, pods.Reachable):
                runtime.subscribe(health_changed)
            server, port = await rpc.start_server(
                conf.listen,
                [service.register],
                [grpc_api.SERVICE_NAME],
                authenticate=service.authenticate,
                health_servicer=health_servicer,
                serving=False,
                tls_conf=conf.tls,
            )
            try:
                runner, http_port = await http_api.start_http(hub, conf.http, conf.tls)
                try:
                    host = advertised_host(conf)
                    hub.sharing.advertise(f"{host}:{port}", f"{host}:{http_port}")
                    await hub.start()
                    # What the start built (every swarm's recovery, the Pod watch's cache of
                    # every worker) lives as long as the process: kept out of the collector's
                    # full passes, which over a heap of millions of objects held the loop and
                    # the renewals' thread alike for a second or more at a time.
                    gc.freeze()
                    logs.event(
                        log,
                        "listening",
                        service="controller",
                        port=port,
                        http_port=http_port,
                        transport=tls_settings.transport(conf.tls),
                        runtime=conf.runtime,
                        holder=hub.holder,
                        checkpoint_store="configured" if checkpoints else "none",
                    )
                    if ready is not None:
                        ready.set()
                    await rpc.wait_for_termination(5.0, server, stopping=wait_check.stopping)
                finally:
                    await hub.stop()
                    await runner.cleanup()
                    await service.aclose()
            finally:
                # Stopped on every way out (a second stop after a clean one does nothing): a
                # server left running would outlive the event loop.
                await server.stop(None)
    finally:
        if backend is not None:
            await backend.aclose()
        await client.aclose()
    logs.event(log, "stopped", service="controller")
    if wait_check.refused is not None:
        raise wait_check.refused


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> None:
    """Entry point of `agentihooks-controller`."""
    parser = argparse.ArgumentParser(prog="agentihooks-controller", description=__doc__)
    parser.add_argument("--listen", help="gRPC HOST:PORT (default 127.0.0.1:50051)")
    parser.add_argument("--http", help="HTTP HOST:PORT (default 127.0.0.1:8080)")
    parser.add_argument(
        "--print-settings", action="store_true", help="print the settings (no secrets) and exit"
    )
    args = parser.parse_args(argv)
    logs.configure("controller")
    values = dict(env if env is not None else os.environ)
    if args.listen:
        values[settings.PREFIX + "CONTROL_ADDR"] = args.listen
    if args.http:
        values[settings.PREFIX + "HTTP_ADDR"] = args.http
    try:
        conf = settings.load_controller(values)
    except settings.SettingsError as exc:
        print(f"agentihooks-controller: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        redis_link.check_url(conf.redis_url)
    except ValueError:
        # The URL may hold a password: name the variable, never the value.
        print(
            f"agentihooks-controller: {redis_link.VARIABLE} is not a Redis URL "
            f"({redis_link.URL_FORMS})",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    if args.print_settings:
        print(
            json.dumps(
                {
                    "listen": conf.listen,
                    "http": conf.http,
                    "runtime": conf.runtime,
                    "worker_image": conf.worker_image,
                    "namespace": conf.namespace,
                }
            )
        )
        return
    try:
        asyncio.run(serve(conf))
    except durable.Unsupported as exc:
        print(f"agentihooks-controller: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except rpc.ListenError as exc:
        setting = (
            "--http or AGENTIHOOKS_HTTP_ADDR"
            if exc.address == conf.http
            else "--listen or AGENTIHOOKS_CONTROL_ADDR"
        )
        print(exc.line("agentihooks-controller", setting), file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
