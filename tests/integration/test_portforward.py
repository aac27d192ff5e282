"""The real kubectl's ``port-forward`` against the Kubernetes API emulator
(`tests.support.kube.network.portforward`): ``pod/NAME`` and ``svc/NAME`` to TCP servers on
127.0.0.1 standing in for the Pods' containers (the Pods are Running with podIP 127.0.0.1).

kubectl runs as it would against a cluster: its default WebSocket tunnel, its own resolution
of a Service to a Pod and of a named targetPort to a container port, its messages. Frames
kubectl sends rarely or never (RST_STREAM, GOAWAY, a PING on demand) are written by hand into
the same tunnel. Every wait has a generous deadline (`ports.MIN_DEADLINE_S`) and ends as soon
as its condition holds.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import pathlib
import random
import re
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from tests.support.kube import kubectl
from tests.support.kube.apiserver.emulator import K8sEmulator
from tests.support.kube.network import portforward, spdy
from tests.support.ports import MIN_DEADLINE_S, eventually, free_port

NAMESPACE = "forwarding"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class TcpServer:
    """A TCP server on 127.0.0.1 (a container's port), counting its open connections."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.port = 0
        self.accepted = 0

    @property
    def open(self) -> int:
        """Connections whose handler has not ended yet."""
        return len(self._tasks)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.accepted += 1
        try:
            await self._handler(reader, writer)
        except ConnectionError:
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def close(self) -> None:
        """Stop listening and end the connections still open."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Send back every byte until the client's end of stream, then close."""
    while data := await reader.read(64 * 1024):
        writer.write(data)
        await writer.drain()


async def goodbye(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Say goodbye and close at once (the client may still be sending)."""
    writer.write(b"goodbye\n")
    await writer.drain()


@contextlib.asynccontextmanager
async def tcp_server(handler: Handler) -> AsyncIterator[TcpServer]:
    server = TcpServer(handler)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


class PortForward:
    """A running ``kubectl port-forward``, its stdout and stderr read as they come."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        assert process.stdout is not None and process.stderr is not None
        self._readers = [
            asyncio.create_task(self._read(process.stdout, self.stdout)),
            asyncio.create_task(self._read(process.stderr, self.stderr)),
        ]

    @staticmethod
    async def _read(stream: asyncio.StreamReader, lines: list[str]) -> None:
        while line := await stream.readline():
            lines.append(line.decode(errors="replace"))

    @property
    def output(self) -> str:
        return "".join(self.stdout) + "".join(self.stderr)

    async def forwarding(self, local: int) -> int:
        """Wait for ``Forwarding from 127.0.0.1:LOCAL -> REMOTE``: the remote port."""
        pattern = re.compile(rf"^Forwarding from 127\.0\.0\.1:{local} -> (\d+)$", re.M)

        async def check() -> int:
            found = pattern.search("".join(self.stdout))
            if found is None and self.process.returncode is not None:
                pytest.fail(f"kubectl exited {self.process.returncode}:\n{self.output}")
            assert found is not None, self.output
            return int(found.group(1))

        return await eventually(check)

    async def exited(self) -> int:
        """Wait for kubectl to exit by itself (and its output to be read): its exit code."""
        async with asyncio.timeout(MIN_DEADLINE_S):
            code = await self.process.wait()
            await asyncio.gather(*self._readers)
        return code

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()
        for reader in self._readers:
            reader.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)


@contextlib.asynccontextmanager
async def port_forward(env: Mapping[str, str], *args: str) -> AsyncIterator[PortForward]:
    """``kubectl -n NAMESPACE port-forward ARGS...``, killed when the block ends."""
    process = await asyncio.create_subprocess_exec(
        kubectl.binary(),
        "-n",
        NAMESPACE,
        "port-forward",
        *args,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    forward = PortForward(process)
    try:
        yield forward
    finally:
        await forward.stop()


@contextlib.asynccontextmanager
async def echo_forwarded(cluster: Cluster, port: int) -> AsyncIterator[tuple[PortForward, int]]:
    """The Pod ``echo`` Running with its server on `port`, and ``kubectl port-forward pod/echo``
    from a free local port once it says ``Forwarding from``: (the forward, the local port)."""
    await cluster.running_pod("echo", port)
    local = free_port()
    async with port_forward(cluster.env, "pod/echo", f"{local}:{port}") as forward:
        assert await forward.forwarding(local) == port
        yield forward, local


class Cluster:
    """The emulator as kubectl and the kubelet see it: Pods made Running through the API."""

    def __init__(self, emulator: K8sEmulator, folder: pathlib.Path) -> None:
        self.url = emulator.url
        self.api = client.CoreV1Api(emulator.api_client)
        self.env = kubectl.environment(folder, emulator.url)

    async def running_pod(
        self, name: str, port: int, labels: Mapping[str, str] | None = None
    ) -> None:
        """A Pod with a container port named ``echo``, Running at 127.0.0.1 (status set
        through the status subresource, as a kubelet does)."""
        await self.api.create_namespaced_pod(
            NAMESPACE,
            {
                "metadata": {"name": name, "labels": dict(labels or {})},
                "spec": {
                    "containers": [
                        {
                            "name": "server",
                            "image": "example.com/server:1",
                            "ports": [{"name": "echo", "containerPort": port}],
                        }
                    ]
                },
            },
        )
        await self.api.patch_namespaced_pod_status(
            name, NAMESPACE, {"status": {"phase": "Running", "podIP": "127.0.0.1"}}
        )


@pytest.fixture
async def cluster(k8s_emulator: K8sEmulator, tmp_path: pathlib.Path) -> Cluster:
    made = Cluster(k8s_emulator, tmp_path)
    await made.api.create_namespace({"metadata": {"name": NAMESPACE}})
    return made


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything read until the other side closes (an end of stream or a reset)."""
    received = b""
    async with asyncio.timeout(MIN_DEADLINE_S):
        with contextlib.suppress(ConnectionResetError):
            while chunk := await reader.read(64 * 1024):
                received += chunk
    return received


async def exchange(port: int, message: bytes) -> bytes:
    """Send `message` on a new connection, half-close, and read until it is closed."""
    reader, writer = await connect(port)
    try:
        writer.write(message)
        await writer.drain()
        writer.write_eof()
        return await until_closed(reader)
    finally:
        writer.close()


async def test_pod_connections_are_forwarded_concurrently_and_closed_with_the_client(
    cluster: Cluster,
) -> None:
    """Two connections through one ``kubectl port-forward pod/NAME`` are open at once, each
    echoed by its own connection to the Pod; closing each local connection closes its Pod
    connection (the end of stream crosses over as a half-close, then both sides end)."""
    async with (
        tcp_server(echo) as server,
        echo_forwarded(cluster, server.port) as (forward, local),
    ):
        first = await connect(local)
        second = await connect(local)
        try:
            for round_ in range(3):
                for number, (reader, writer) in enumerate((first, second)):
                    line = f"connection {number} round {round_}\n".encode()
                    writer.write(line)
                    await writer.drain()
                    async with asyncio.timeout(MIN_DEADLINE_S):
                        assert await reader.readline() == line
            assert server.accepted == 2 and server.open == 2
            for reader, writer in (first, second):
                writer.write_eof()
                assert await until_closed(reader) == b""
        finally:
            for _, writer in (first, second):
                writer.close()

        async def pod_side_closed() -> None:
            assert server.open == 0

        await eventually(pod_side_closed)
        assert forward.process.returncode is None, forward.output
        assert "Handling connection for" in forward.output


async def test_a_large_payload_crosses_intact_both_ways(cluster: Cluster) -> None:
    """4 MiB written while the echo is read back arrive whole and in order, both ways."""
    payload = random.Random(20240607).randbytes(4 * 2**20)
    async with (
        tcp_server(echo) as server,
        echo_forwarded(cluster, server.port) as (_forward, local),
    ):
        reader, writer = await connect(local)
        try:

            async def send() -> None:
                for start in range(0, len(payload), 256 * 1024):
                    writer.write(payload[start : start + 256 * 1024])
                    await writer.drain()
                writer.write_eof()

            async with asyncio.timeout(MIN_DEADLINE_S), asyncio.TaskGroup() as group:
                group.create_task(send())
                echoed = group.create_task(until_closed(reader))
        finally:
            writer.close()
        received = echoed.result()
        assert len(received) == len(payload)
        assert hashlib.sha256(received).digest() == hashlib.sha256(payload).digest()


async def test_the_pod_closing_its_connection_ends_the_local_one(cluster: Cluster) -> None:
    """A Pod that answers and closes: the local connection gets the answer, then its end;
    kubectl goes on forwarding new connections."""
    async with tcp_server(goodbye) as server:
        await cluster.running_pod("greeter", server.port)
        local = free_port()
        async with port_forward(cluster.env, "pod/greeter", f"{local}:{server.port}") as forward:
            await forward.forwarding(local)
            for _ in range(2):
                reader, writer = await connect(local)
                try:
                    assert await until_closed(reader) == b"goodbye\n"
                finally:
                    writer.close()
            assert server.accepted == 2
            assert forward.process.returncode is None, forward.output


async def test_a_service_is_forwarded_to_the_pod_its_selector_picks(cluster: Cluster) -> None:
    """``port-forward svc/NAME LOCAL:PORT``: kubectl reads the Service, lists the Pods its
    selector matches and turns the Service port's named targetPort into that Pod's container
    port; the bytes reach that Pod, not another Running one."""
    async with tcp_server(echo) as chosen, tcp_server(goodbye) as other:
        await cluster.running_pod("echo-0", chosen.port, {"app": "echo"})
        await cluster.running_pod("other-0", other.port, {"app": "other"})
        await cluster.api.create_namespaced_service(
            NAMESPACE,
            {
                "metadata": {"name": "echo"},
                "spec": {
                    "selector": {"app": "echo"},
                    "ports": [{"name": "tcp", "port": 8080, "targetPort": "echo"}],
                },
            },
        )
        local = free_port()
        async with port_forward(cluster.env, "svc/echo", f"{local}:8080") as forward:
            assert await forward.forwarding(local) == chosen.port
            assert await exchange(local, b"through the service\n") == b"through the service\n"
            assert chosen.accepted == 1 and other.accepted == 0


async def test_a_port_nobody_listens_on_is_reported_by_kubectl(cluster: Cluster) -> None:
    """The Pod refuses the connection: the local connection is closed and kubectl prints the
    error written on the error stream (then, like against a real cluster, gives up)."""
    dead = free_port()  # nothing listens there
    await cluster.running_pod("deaf", dead)
    local = free_port()
    async with port_forward(cluster.env, "pod/deaf", f"{local}:{dead}") as forward:
        await forward.forwarding(local)
        reader, writer = await connect(local)
        try:
            writer.write(b"anyone there?\n")
            await writer.drain()
            assert await until_closed(reader) == b""
        finally:
            writer.close()
        assert await forward.exited() != 0
        assert f"error forwarding port {dead} to pod {NAMESPACE}/deaf: " in forward.output
        assert "Connect call failed" in forward.output
        assert "lost connection to pod" in forward.output


async def test_kubectl_going_away_closes_the_pod_connections(cluster: Cluster) -> None:
    """When kubectl dies with connections open, the emulator closes their Pod connections."""
    async with (
        tcp_server(echo) as server,
        echo_forwarded(cluster, server.port) as (forward, local),
    ):
        reader, writer = await connect(local)
        try:
            writer.write(b"ping\n")
            await writer.drain()
            async with asyncio.timeout(MIN_DEADLINE_S):
                assert await reader.readline() == b"ping\n"
            assert server.open == 1
            await forward.stop()

            async def pod_side_closed() -> None:
                assert server.open == 0

            await eventually(pod_side_closed)
        finally:
            writer.close()


async def test_the_plain_spdy_upgrade_is_refused_with_a_status_kubectl_prints(
    cluster: Cluster,
) -> None:
    """With its WebSocket tunnel turned off kubectl asks for a plain SPDY/3.1 upgrade, which
    this emulator does not serve: kubectl fails, printing why."""
    await cluster.running_pod("echo", free_port())
    env = {**cluster.env, "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}
    async with port_forward(env, "pod/echo", f"{free_port()}:80") as forward:
        assert await forward.exited() != 0
        assert "error upgrading connection" in forward.output
        assert "forwards ports only through a WebSocket tunnel" in forward.output
        assert "Forwarding from" not in forward.output


class SpdyClient:
    """SPDY/3.1 frames written by hand into the WebSocket tunnel, for what kubectl sends rarely
    or never (RST_STREAM, GOAWAY, a PING on demand)."""

    SYN_STREAM, SYN_REPLY, RST_STREAM, PING, GOAWAY = 1, 2, 3, 6, 7

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._deflate = zlib.compressobj(zdict=spdy.HEADER_DICTIONARY)
        self._inflate = zlib.decompressobj(zdict=spdy.HEADER_DICTIONARY)
        self._buffer = b""

    async def control(self, kind: int, payload: bytes) -> None:
        await self.ws.send_bytes(struct.pack(">HHI", 0x8003, kind, len(payload)) + payload)

    async def syn_stream(self, stream_id: int, headers: Mapping[str, str]) -> None:
        raw = struct.pack(">I", len(headers)) + b"".join(
            struct.pack(">I", len(k)) + k.encode() + struct.pack(">I", len(v)) + v.encode()
            for k, v in headers.items()
        )
        block = self._deflate.compress(raw) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
        await self.control(self.SYN_STREAM, struct.pack(">IIH", stream_id, 0, 0) + block)

    async def data(self, stream_id: int, data: bytes) -> None:
        await self.ws.send_bytes(struct.pack(">II", stream_id, len(data)) + data)

    async def _exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            message = await self.ws.receive(timeout=MIN_DEADLINE_S)
            assert message.type is aiohttp.WSMsgType.BINARY, message
            self._buffer += message.data
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    async def frame(self) -> tuple[str, int, int, bytes]:
        """The next frame: ("control", type, flags, payload) or ("data", stream, flags, data);
        a SYN_REPLY's header block comes decompressed."""
        first, second = struct.unpack(">II", await self._exactly(8))
        payload = await self._exactly(second & 0xFFFFFF)
        if not first & 0x8000_0000:
            return "data", first, second >> 24, payload
        if first & 0xFFFF == self.SYN_REPLY:
            payload = payload[:4] + self._inflate.decompress(payload[4:])
        return "control", first & 0xFFFF, second >> 24, payload


async def test_pings_resets_and_goaway_from_a_hand_driven_client(cluster: Cluster) -> None:
    """In the tunnel kubectl uses: a PING is echoed; a stream pair is answered and echoes; the
    client's RST_STREAM on the data stream closes the Pod connection and ends the error stream
    empty; after the client's GOAWAY a new stream is refused."""
    async with tcp_server(echo) as server:
        await cluster.running_pod("echo", server.port)
        url = f"{cluster.url}/api/v1/namespaces/{NAMESPACE}/pods/echo/portforward"
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(url, protocols=(portforward.WEBSOCKET_PROTOCOL,)) as ws,
        ):
            assert ws.protocol == portforward.WEBSOCKET_PROTOCOL
            spdy = SpdyClient(ws)
            await spdy.control(SpdyClient.PING, struct.pack(">I", 7))
            assert await spdy.frame() == ("control", SpdyClient.PING, 0, struct.pack(">I", 7))
            headers = {"port": str(server.port), "requestid": "0"}
            await spdy.syn_stream(1, {**headers, "streamtype": "error"})
            await spdy.syn_stream(3, {**headers, "streamtype": "data"})
            no_headers = struct.pack(">I", 0)
            for stream_id in (1, 3):
                reply = ("control", SpdyClient.SYN_REPLY, 0, struct.pack(">I", stream_id))
                assert await spdy.frame() == (*reply[:3], reply[3] + no_headers)
            await spdy.data(3, b"hello")
            assert await spdy.frame() == ("data", 3, 0, b"hello")
            assert server.open == 1
            await spdy.control(SpdyClient.RST_STREAM, struct.pack(">II", 3, 5))  # CANCEL
            # Nothing more on the reset stream; the error stream ends with no error.
            assert await spdy.frame() == ("data", 1, 1, b"")

            async def pod_side_closed() -> None:
                assert server.open == 0

            await eventually(pod_side_closed)
            await spdy.control(SpdyClient.GOAWAY, struct.pack(">II", 3, 0))
            await spdy.syn_stream(5, {**headers, "requestid": "1", "streamtype": "error"})
            refused = struct.pack(">II", 5, 3)  # REFUSED_STREAM
            assert await spdy.frame() == ("control", SpdyClient.RST_STREAM, 0, refused)


async def test_other_websocket_subprotocols_are_refused_with_a_status(cluster: Cluster) -> None:
    """A WebSocket upgrade for the channel protocol some client libraries use
    (``v4.channel.k8s.io`` with ``?ports=``) is answered 400 with a ``Status`` naming the
    subprotocol that is served."""
    await cluster.running_pod("echo", free_port())
    url = f"{cluster.url}/api/v1/namespaces/{NAMESPACE}/pods/echo/portforward?ports=80"
    headers = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
        "Sec-WebSocket-Protocol": "v4.channel.k8s.io",
    }
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        assert response.status == 400
        status = await response.json()
    assert status["kind"] == "Status" and status["reason"] == "BadRequest", status
    assert portforward.WEBSOCKET_PROTOCOL in status["message"], status


def test_the_header_dictionary_is_the_spdy3_one() -> None:
    """Header blocks only decompress with the exact SPDY/3 dictionary: its length and the
    Adler-32 checksum zlib streams name it by."""
    assert len(spdy.HEADER_DICTIONARY) == 1423
    assert zlib.adler32(spdy.HEADER_DICTIONARY) == 0xE3C6A7C2
