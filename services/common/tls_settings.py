"""TLS settings: which certificate, key and CA files a process serves and dials with.

One process has one identity. `AGENTIHOOKS_TLS_CERT_FILE` and `AGENTIHOOKS_TLS_KEY_FILE` are the
certificate it serves with, and the client certificate it presents when a server it dials asks
for one (mutual TLS between services). `AGENTIHOOKS_TLS_CA_FILE` is the bundle it verifies the
servers it dials with: set, every client of the process dials TLS; unset, plaintext.
`AGENTIHOOKS_TLS_CLIENT_CA_FILE` makes its gRPC server require a client certificate signed by
that bundle. `AGENTIHOOKS_TLS_PEER_NAME` is the name a controller expects on another replica's
certificate when it forwards a call to it (replicas advertise their Pod IPs, which no issued
certificate names).

Pure apart from reading the files it checks (no gRPC): `tls` builds the credentials. Nothing
here logs a key or a certificate's contents.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import ssl
from collections.abc import Mapping

CERT_FILE = "AGENTIHOOKS_TLS_CERT_FILE"
KEY_FILE = "AGENTIHOOKS_TLS_KEY_FILE"
CA_FILE = "AGENTIHOOKS_TLS_CA_FILE"
CLIENT_CA_FILE = "AGENTIHOOKS_TLS_CLIENT_CA_FILE"
PEER_NAME = "AGENTIHOOKS_TLS_PEER_NAME"


class TLSError(ValueError):
    """TLS settings or files that cannot be used; the message names the variable or file (the
    settings loader turns it into a `SettingsError`)."""


@dataclasses.dataclass(frozen=True)
class TLSSettings:
    """The TLS files of a process; all None is plaintext."""

    cert_file: pathlib.Path | None = None
    key_file: pathlib.Path | None = None
    ca_file: pathlib.Path | None = None
    client_ca_file: pathlib.Path | None = None
    peer_name: str | None = None

    @property
    def serving(self) -> bool:
        """Whether servers of the process serve TLS."""
        return self.cert_file is not None

    @property
    def dialing(self) -> bool:
        """Whether clients of the process dial TLS."""
        return self.ca_file is not None


PLAINTEXT = TLSSettings()


def _path(env: Mapping[str, str], name: str) -> pathlib.Path | None:
    value = (env.get(name) or "").strip()
    if not value:
        return None
    path = pathlib.Path(value)
    if not path.is_absolute():
        raise TLSError(f"{name} must be an absolute path, not the relative {value!r}")
    return path


def load(env: Mapping[str, str], *, check_files: bool = True) -> TLSSettings:
    """The TLS settings of `env`, refused in one line naming the variable when unusable.

    With `check_files`, every named file must be readable and hold what it should (a PEM
    certificate chain and its key; CA bundles): an entry point calls this at start, so a wrong
    mount fails the process at once rather than its first handshake.
    """
    conf = TLSSettings(
        cert_file=_path(env, CERT_FILE),
        key_file=_path(env, KEY_FILE),
        ca_file=_path(env, CA_FILE),
        client_ca_file=_path(env, CLIENT_CA_FILE),
        peer_name=(env.get(PEER_NAME) or "").strip() or None,
    )
    if (conf.cert_file is None) != (conf.key_file is None):
        raise TLSError(f"{CERT_FILE} and {KEY_FILE} must be set together")
    if conf.client_ca_file is not None and conf.cert_file is None:
        raise TLSError(
            f"{CLIENT_CA_FILE} needs {CERT_FILE} and {KEY_FILE}: a server asks for client"
            " certificates only over TLS"
        )
    if check_files:
        check(conf)
    return conf


def check(conf: TLSSettings) -> None:
    """Refuse files that cannot be read or parsed, naming the file (never its contents)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if conf.cert_file is not None and conf.key_file is not None:
        _readable(conf.cert_file, CERT_FILE)
        _readable(conf.key_file, KEY_FILE)
        try:
            context.load_cert_chain(conf.cert_file, conf.key_file)
        except (ssl.SSLError, ValueError) as exc:
            raise TLSError(
                f"{CERT_FILE} and {KEY_FILE} are not a PEM certificate chain and its private key"
                f" ({conf.cert_file}, {conf.key_file}): {_reason(exc)}"
            ) from None
    for path, name in ((conf.ca_file, CA_FILE), (conf.client_ca_file, CLIENT_CA_FILE)):
        if path is None:
            continue
        _readable(path, name)
        try:
            context.load_verify_locations(cafile=path)
        except (ssl.SSLError, ValueError) as exc:
            raise TLSError(f"{name} holds no PEM CA certificate ({path}): {_reason(exc)}") from None


def _readable(path: pathlib.Path, name: str) -> None:
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise TLSError(f"{name} cannot be read ({path}): {exc.strerror}") from None


def _reason(exc: Exception) -> str:
    return getattr(exc, "reason", None) or exc.__class__.__name__


def from_environment() -> TLSSettings:
    """The process's TLS settings, read from its environment now (files not re-checked)."""
    return load(os.environ, check_files=False)


def transport(conf: TLSSettings) -> str:
    """How a server of `conf` serves, as its start line says: `plaintext`, `tls` or
    `mutual_tls`."""
    if not conf.serving:
        return "plaintext"
    return "mutual_tls" if conf.client_ca_file is not None else "tls"
