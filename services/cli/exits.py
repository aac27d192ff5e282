"""How the `agentihooks` command ends: its exit codes, the one-line error it shows
(`CliError`), and a controller's refusal mapped onto both.
"""

from __future__ import annotations

import signal

import grpc

from services.common import rpc, tls_settings

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_FORBIDDEN = 4
EXIT_NOT_FOUND = 5
EXIT_UNAVAILABLE = 6
# What a shell reports for a program that SIGPIPE ended (128 + 13), as for `yes | head -1`:
# the output was cut short, so not 0 (an events stream did not end by itself), and a
# `set -o pipefail` script sees the same status as for any other Unix tool in that place.
EXIT_STDOUT_CLOSED = 128 + signal.SIGPIPE
TOKEN_VARIABLES = ("AGENTIHOOKS_TOKEN", "AGENTIHOOKS_OPERATOR_TOKEN")

_EXIT_BY_CODE = {
    grpc.StatusCode.FAILED_PRECONDITION: EXIT_REFUSED,
    grpc.StatusCode.ALREADY_EXISTS: EXIT_REFUSED,
    grpc.StatusCode.PERMISSION_DENIED: EXIT_FORBIDDEN,
    grpc.StatusCode.UNAUTHENTICATED: EXIT_FORBIDDEN,
    grpc.StatusCode.NOT_FOUND: EXIT_NOT_FOUND,
    grpc.StatusCode.UNAVAILABLE: EXIT_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: EXIT_UNAVAILABLE,
    grpc.StatusCode.INVALID_ARGUMENT: EXIT_USAGE,
}


class CliError(Exception):
    """A failure to show the operator as one line, with its exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


def refusal(exc: grpc.aio.AioRpcError, addr: str) -> CliError:
    code = exc.code()
    exit_code = _EXIT_BY_CODE.get(code, EXIT_ERROR)
    fix = f" at {addr}: check --control or AGENTIHOOKS_CONTROL_ADDR"
    if code == grpc.StatusCode.UNAVAILABLE:
        reason = reason_of(exc)
        if reason:
            # The controller answered and said why it cannot serve (Redis does not answer, or
            # this replica does not hold the lease): its words, not a connection hint.
            return CliError(f"{exc.details()} ({reason})", exit_code)
        details = exc.details() or ""
        if "handshake" in details.lower() or "CERTIFICATE" in details:
            return CliError(
                f"the TLS handshake with the controller at {addr} failed: check"
                f" {tls_settings.CA_FILE} (the controller's certificate must be signed by it,"
                " unexpired and name the host you dial)",
                exit_code,
            )
        return CliError(
            f"the controller is unavailable{fix} (if it serves TLS, set {tls_settings.CA_FILE})",
            exit_code,
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return CliError(f"the controller did not answer in time{fix}", exit_code)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        hint = "; check AGENTIHOOKS_TOKEN"
        return CliError(f"{exc.details()} ({code.name.lower()}){hint}", exit_code)
    return CliError(f"{exc.details()} ({code.name.lower()})", exit_code)


def reason_of(exc: grpc.aio.AioRpcError) -> str:
    """The reason code a controller sent with its refusal, or "" when none answered."""
    for key, value in exc.trailing_metadata() or ():
        if key == rpc.REASON_KEY:
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""
