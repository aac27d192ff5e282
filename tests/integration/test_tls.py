"""TLS on every server and client, with the real entry points, grpcurl, curl and the CLI.

Issue 24: "Every server takes a certificate and key (and optionally a client CA to require
client certificates); every client takes a CA bundle (and a client certificate where required).
Files are re-read when they change ... plaintext stays possible for local use and is logged as
such at start ... Tests: a real TLS handshake on each server and client, a wrong CA refused, an
expired certificate refused, a rotated certificate picked up without a restart, grpcurl with
`-cacert`." Certificates are issued by `tests.support.certificates` the way cert-manager would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import signal
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Mapping

import pytest
from cryptography import x509

from tests.support import binaries, certificates, cli_process, ports
from tests.support import controller_server as cs
from tests.support import redis_server as redis_servers

pytestmark = pytest.mark.slow

WAIT_S = ports.MIN_DEADLINE_S
HEALTH = "grpc.health.v1.Health/Check"
STATUS = ("swarm", "absent", "status")


def _base_env(tmp_path: pathlib.Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_")},
        "HOME": str(tmp_path),
        "AGENTIHOOKS_GRANT_KEY": cs.GRANT_KEY,
    }


class Process:
    """A service entry point running as its own process, its log in a file."""

    def __init__(self, proc: asyncio.subprocess.Process, log: pathlib.Path) -> None:
        self.proc = proc
        self.log = log

    def lines(self) -> list[dict[str, object]]:
        """The structured log lines so far."""
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
        return found


@contextlib.asynccontextmanager
async def _running(module: str, args: list[str], env: Mapping[str, str]) -> AsyncIterator[Process]:
    log = pathlib.Path(env["HOME"]) / f"{module.rsplit('.', 2)[-2]}.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, *args, env=dict(env), stdout=out, stderr=out
        )
    try:
        yield Process(proc, log)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(60):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def _grpcurl(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        binaries.require("grpcurl"),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


def _served_serial(port: int, ca: certificates.Authority, alpn: str = "h2") -> int:
    """The serial number of the certificate a server on 127.0.0.1:`port` presents now, over a
    new connection that trusts `ca` (the handshake fails if the server's certificate does not
    verify)."""
    context = ssl.create_default_context(cafile=ca.bundle)
    context.set_alpn_protocols([alpn])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls_socket,
    ):
        der = tls_socket.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


async def _until_listening(process: Process, event: str = "listening") -> dict[str, object]:
    async def listening() -> dict[str, object]:
        assert process.proc.returncode is None, process.log.read_text()[-2000:]
        found = [entry for entry in process.lines() if entry.get("event") == event]
        assert found, process.log.read_text()[-2000:]
        return found[0]

    return await ports.eventually(listening, timeout=WAIT_S, every=0.1)


@pytest.fixture
def pki(tmp_path: pathlib.Path) -> tuple[certificates.Authority, certificates.Authority]:
    """The cluster's CA and a CA nobody trusts."""
    return (
        certificates.Authority(tmp_path / "pki", "cluster-ca"),
        certificates.Authority(tmp_path / "rogue", "rogue-ca"),
    )


@contextlib.asynccontextmanager
async def _store(
    tmp_path: pathlib.Path, redis_url: str, tls_env: Mapping[str, str]
) -> AsyncIterator[tuple[Process, str]]:
    addr = f"127.0.0.1:{ports.free_port()}"
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    env = {
        **_base_env(tmp_path),
        "AGENTIHOOKS_REDIS_URL": redis_url,
        "AGENTIHOOKS_CHECKPOINT_ROOT": str(tmp_path / "ckpt"),
        **tls_env,
    }
    async with _running("services.checkpoint_store.main", ["--listen", addr], env) as store:
        yield store, addr


async def test_the_store_serves_mutual_tls_and_refuses_a_client_without_a_certificate(
    tmp_path: pathlib.Path,
    redis_server: redis_servers.RedisServer,
    pki: tuple[certificates.Authority, certificates.Authority],
) -> None:
    """The store with a certificate and a client CA: grpcurl with `-cacert` and a client
    certificate gets SERVING; without a client certificate, or trusting another CA, or with a
    client certificate of another CA, the handshake is refused. The start line says
    `mutual_tls`."""
    ca, rogue = pki
    server = ca.issue("store")
    client = ca.issue("controller")
    stranger = rogue.issue("stranger")
    async with _store(
        tmp_path, redis_server.url, certificates.tls_env(ca, server, client_ca=ca)
    ) as (
        store,
        addr,
    ):
        line = await _until_listening(store)
        assert line["transport"] == "mutual_tls"
        target = addr.replace("127.0.0.1", "localhost")
        mutual = ["-cacert", str(ca.bundle), "-cert", str(client.cert), "-key", str(client.key)]

        async def serving() -> None:
            code, out = await _grpcurl(*mutual, target, HEALTH)
            assert code == 0 and '"status": "SERVING"' in out, out

        await ports.eventually(serving, timeout=WAIT_S)

        code, out = await _grpcurl("-cacert", str(ca.bundle), target, HEALTH)
        assert code != 0 and "SERVING" not in out, out
        code, out = await _grpcurl("-cacert", str(rogue.bundle), target, HEALTH)
        assert code != 0 and "certificate" in out.lower(), out
        code, out = await _grpcurl(
            "-cacert", str(ca.bundle), "-cert", str(stranger.cert), "-key", str(stranger.key),
            target, HEALTH,
        )  # fmt: skip
        assert code != 0 and "SERVING" not in out, out
        code, out = await _grpcurl("-plaintext", target, HEALTH)
        assert code != 0 and "SERVING" not in out, out
        # Nothing secret in the log: no key material, no certificate body.
        text = store.log.read_text()
        assert "PRIVATE KEY" not in text and "BEGIN CERTIFICATE" not in text


async def test_an_expired_server_certificate_is_refused_by_the_client(
    tmp_path: pathlib.Path,
    redis_server: redis_servers.RedisServer,
    pki: tuple[certificates.Authority, certificates.Authority],
) -> None:
    """A store serving an expired certificate: grpcurl trusting its CA refuses the handshake
    (and would accept it the moment the certificate is valid: the same CA serves the rotation
    test)."""
    ca, _ = pki
    expired = ca.issue("store", expired=True)
    async with _store(tmp_path, redis_server.url, certificates.tls_env(ca, expired)) as (
        store,
        addr,
    ):
        await _until_listening(store)
        code, out = await _grpcurl(
            "-cacert", str(ca.bundle), addr.replace("127.0.0.1", "localhost"), HEALTH
        )
        assert code != 0 and "expired" in out.lower(), out


async def test_a_rotated_certificate_is_served_without_a_restart(
    tmp_path: pathlib.Path,
    redis_server: redis_servers.RedisServer,
    pki: tuple[certificates.Authority, certificates.Authority],
) -> None:
    """cert-manager rewrites the files in place: the next handshake presents the new
    certificate, the process still the same one."""
    ca, _ = pki
    first = ca.issue("store")
    async with _store(tmp_path, redis_server.url, certificates.tls_env(ca, first)) as (
        store,
        addr,
    ):
        await _until_listening(store)
        port = int(addr.rsplit(":", 1)[1])
        assert await asyncio.to_thread(_served_serial, port, ca) == first.serial
        second = ca.issue("store", cert=first.cert, key=first.key)

        async def rotated() -> None:
            assert await asyncio.to_thread(_served_serial, port, ca) == second.serial

        await ports.eventually(rotated, timeout=WAIT_S)
        code, out = await _grpcurl(
            "-cacert", str(ca.bundle), addr.replace("127.0.0.1", "localhost"), HEALTH
        )
        assert code == 0, out
        assert store.proc.returncode is None
        assert any(line.get("event") == "tls_files_reloaded" for line in store.lines())


async def test_plaintext_is_logged_as_such_at_start(
    tmp_path: pathlib.Path, redis_server: redis_servers.RedisServer
) -> None:
    """No certificate: the store serves plaintext (the local default) and its start line says
    so."""
    async with _store(tmp_path, redis_server.url, {}) as (store, addr):
        line = await _until_listening(store)
        assert line["transport"] == "plaintext"
        code, out = await _grpcurl("-plaintext", addr, HEALTH)
        assert code == 0, out


async def test_a_certificate_without_its_key_stops_the_store_in_one_line(
    tmp_path: pathlib.Path,
    redis_server: redis_servers.RedisServer,
    pki: tuple[certificates.Authority, certificates.Authority],
) -> None:
    """A wrong mount fails the process at start, naming the variables, never at the first
    handshake."""
    ca, _ = pki
    leaf = ca.issue("store")
    env = {"AGENTIHOOKS_TLS_CERT_FILE": str(leaf.cert)}
    async with _store(tmp_path, redis_server.url, env) as (store, _):
        async with asyncio.timeout(WAIT_S):
            code = await store.proc.wait()
    text = store.log.read_text()
    assert code == 2, text  # a setting that cannot be used, as for every other setting
    assert "Traceback" not in text
    assert text.strip().splitlines()[-1] == (
        "agentihooks-checkpoint-store: AGENTIHOOKS_TLS_CERT_FILE and AGENTIHOOKS_TLS_KEY_FILE"
        " must be set together"
    )


@contextlib.asynccontextmanager
async def _controller(
    tmp_path: pathlib.Path, redis_url: str, tls_env: Mapping[str, str]
) -> AsyncIterator[tuple[Process, int, int]]:
    port, http = ports.free_port(), ports.free_port()
    env = {
        **_base_env(tmp_path),
        "AGENTIHOOKS_REDIS_URL": redis_url,
        "AGENTIHOOKS_OPERATOR_TOKEN": cs.OPERATOR_TOKEN,
        "AGENTIHOOKS_WORKER_IMAGE": cs.IMAGE,
        "AGENTIHOOKS_RUNTIME": "local",
        "AGENTIHOOKS_WORKDIR": str(tmp_path / "workers"),
        **tls_env,
    }
    args = ["--listen", f"127.0.0.1:{port}", "--http", f"127.0.0.1:{http}"]
    async with _running("services.controller.main", args, env) as controller:
        yield controller, port, http


async def _curl(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "curl", "-sS", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


async def test_the_controller_serves_tls_to_the_cli_grpcurl_and_curl(
    tmp_path: pathlib.Path,
    redis_server: redis_servers.RedisServer,
    pki: tuple[certificates.Authority, certificates.Authority],
) -> None:
    """The controller's gRPC and HTTP ports serve TLS: the CLI with `AGENTIHOOKS_TLS_CA_FILE`
    works; without it, or trusting another CA, it says what to check in one line; curl
    `--cacert` reads `/readyz` over HTTPS, and a rotated certificate is served on both ports
    without a restart."""
    ca, rogue = pki
    leaf = ca.issue("controller")
    async with _controller(tmp_path, redis_server.url, certificates.tls_env(ca, leaf)) as (
        controller,
        port,
        http,
    ):
        line = await _until_listening(controller)
        assert line["transport"] == "tls"
        control = f"localhost:{port}"
        trusting = {"AGENTIHOOKS_TLS_CA_FILE": str(ca.bundle)}

        async def answered() -> None:
            # An authenticated call answered by the controller over TLS: no such swarm.
            ran = await cli_process.agentihooks(*STATUS, control=control, env=trusting)
            assert ran.code == 5 and "no such swarm: absent" in ran.err, ran.err

        await ports.eventually(answered, timeout=WAIT_S)

        ran = await cli_process.agentihooks(*STATUS, control=control)
        assert ran.code == 6, ran.err
        assert "if it serves TLS, set AGENTIHOOKS_TLS_CA_FILE" in ran.err, ran.err
        ran = await cli_process.agentihooks(
            *STATUS, control=control, env={"AGENTIHOOKS_TLS_CA_FILE": str(rogue.bundle)}
        )
        assert ran.code == 6, ran.err
        assert f"the TLS handshake with the controller at {control} failed" in ran.err, ran.err

        code, out = await _grpcurl("-cacert", str(ca.bundle), control, "list")
        assert code == 0 and "agentihooks.swarm.v2.Recovery" in out, out

        code, out = await _curl("--cacert", str(ca.bundle), f"https://localhost:{http}/readyz")
        assert code == 0, out
        code, out = await _curl("--cacert", str(rogue.bundle), f"https://localhost:{http}/readyz")
        assert code != 0, out
        code, out = await _curl(f"http://localhost:{http}/readyz")
        assert "ready" not in out, out

        assert await asyncio.to_thread(_served_serial, http, ca, "http/1.1") == leaf.serial
        second = ca.issue("controller", cert=leaf.cert, key=leaf.key)

        async def rotated() -> None:
            assert await asyncio.to_thread(_served_serial, http, ca, "http/1.1") == second.serial
            assert await asyncio.to_thread(_served_serial, port, ca) == second.serial

        await ports.eventually(rotated, timeout=WAIT_S)
        assert controller.proc.returncode is None
