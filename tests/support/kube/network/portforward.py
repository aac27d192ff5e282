"""``pods/NAME/portforward`` for the Kubernetes API emulator, as the real kubectl speaks it.

The emulator calls `serve` with the request and a ``dial(port)`` that opens a TCP connection to
the Pod (its ``status.podIP``); this module does what the API server and the kubelet do
between them.

Implemented:

- The transport kubectl tries first (feature ``PortForwardWebsockets``, on by default since
  kubectl 1.31): a WebSocket upgrade (``GET``) with the subprotocol
  ``SPDY/3.1+portforward.k8s.io``, whose binary messages carry a SPDY/3.1 byte stream cut
  anywhere (kubectl writes one message per write call, so a frame spans several messages;
  each frame sent from here is one message).
- SPDY/3.1 as the kubelet serves ``portforward.k8s.io``: every SYN_STREAM is answered with a
  SYN_REPLY; an ``error`` and a ``data`` stream with the same ``requestID`` header make one
  forwarded connection, to the ``port`` header's port of the Pod. Bytes flow both ways; the
  client's FIN on the data stream half-closes the Pod connection; the Pod's end of stream is a
  FIN on the data stream and on the error stream (kubectl closes the local connection when the
  error stream ends), and the Pod connection is closed once the client has finished as well.
  A dial that fails (or a bad ``port``) is written as text on the error stream, which kubectl
  prints, and both streams get their FIN. RST_STREAM from the client ends its connection to
  the Pod; the client's PINGs are echoed; after its GOAWAY new streams are refused; SETTINGS,
  WINDOW_UPDATE and HEADERS are read and ignored. Header blocks are zlib streams primed with
  the SPDY/3 dictionary, one per direction for the life of the connection.
- When the client goes away every Pod connection and task of the session is closed before
  `serve` returns.

Not implemented:

- SPDY/3.1 over a plain HTTP upgrade (``Upgrade: SPDY/3.1``, the fallback kubectl uses when
  the WebSocket upgrade is refused, or always with ``KUBECTL_PORT_FORWARD_WEBSOCKETS=false``),
  and the WebSocket channel protocols (``v4.channel.k8s.io``/``?ports=``) some client libraries
  use: both are answered with a 400 ``Status`` saying what is served, which kubectl prints.
- SPDY flow control (neither kubectl's spdystream nor the kubelet uses it), PINGs from the
  server, stream priorities, and a deadline for the second stream of a pair (an unpaired
  stream lasts until the connection ends).
- Backpressure is per connection: a Pod that does not read holds up the frames of the other
  streams of the same kubectl too; bytes a client sends while its Pod connection is being
  dialled are buffered without a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import hdrs, web

from tests.support.kube.network import spdy

__all__ = ["PROTOCOL", "WEBSOCKET_PROTOCOL", "Dial", "serve"]

PROTOCOL = "portforward.k8s.io"
"""The port-forward protocol kubectl asks for (``X-Stream-Protocol-Version`` over SPDY)."""

WEBSOCKET_PROTOCOL = f"SPDY/3.1+{PROTOCOL}"
"""The WebSocket subprotocol of the SPDY tunnel."""

Dial = Callable[[int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
"""Opens a TCP connection to a port of the Pod."""

log = logging.getLogger(__name__)

"""The zlib dictionary of SPDY/3 header blocks (1423 bytes, Adler-32 ``0xe3c6a7c2``)."""


_CHUNK = 32 * 1024
"""The most bytes read from the Pod for one data frame."""

"""The largest WebSocket message taken: one SPDY frame of the largest length and its header."""


async def serve(request: web.Request, dial: Dial) -> web.StreamResponse:
    """Serve one ``pods/NAME/portforward`` request: upgrade to the WebSocket SPDY tunnel and
    forward the client's connections through `dial` until the client goes away, or answer a
    400 ``Status`` for any other kind of upgrade."""
    pod = f"{request.match_info.get('namespace', '')}/{request.match_info.get('name', '')}"
    if request.headers.get(hdrs.UPGRADE, "").lower() != "websocket":
        return _refusal(
            f"this API server forwards ports only through a WebSocket tunnel "
            f"({WEBSOCKET_PROTOCOL}), not through a plain "
            f"{request.headers.get(hdrs.UPGRADE) or 'HTTP'} upgrade: use kubectl 1.31 or later "
            "without KUBECTL_PORT_FORWARD_WEBSOCKETS=false"
        )
    offered = [
        protocol.strip()
        for value in request.headers.getall(hdrs.SEC_WEBSOCKET_PROTOCOL, [])
        for protocol in value.split(",")
    ]
    ws = web.WebSocketResponse(
        protocols=(WEBSOCKET_PROTOCOL,), compress=False, max_msg_size=spdy.MAX_MESSAGE
    )
    if WEBSOCKET_PROTOCOL not in offered or not ws.can_prepare(request).ok:
        return _refusal(
            f"the WebSocket subprotocols {offered} are not served: this API server forwards "
            f"ports through {WEBSOCKET_PROTOCOL} only"
        )
    await ws.prepare(request)
    await _Session(spdy.WebSocketChannel(ws), dial, pod).run()
    return ws


def _refusal(message: str) -> web.Response:
    """A 400 ``Status``, which kubectl prints as the reason the upgrade failed."""
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "BadRequest",
        "code": 400,
    }
    return web.json_response(status, status=400)


# -- the byte stream under SPDY ----------------------------------------------------------------


# -- SPDY/3.1 framing ---------------------------------------------------------------------------


# -- port forwarding ----------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class _Stream:
    """One SPDY stream the client opened."""

    id: int
    kind: str  # "error" or "data"
    forward: _Forward
    fin_sent: bool = False
    reset: bool = False  # the client sent RST_STREAM: nothing more is sent on it


class _Forward:
    """One forwarded connection: the ``error`` and ``data`` streams of one ``requestID`` and
    the TCP connection to the Pod they carry."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.error: _Stream | None = None
        self.data: _Stream | None = None
        self.port = ""
        self.client_done = asyncio.Event()
        """The client sent FIN or RST_STREAM on the data stream: it sends no more."""
        self._writer: asyncio.StreamWriter | None = None
        self._pending: list[bytes] = []  # the client's bytes while the Pod is dialled
        self._client_fin = False

    def connected(self, writer: asyncio.StreamWriter) -> None:
        """The Pod connection is open: pass on what the client already sent."""
        self._writer = writer
        if self._pending:
            writer.write(b"".join(self._pending))
            self._pending.clear()
        if self._client_fin:
            self._write_eof()
        if self.data is not None and self.data.reset:
            writer.close()

    async def from_client(self, data: bytes) -> None:
        """Bytes the client sent on the data stream, on to the Pod."""
        if self.client_done.is_set():
            return
        writer = self._writer
        if writer is None:
            self._pending.append(data)
        elif not writer.is_closing():
            writer.write(data)
            with contextlib.suppress(ConnectionError):
                await writer.drain()

    def client_finished(self) -> None:
        """The client's FIN on the data stream: half-close the Pod connection."""
        self._client_fin = True
        self.client_done.set()
        if self._writer is not None:
            self._write_eof()

    def client_reset(self) -> None:
        """The client's RST_STREAM on the data stream: drop the Pod connection."""
        self._pending.clear()
        self.client_done.set()
        self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def _write_eof(self) -> None:
        writer = self._writer
        if writer is not None and not writer.is_closing() and writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()


class _Session:
    """One client's SPDY connection: its streams, their Pod connections and tasks."""

    def __init__(self, channel: spdy.Channel, dial: Dial, pod: str) -> None:
        self._channel = channel
        self._dial = dial
        self._pod = pod
        self._reader = spdy.ByteReader(channel)
        self._codec = spdy.HeaderCodec()
        self._write_lock = asyncio.Lock()
        self._streams: dict[int, _Stream] = {}
        self._forwards: dict[str, _Forward] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_stream_id = 0
        self._going_away = False
        self._closed = False

    async def run(self) -> None:
        """Read the client's frames until it goes away, then close everything."""
        try:
            while (frame := await spdy.read_frame(self._reader)) is not None:
                if isinstance(frame, spdy.DataFrame):
                    await self._on_data(frame)
                else:
                    await self._on_control(frame)
        except spdy.ProtocolError as exc:
            log.warning("port-forward to %s: %s; going away", self._pod, exc)
            goaway = struct.pack(">II", self._last_stream_id, spdy.GOAWAY_PROTOCOL_ERROR)
            with contextlib.suppress(ConnectionError):
                await self._send(spdy.control(spdy.GOAWAY, 0, goaway))
        except ConnectionError:
            pass  # the client went away while being answered
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        self._closed = True
        for forward in self._forwards.values():
            forward.client_done.set()
            forward.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._channel.close()

    # -- frames from the client ----------------------------------------------------------------

    async def _on_control(self, frame: spdy.ControlFrame) -> None:
        payload = frame.payload
        if frame.kind == spdy.SYN_STREAM:
            await self._on_syn_stream(frame.flags, payload)
        elif frame.kind in (spdy.SYN_REPLY, spdy.HEADERS):
            # Nothing to act on, but the block is decoded: it moves the shared zlib stream.
            stream_id = spdy.stream_id(payload)
            self._codec.decode(payload[4:])
            if frame.flags & spdy.FIN:
                self._on_client_fin(stream_id)
        elif frame.kind == spdy.RST_STREAM:
            self._on_reset(spdy.stream_id(payload))
        elif frame.kind == spdy.PING:
            if len(payload) != 4:
                raise spdy.ProtocolError("a PING frame is 4 bytes long")
            if struct.unpack(">I", payload)[0] & 1:  # the client's own: echo it
                await self._send(spdy.control(spdy.PING, 0, payload))
        elif frame.kind == spdy.GOAWAY:
            self._going_away = True
        # SETTINGS, WINDOW_UPDATE (no flow control here) and unknown types are ignored.

    async def _on_syn_stream(self, flags: int, payload: bytes) -> None:
        if len(payload) < 10:
            raise spdy.ProtocolError("a SYN_STREAM frame is at least 10 bytes long")
        stream_id = spdy.stream_id(payload)
        headers = self._codec.decode(payload[10:])
        if stream_id % 2 == 0 or stream_id <= self._last_stream_id:
            await self._send_reset(stream_id, spdy.RST_PROTOCOL_ERROR)
            return
        self._last_stream_id = stream_id
        kind = _first(headers, "streamtype")
        if self._going_away or kind not in ("error", "data"):
            await self._send_reset(
                stream_id, spdy.RST_REFUSED_STREAM if self._going_away else spdy.RST_PROTOCOL_ERROR
            )
            return
        # Clients older than the requestID header open the error stream, then the data
        # stream, with consecutive odd stream IDs: the error stream's ID names the pair.
        request_id = _first(headers, "requestid") or str(
            stream_id if kind == "error" else stream_id - 2
        )
        forward = self._forwards.setdefault(request_id, _Forward(request_id))
        if getattr(forward, kind) is not None:
            await self._send_reset(stream_id, spdy.RST_PROTOCOL_ERROR)  # a second stream of a kind
            return
        stream = _Stream(stream_id, kind, forward)
        setattr(forward, kind, stream)
        self._streams[stream_id] = stream
        if kind == "data":
            forward.port = _first(headers, "port")
        await self._send_headers(spdy.SYN_REPLY, stream_id, {})
        if flags & (spdy.FIN | spdy.UNIDIRECTIONAL):
            self._on_client_fin(stream_id)
        if forward.error is not None and forward.data is not None:
            task = asyncio.create_task(
                self._forward(forward), name=f"port-forward {self._pod} request {request_id}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._task_done)

    async def _on_data(self, frame: spdy.DataFrame) -> None:
        stream = self._streams.get(frame.stream_id)
        if stream is None:
            return  # a stream already ended (or never opened): dropped, as spdystream does
        if stream.kind == "data" and frame.data:
            await stream.forward.from_client(frame.data)
        if frame.flags & spdy.FIN:
            self._on_client_fin(frame.stream_id)

    def _on_client_fin(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is not None and stream.kind == "data":
            stream.forward.client_finished()
        # The client closes its side of the error stream at once: nothing to do.

    def _on_reset(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        stream.reset = True
        if stream.kind == "data":
            stream.forward.client_reset()

    # -- one forwarded connection --------------------------------------------------------------

    async def _forward(self, forward: _Forward) -> None:
        error, data = forward.error, forward.data
        assert error is not None and data is not None
        try:
            try:
                port = _port(forward.port)
                reader, writer = await self._dial(port)
            except (OSError, ValueError) as exc:
                message = f"error forwarding port {forward.port} to pod {self._pod}: {exc}"
                log.info("port-forward: %s", message)
                await self._send_data(error, message.encode())
                await self._send_fin(error)
                await self._send_fin(data)
                return
            try:
                forward.connected(writer)
                await self._pump_to_client(reader, data)
                # The Pod has finished sending: so has this forward (kubectl waits for the end
                # of the error stream before it closes the local connection). What the client
                # still sends goes on to the Pod until it finishes too.
                await self._send_fin(data)
                await self._send_fin(error)
                await forward.client_done.wait()
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
        except ConnectionError:
            pass  # the client went away: `run` ends the session
        finally:
            for stream in (error, data):
                self._streams.pop(stream.id, None)
            if self._forwards.get(forward.request_id) is forward:
                del self._forwards[forward.request_id]

    async def _pump_to_client(self, reader: asyncio.StreamReader, data: _Stream) -> None:
        while not data.reset:
            try:
                chunk = await reader.read(_CHUNK)
            except OSError:
                return  # the Pod reset its connection: an end of stream here
            if not chunk:
                return
            await self._send_data(data, chunk)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("port-forward to %s failed", self._pod, exc_info=task.exception())

    # -- frames to the client ------------------------------------------------------------------

    async def _send(self, frame: bytes) -> None:
        async with self._write_lock:
            if self._closed:
                raise ConnectionResetError("the port-forward session has ended")
            await self._channel.write(frame)

    async def _send_headers(self, kind: int, stream_id: int, headers: Mapping[str, str]) -> None:
        # Encoded under the lock: header blocks must go out in the order they were compressed.
        async with self._write_lock:
            if self._closed:
                raise ConnectionResetError("the port-forward session has ended")
            block = self._codec.encode(headers)
            await self._channel.write(spdy.control(kind, 0, struct.pack(">I", stream_id) + block))

    async def _send_reset(self, stream_id: int, status: int) -> None:
        await self._send(spdy.control(spdy.RST_STREAM, 0, struct.pack(">II", stream_id, status)))

    async def _send_data(self, stream: _Stream, data: bytes) -> None:
        if not (stream.reset or stream.fin_sent):
            await self._send(spdy.data(stream.id, 0, data))

    async def _send_fin(self, stream: _Stream) -> None:
        if not (stream.reset or stream.fin_sent):
            stream.fin_sent = True
            await self._send(spdy.data(stream.id, spdy.FIN, b""))


def _first(headers: Mapping[str, list[str]], name: str) -> str:
    return headers.get(name, [""])[0]


def _port(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 0 < int(text) < 65536):
        raise ValueError(f"invalid port {text!r}")
    return int(text)
