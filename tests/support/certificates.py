"""Test certificate authorities and the certificates they sign, written as PEM files.

What cert-manager would issue: a CA, and leaf certificates for `localhost` and 127.0.0.1 with
both server and client usages (one identity per process). A leaf may be issued already expired,
and a second CA stands for "a CA the client does not trust".
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclasses.dataclass(frozen=True)
class Leaf:
    """A certificate and its key, as files."""

    cert: pathlib.Path
    key: pathlib.Path
    serial: int


class Authority:
    """A CA that signs leaves into `folder`."""

    def __init__(self, folder: pathlib.Path, name: str = "test-ca") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.bundle = folder / f"{name}.crt"
        self.bundle.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        name: str,
        *,
        hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
        expired: bool = False,
        cert: pathlib.Path | None = None,
        key: pathlib.Path | None = None,
    ) -> Leaf:
        """A leaf for `hosts` (DNS names and IP addresses), server and client usages; written
        to `cert`/`key` when given (a rotation rewrites the same files), else beside the CA."""
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = (now - 10 * _DAY, now - _DAY) if expired else (now - _DAY, now + 7 * _DAY)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        serial = x509.random_serial_number()
        built = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._cert.subject)
            .public_key(leaf_key.public_key())
            .serial_number(serial)
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        cert = cert or self.folder / f"{name}.crt"
        key = key or self.folder / f"{name}.key"
        key.write_bytes(
            leaf_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        cert.write_bytes(built.public_bytes(serialization.Encoding.PEM))
        return Leaf(cert, key, serial)


def tls_env(
    ca: Authority, leaf: Leaf | None, *, client_ca: Authority | None = None
) -> dict[str, str]:
    """The `AGENTIHOOKS_TLS_*` settings of a process that trusts `ca`, with `leaf` as its
    certificate, requiring client certificates signed by `client_ca` when given."""
    env = {"AGENTIHOOKS_TLS_CA_FILE": str(ca.bundle)}
    if leaf is not None:
        env["AGENTIHOOKS_TLS_CERT_FILE"] = str(leaf.cert)
        env["AGENTIHOOKS_TLS_KEY_FILE"] = str(leaf.key)
    if client_ca is not None:
        env["AGENTIHOOKS_TLS_CLIENT_CA_FILE"] = str(client_ca.bundle)
    return env
