"""SPDY/3.1 as kubectl port-forward speaks it through the API server: frames, the zlib header
compression with its shared dictionary, and the WebSocket channel
(``SPDY/3.1+portforward.k8s.io``) that carries them."""

from __future__ import annotations

import dataclasses
import logging
import struct
import zlib
from collections.abc import Mapping
from typing import Protocol

from aiohttp import WSMsgType, web

log = logging.getLogger("tests.support.kube.network.portforward")

# The SPDY/3 header dictionary (draft 3, section 2.6.10.1): header names and values, each with
# its length before it, then a run of common value fragments.
DICTIONARY_WORDS = (
    "options,head,post,put,delete,trace,accept,accept-charset,accept-encoding,accept-language,"
    "accept-ranges,age,allow,authorization,cache-control,connection,content-base,"
    "content-encoding,content-language,content-length,content-location,content-md5,"
    "content-range,content-type,date,etag,expect,expires,from,host,if-match,if-modified-since,"
    "if-none-match,if-range,if-unmodified-since,last-modified,location,max-forwards,pragma,"
    "proxy-authenticate,proxy-authorization,range,referer,retry-after,server,te,trailer,"
    "transfer-encoding,upgrade,user-agent,vary,via,warning,www-authenticate,method,get,status,"
    "200 OK,version,HTTP/1.1,url,public,set-cookie,keep-alive,origin"
)


DICTIONARY_FRAGMENTS = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)


HEADER_DICTIONARY = (
    b"".join(struct.pack(">I", len(word)) + word.encode() for word in DICTIONARY_WORDS.split(","))
    + DICTIONARY_FRAGMENTS.encode()
)


VERSION = 3


# Control frame types.
SYN_STREAM = 1


SYN_REPLY = 2


RST_STREAM = 3


SETTINGS = 4


PING = 6


GOAWAY = 7


HEADERS = 8


WINDOW_UPDATE = 9


# Flags.
FIN = 0x01


UNIDIRECTIONAL = 0x02


# RST_STREAM and GOAWAY status codes.
RST_PROTOCOL_ERROR = 1


RST_REFUSED_STREAM = 3


GOAWAY_PROTOCOL_ERROR = 1


MAX_MESSAGE = 2**24 + 16


class Channel(Protocol):
    """A bidirectional byte stream to the client."""

    async def read(self) -> bytes:
        """The next bytes from the client, or ``b""`` once it has gone."""

    async def write(self, data: bytes) -> None:
        """Send bytes to the client; ConnectionError once it has gone."""

    async def close(self) -> None:
        """End the stream (idempotent)."""


class WebSocketChannel:
    """The SPDY byte stream carried by binary WebSocket messages."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self._ws = ws
        self._ended = False

    async def read(self) -> bytes:
        while not self._ended:
            message = await self._ws.receive()
            if message.type is WSMsgType.BINARY:
                data: bytes = message.data
                if data:
                    return data
                continue
            if message.type is WSMsgType.TEXT:
                log.warning("port-forward: a text message in the SPDY tunnel; closing it")
            self._ended = True  # CLOSE, CLOSING, CLOSED, ERROR (or TEXT): no more bytes
        return b""

    async def write(self, data: bytes) -> None:
        if self._ws.closed:
            raise ConnectionResetError("the WebSocket is closed")
        await self._ws.send_bytes(data)  # ClientConnectionResetError is a ConnectionError

    async def close(self) -> None:
        self._ended = True
        await self._ws.close()


class ByteReader:
    """Exact-length reads over a channel's arbitrarily cut chunks."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._buffer = bytearray()

    async def exactly(self, size: int) -> bytes | None:
        """The next `size` bytes, or None if the stream ends first."""
        while len(self._buffer) < size:
            chunk = await self._channel.read()
            if not chunk:
                return None
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data


class ProtocolError(Exception):
    """The client broke SPDY/3.1: the session ends with GOAWAY(PROTOCOL_ERROR)."""


@dataclasses.dataclass(frozen=True)
class ControlFrame:
    kind: int
    flags: int
    payload: bytes


@dataclasses.dataclass(frozen=True)
class DataFrame:
    stream_id: int
    flags: int
    data: bytes


async def read_frame(reader: ByteReader) -> ControlFrame | DataFrame | None:
    """The next frame, or None when the stream ends (mid-frame included)."""
    head = await reader.exactly(8)
    if head is None:
        return None
    first, second = struct.unpack(">II", head)
    flags, length = second >> 24, second & 0xFFFFFF
    payload = await reader.exactly(length) if length else b""
    if payload is None:
        return None
    if first & 0x8000_0000:
        return ControlFrame(kind=first & 0xFFFF, flags=flags, payload=payload)
    return DataFrame(stream_id=first & 0x7FFF_FFFF, flags=flags, data=payload)


def control(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, flags << 24 | len(payload)) + payload


def data(stream_id: int, flags: int, data: bytes) -> bytes:
    return struct.pack(">II", stream_id, flags << 24 | len(data)) + data


class HeaderCodec:
    """SPDY/3 header blocks: zlib streams with the SPDY dictionary, one per direction."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(zdict=HEADER_DICTIONARY)
        self._deflate = zlib.compressobj(zdict=HEADER_DICTIONARY)

    def decode(self, block: bytes) -> dict[str, list[str]]:
        """A received block's headers (lower-case names; NUL-separated values split)."""
        try:
            raw = self._inflate.decompress(block)
            (count,) = struct.unpack_from(">I", raw)
            offset, headers = 4, {}
            for _ in range(count):
                name, offset = string(raw, offset)
                value, offset = string(raw, offset)
                headers[name.lower()] = value.split("\0")
        except (zlib.error, struct.error, UnicodeDecodeError) as exc:
            raise ProtocolError(f"bad header block: {exc}") from exc
        return headers

    def encode(self, headers: Mapping[str, str]) -> bytes:
        """A block to send; blocks must be sent in the order they are encoded."""
        raw = struct.pack(">I", len(headers)) + b"".join(
            struct.pack(">I", len(n)) + n + struct.pack(">I", len(v)) + v
            for n, v in ((k.lower().encode(), v.encode()) for k, v in headers.items())
        )
        return self._deflate.compress(raw) + self._deflate.flush(zlib.Z_SYNC_FLUSH)


def string(raw: bytes, offset: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">I", raw, offset)
    end = offset + 4 + length
    if end > len(raw):
        raise struct.error("a header string runs past its block")
    return raw[offset + 4 : end].decode(), end


def stream_id(payload: bytes) -> int:
    if len(payload) < 4:
        raise ProtocolError("a frame too short for its stream ID")
    return int(struct.unpack_from(">I", payload)[0]) & 0x7FFF_FFFF
