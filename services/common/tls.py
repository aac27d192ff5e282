"""TLS credentials for every connection: gRPC servers and channels, the HTTP server and client.

Files are re-read when they change (cert-manager rewrites them in place before they expire): a
server checks them on each new handshake (a stat per handshake, a read only after a change), and
each new channel reads them afresh. Nothing here logs a key or a certificate's contents.
"""

from __future__ import annotations

import logging
import pathlib
import ssl
import threading
from collections.abc import Sequence
from typing import Any

import grpc

from services.common import logs, tls_settings
from services.common.tls_settings import TLSError, TLSSettings, from_environment

log = logging.getLogger("services.tls")


class _Files:
    """Files read together and re-read only when one of them changed (inode, size or mtime)."""

    def __init__(self, paths: Sequence[pathlib.Path]) -> None:
        self._paths = tuple(paths)
        self._lock = threading.Lock()
        self._seen: tuple[tuple[int, int, int], ...] | None = None

    def _stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in self._paths:
            st = path.stat()
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stamps)

    def read_if_changed(self) -> tuple[bytes, ...] | None:
        """The files' bytes when they changed since the last read (or on the first), else None.

        A file missing or half-written during a rotation keeps the previous contents: the next
        handshake looks again."""
        with self._lock:
            try:
                stamp = self._stamp()
                if stamp == self._seen:
                    return None
                contents = tuple(path.read_bytes() for path in self._paths)
            except OSError:
                return None
            self._seen = stamp
            return contents


def server_credentials(conf: TLSSettings) -> grpc.ServerCredentials | None:
    """The gRPC server credentials of `conf` (None: plaintext), re-reading the files when they
    change. With a client CA, a client certificate signed by it is required."""
    if conf.cert_file is None or conf.key_file is None:
        return None
    paths = [conf.key_file, conf.cert_file]
    if conf.client_ca_file is not None:
        paths.append(conf.client_ca_file)
    files = _Files(paths)

    def configuration(contents: tuple[bytes, ...]) -> Any:
        client_ca = contents[2] if len(contents) > 2 else None
        return grpc.ssl_server_certificate_configuration(
            [(contents[0], contents[1])], root_certificates=client_ca
        )

    first = files.read_if_changed()
    if first is None:
        raise TLSError(f"{tls_settings.CERT_FILE} or {tls_settings.KEY_FILE} cannot be read")
    logs.event(log, "tls_files_loaded", certificate=str(conf.cert_file))

    def fetch() -> Any:
        contents = files.read_if_changed()
        if contents is None:
            return None  # unchanged: gRPC keeps the current configuration
        logs.event(log, "tls_files_reloaded", certificate=str(conf.cert_file))
        return configuration(contents)

    return grpc.dynamic_ssl_server_credentials(
        configuration(first),
        fetch,
        require_client_authentication=conf.client_ca_file is not None,
    )


def channel_credentials(conf: TLSSettings) -> grpc.ChannelCredentials | None:
    """The gRPC channel credentials of `conf` (None: plaintext), read from the files now, so a
    new channel picks up rotated files. The process's certificate goes along as the client
    certificate when it has one."""
    if conf.ca_file is None:
        return None
    key = chain = None
    if conf.cert_file is not None and conf.key_file is not None:
        key, chain = conf.key_file.read_bytes(), conf.cert_file.read_bytes()
    return grpc.ssl_channel_credentials(conf.ca_file.read_bytes(), key, chain)


def channel(
    target: str,
    conf: TLSSettings | None = None,
    *,
    options: Sequence[tuple[str, Any]] = (),
    peer: bool = False,
) -> grpc.aio.Channel:
    """A channel to `target`: TLS when the process has a CA bundle, else plaintext.

    `conf` defaults to the process's environment. `peer` marks a call to another controller
    replica, whose certificate is checked against `AGENTIHOOKS_TLS_PEER_NAME` when set."""
    conf = from_environment() if conf is None else conf
    credentials = channel_credentials(conf)
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=list(options))
    extra = list(options)
    if peer and conf.peer_name:
        extra.append(("grpc.ssl_target_name_override", conf.peer_name))
    return grpc.aio.secure_channel(target, credentials, options=extra)


class _ReloadingServerContext:
    """An HTTPS server context whose certificate is re-read when its files change: the SNI
    callback of each new handshake swaps in a fresh context after a change."""

    def __init__(self, conf: TLSSettings) -> None:
        assert conf.cert_file is not None and conf.key_file is not None
        self._conf = conf
        self._files = _Files([conf.cert_file, conf.key_file])
        self._files.read_if_changed()
        self._current = self._build()
        self.context = self._build()
        self.context.sni_callback = self._sni

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        assert self._conf.cert_file is not None and self._conf.key_file is not None
        context.load_cert_chain(self._conf.cert_file, self._conf.key_file)
        return context

    def _sni(self, sslobj: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        if self._files.read_if_changed() is not None:
            try:
                self._current = self._build()
                logs.event(log, "tls_files_reloaded", certificate=str(self._conf.cert_file))
            except (OSError, ssl.SSLError, ValueError):
                logs.event(
                    log,
                    "tls_reload_failed",
                    logging.WARNING,
                    certificate=str(self._conf.cert_file),
                )
        sslobj.context = self._current


def http_server_context(conf: TLSSettings) -> ssl.SSLContext | None:
    """The HTTPS context of the controller's HTTP API and page (None: plaintext). Browsers
    carry no client certificate, so none is asked for; callers authenticate with tokens."""
    if not conf.serving:
        return None
    return _ReloadingServerContext(conf).context


def http_client_context(conf: TLSSettings | None = None) -> ssl.SSLContext | None:
    """The context of an HTTPS client of the process (a replica forwarding to another), read
    now; None when the process dials plaintext."""
    conf = from_environment() if conf is None else conf
    if conf.ca_file is None:
        return None
    context = ssl.create_default_context(cafile=conf.ca_file)
    if conf.cert_file is not None and conf.key_file is not None:
        context.load_cert_chain(conf.cert_file, conf.key_file)
    return context
