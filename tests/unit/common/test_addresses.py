"""The controller address the CLI dials, checked as HOST:PORT before any connection (issue 20,
part 4, line 3: "`--control http://127.0.0.1:50051` (or AGENTIHOOKS_CONTROL_ADDR with a scheme,
or missing port, or garbage) … must be refused at once as malformed with a clear line saying the
address must be HOST:PORT and what was given")."""

from __future__ import annotations

import pytest

from services.common import addresses


@pytest.mark.parametrize(
    ("value", "host", "port"),
    [
        ("127.0.0.1:50051", "127.0.0.1", 50051),
        ("localhost:1", "localhost", 1),
        (
            "agentihooks-controller.agentihooks.svc:50051",
            "agentihooks-controller.agentihooks.svc",
            50051,
        ),
        ("[::1]:65535", "::1", 65535),
        ("[fe80::1]:50051", "fe80::1", 50051),
    ],
)
def test_host_port_is_split(value: str, host: str, port: int) -> None:
    """HOST:PORT, a host name or an IP address (IPv6 in brackets), is what the CLI dials."""
    assert addresses.parse(value) == (host, port)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("http://127.0.0.1:50051", "leave out the scheme"),
        ("grpc://controller:50051", "leave out the scheme"),
        ("127.0.0.1", "the port is missing"),
        ("garbage", "the port is missing"),
        ("", "the port is missing"),
        ("[::1]", "the port is missing"),
        ("[nonsense]:50051", "brackets must hold an IPv6 address"),
        ("::1:50051", "IPv6 address goes in brackets"),
        ("fe80::1", "IPv6 address goes in brackets"),
        ("dns:127.0.0.1:50051", "leave out any prefix"),
        ("ipv4:127.0.0.1:50051", "leave out any prefix"),
        (":50051", "not a host name or an IP address"),
        ("bad host:50051", "not a host name or an IP address"),
        ("a..b:50051", "not a host name or an IP address"),
        ("127.0.0.1:0", "from 1 to 65535"),
        ("127.0.0.1:65536", "from 1 to 65535"),
        ("127.0.0.1:50051/", "from 1 to 65535"),
        ("127.0.0.1:-1", "from 1 to 65535"),
        ("127.0.0.1:\u0665\u0660", "from 1 to 65535"),  # digits, but not ASCII ones
    ],
)
def test_anything_else_is_malformed_and_says_why(value: str, why: str) -> None:
    """A scheme, a missing port, garbage: refused with the reason, never the value itself."""
    with pytest.raises(addresses.Malformed) as refused:
        addresses.parse(value)
    assert why in str(refused.value)
    if value:
        assert value not in str(refused.value)


def test_a_shown_value_hides_a_password_and_is_cut_short() -> None:
    """What was given is repeated quoted, with any user:password@ masked and cut short."""
    assert addresses.shown("http://127.0.0.1:50051") == "'http://127.0.0.1:50051'"
    assert addresses.shown("http://me:s3cret@host:1") == "'http://***@host:1'"
    assert addresses.shown("me:s3cret@host:1") == "'***@host:1'"
    assert addresses.shown("a\tb") == "'a\\tb'"
    long = addresses.shown("x" * 500)
    assert len(long) < 100 and long.endswith("...'")
