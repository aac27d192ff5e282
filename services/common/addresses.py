"""HOST:PORT addresses, checked before any connection or bind is tried (pure).

gRPC takes almost any string as a target (`http://…` resolves as a host name, a missing port
becomes 443), so a mistyped address would only surface as "unavailable" after a connection
attempt. The CLI, the settings loader and the servers accept HOST:PORT only and say what is
wrong with anything else.
"""

from __future__ import annotations

import ipaddress
import re

EXAMPLE = "127.0.0.1:50051"
SHOWN_CHARS = 80
"""How much of a malformed value an error repeats (it may be a pasted blob)."""

_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^/@]*@")


class Malformed(ValueError):
    """A value that is not HOST:PORT; the message says why and never repeats the value."""


def parse(value: str, *, listening: bool = False) -> tuple[str, int]:
    """Split HOST:PORT (an IPv6 host in brackets: `[::1]:50051`) into host and port.

    Args:
        value: The address.
        listening: An address to listen on, where port 0 means any free port.

    Raises:
        Malformed: a scheme or other prefix, no port, a port outside 1-65535 (0-65535 when
            listening) or a host that is neither a host name nor an IP address.
    """
    if "://" in value:
        raise Malformed("leave out the scheme (no http:// or grpc://)")
    if value.startswith("["):
        host, close, rest = value[1:].partition("]")
        if not close or not _is_ipv6(host):
            raise Malformed("the brackets must hold an IPv6 address")
        if not rest.startswith(":"):
            raise Malformed("the port is missing")
        port = rest[1:]
    else:
        host, colon, port = value.rpartition(":")
        if not colon:
            raise Malformed("the port is missing")
        if ":" in host and (_is_ipv6(host) or _is_ipv6(value)):
            raise Malformed("an IPv6 address goes in brackets, as in [::1]:50051")
        if ":" in host:
            # gRPC's own target forms (`dns:host:port`, `ipv4:…`) are not HOST:PORT either.
            raise Malformed("leave out any prefix: the only ':' comes before the port")
        if not _is_host(host):
            raise Malformed("the host is not a host name or an IP address")
    lowest = 0 if listening else 1
    if not (port.isascii() and port.isdigit()) or not lowest <= int(port) <= 65535:
        raise Malformed(f"the port must be a number from {lowest} to 65535")
    return host, int(port)


def shown(value: str) -> str:
    """A malformed value as an error may repeat it: any `user:password@` part masked, cut
    short, quoted (so blanks and control characters show). Credentials the CLI knows are
    redacted by the caller first, before cutting or quoting could change how they read."""
    masked = _USERINFO.sub(lambda m: f"{m.group(1) or ''}***@", value, count=1)
    if len(masked) > SHOWN_CHARS:
        masked = masked[:SHOWN_CHARS] + "..."
    return repr(masked)


def _is_host(host: str) -> bool:
    if not host or len(host) > 253:
        return False
    return all(_LABEL.fullmatch(label) for label in host.split("."))


def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True
