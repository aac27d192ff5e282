"""The project's own refusal hierarchy.

Pure: no gRPC here. Each refusal carries a kind (how it maps to a transport status), the spec's
reason code and the spec's message. `services.common.rpc` maps kinds to gRPC status codes in one
place; the HTTP layer maps them to HTTP statuses in one place. Messages never carry secrets,
record values, paths or conversation text.
"""

from __future__ import annotations

import enum


class Kind(enum.Enum):
    """How a refusal maps onto a transport."""

    MALFORMED = "malformed"  # INVALID_ARGUMENT / 400
    UNAUTHENTICATED = "unauthenticated"  # UNAUTHENTICATED / 401
    FORBIDDEN = "forbidden"  # PERMISSION_DENIED / 403
    NOT_FOUND = "not_found"  # NOT_FOUND / 404
    REFUSED = "refused"  # FAILED_PRECONDITION / 409
    TOO_LARGE = "too_large"  # RESOURCE_EXHAUSTED / 413
    UNAVAILABLE = "unavailable"  # UNAVAILABLE / 503


class Refusal(Exception):
    """A request refused with a reason code and a message, both safe to show the caller."""

    kind: Kind = Kind.REFUSED

    def __init__(self, reason: str, message: str | None = None) -> None:
        self.reason = reason
        self.message = message if message is not None else reason
        super().__init__(self.message)


class Malformed(Refusal):
    """The request itself is wrong: missing or disagreeing fields."""

    kind = Kind.MALFORMED


class Unauthenticated(Refusal):
    """No credential, or one that is forged, expired or revoked."""

    kind = Kind.UNAUTHENTICATED

    def __init__(self, message: str = "credential missing or invalid") -> None:
        super().__init__("unauthenticated", message)


class ForbiddenScope(Refusal):
    """A valid credential used outside its scope (spec: forbidden_scope)."""

    kind = Kind.FORBIDDEN

    def __init__(self, message: str = "forbidden_scope") -> None:
        super().__init__("forbidden_scope", message)


class NotFound(Refusal):
    """The named thing does not exist."""

    kind = Kind.NOT_FOUND


class Refused(Refusal):
    """A well-formed request the current state refuses (spec refusals)."""

    kind = Kind.REFUSED


class TooLarge(Refusal):
    """An object over the configured size limit."""

    kind = Kind.TOO_LARGE


class Unavailable(Refusal):
    """This replica cannot serve the request now (a standby without the lease)."""

    kind = Kind.UNAVAILABLE
