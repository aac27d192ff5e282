"""cert-manager for the Kubernetes API emulator: Issuers and Certificates become TLS Secrets, as
cert-manager's controllers make them, through the API server's REST API only.

- **Issuer** (``cert-manager.io/v1``): ``selfSigned: {}`` is Ready at once; ``ca: {secretName}``
  once that Secret holds ``tls.crt`` and ``tls.key`` (else Ready False, reason
  ``ErrGetKeyPair``).
- **Certificate**: once its Issuer (``issuerRef``, kind Issuer, in its namespace) is Ready, its
  Secret ``spec.secretName`` is written, type ``kubernetes.io/tls``: ``tls.key`` a new key
  (``privateKey.algorithm`` ECDSA of ``size`` 256 or 384, or RSA; ``encoding`` PKCS1, the
  default, or PKCS8), ``tls.crt`` with ``commonName`` as subject, ``dnsNames`` and
  ``ipAddresses`` as subject alternative names, ``usages`` as key usages and extended key
  usages (cert-manager's default, ``digital signature`` and ``key encipherment``, when none),
  ``isCA`` as basic constraints, valid for ``duration`` (90 days by default); ``ca.crt`` the
  signer's certificate (itself for a self-signed one, the CA Secret's ``tls.crt`` for a CA
  Issuer). Its status then has ``Ready`` True, ``notBefore``, ``notAfter`` and ``renewalTime``.
  A Certificate whose Secret already holds a certificate of the same spec is left alone.

Not emulated: renewal, ClusterIssuers, CertificateRequests and Orders, ACME, Vault and other
issuers, ``secretTemplate``, keystores, ``subject`` fields beyond ``commonName``.

Use `running(api_url)` (an async context manager) beside the emulator.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.kube import api_client

log = logging.getLogger(__name__)

GROUP = "/apis/cert-manager.io/v1"
CORE = "/api/v1"
MERGE = "application/merge-patch+json"
ROUND_S = 0.3
SPEC_ANNOTATION = "tests.cert-manager.io/spec"
"""On a Secret it wrote: the Certificate spec it was written for."""

_EXTENDED = {
    "server auth": ExtendedKeyUsageOID.SERVER_AUTH,
    "client auth": ExtendedKeyUsageOID.CLIENT_AUTH,
    "code signing": ExtendedKeyUsageOID.CODE_SIGNING,
    "email protection": ExtendedKeyUsageOID.EMAIL_PROTECTION,
}
_KEY_USAGES = {
    "digital signature": "digital_signature",
    "content commitment": "content_commitment",
    "key encipherment": "key_encipherment",
    "data encipherment": "data_encipherment",
    "key agreement": "key_agreement",
    "cert sign": "key_cert_sign",
    "crl sign": "crl_sign",
}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")


def _duration(text: str | None, default: datetime.timedelta) -> datetime.timedelta:
    """A Go duration such as ``2160h`` or ``1h30m``."""
    if not text:
        return default
    unit = {"h": 3600, "m": 60, "s": 1}
    return datetime.timedelta(seconds=sum(float(n) * unit[u] for n, u in _DURATION.findall(text)))


def _key(spec: Mapping[str, Any]) -> Any:
    private = spec.get("privateKey") or {}
    if private.get("algorithm", "RSA") == "ECDSA":
        curve = ec.SECP384R1() if int(private.get("size", 256)) == 384 else ec.SECP256R1()
        return ec.generate_private_key(curve)
    return rsa.generate_private_key(65537, int(private.get("size", 2048)))


def _key_pem(key: Any, spec: Mapping[str, Any]) -> bytes:
    encoding = (spec.get("privateKey") or {}).get("encoding", "PKCS1")
    if encoding == "PKCS8":
        fmt = serialization.PrivateFormat.PKCS8
    else:  # PKCS1: "EC PRIVATE KEY" (SEC 1) or "RSA PRIVATE KEY"
        fmt = serialization.PrivateFormat.TraditionalOpenSSL
    return bytes(key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()))


def _sign(
    spec: Mapping[str, Any], key: Any, signer: tuple[x509.Certificate, Any] | None
) -> x509.Certificate:
    """The certificate of `spec` for `key`, signed by `signer` (certificate, key) or itself."""
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, spec["commonName"])]
        if spec.get("commonName")
        else []
    )
    usages = spec.get("usages") or ["digital signature", "key encipherment"]
    flags = {name: False for name in _KEY_USAGES.values()}
    for usage in usages:
        if usage in _KEY_USAGES:
            flags[_KEY_USAGES[usage]] = True
    if spec.get("isCA"):
        flags["key_cert_sign"] = True
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(signer[0].subject if signer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _duration(spec.get("duration"), datetime.timedelta(days=90)))
        .add_extension(
            x509.BasicConstraints(ca=bool(spec.get("isCA")), path_length=None), critical=True
        )
        .add_extension(
            x509.KeyUsage(**flags, encipher_only=False, decipher_only=False), critical=True
        )
    )
    extended = [_EXTENDED[u] for u in usages if u in _EXTENDED]
    if extended:
        builder = builder.add_extension(x509.ExtendedKeyUsage(extended), critical=False)
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in spec.get("dnsNames") or ()]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in spec.get("ipAddresses") or ()]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer[1] if signer else key, hashes.SHA256())


def _ready(status: bool, reason: str, message: str) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "type": "Ready",
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }


def _is_ready(obj: Mapping[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class CertManager:
    """The Issuer and Certificate controllers of one API server."""

    def __init__(self, api_url: str) -> None:
        self._api = api_client.ApiServer(api_url)
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self._api.open()
        self._tasks = [asyncio.create_task(self._loop(), name="cert-manager")]

    async def close(self) -> None:
        await api_client.cancel_tasks(self._tasks)
        self._tasks = []
        await self._api.close()

    async def _loop(self) -> None:
        while True:
            try:
                await self.reconcile()
            except (api_client.ApiStatusError, OSError) as exc:
                log.debug("cert-manager round failed: %s", exc)
            await asyncio.sleep(ROUND_S)

    async def _items(self, path: str) -> list[dict[str, Any]]:
        listing = await self._api.call("GET", path)
        return list(listing.get("items") or ())

    async def reconcile(self) -> None:
        """One round: Issuers, then the Certificates of Ready Issuers."""
        for each in await self._items(f"{GROUP}/issuers"):
            await self._issuer(each)
        issuers = {
            (i["metadata"]["namespace"], i["metadata"]["name"]): i
            for i in await self._items(f"{GROUP}/issuers")
        }
        for cert in await self._items(f"{GROUP}/certificates"):
            ref = cert["spec"].get("issuerRef") or {}
            issuer = issuers.get((cert["metadata"]["namespace"], ref.get("name", "")))
            if issuer is not None and ref.get("kind", "Issuer") == "Issuer" and _is_ready(issuer):
                await self._certificate(cert, issuer)

    async def _secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        found = await self._api.get(f"{CORE}/namespaces/{namespace}/secrets/{name}")
        if found is None:
            return None
        return {k: base64.b64decode(v) for k, v in (found.get("data") or {}).items()}

    async def _issuer(self, issuer: Mapping[str, Any]) -> None:
        meta, spec = issuer["metadata"], issuer.get("spec") or {}
        if "selfSigned" in spec:
            condition = _ready(True, "IsReady", "")
        elif "ca" in spec:
            data = await self._secret(meta["namespace"], spec["ca"].get("secretName", ""))
            if data and {"tls.crt", "tls.key"} <= data.keys():
                condition = _ready(True, "KeyPairVerified", "Signing CA verified")
            else:
                condition = _ready(False, "ErrGetKeyPair", "Error getting keypair for CA issuer")
        else:
            condition = _ready(False, "NotSupported", "issuer type not emulated")
        await self._set_status("issuers", issuer, {"conditions": [condition]})

    async def _set_status(
        self, resource: str, obj: Mapping[str, Any], status: dict[str, Any]
    ) -> None:
        old = obj.get("status") or {}
        same = [
            (c.get("type"), c.get("status"), c.get("reason")) for c in old.get("conditions") or ()
        ] == [(c["type"], c["status"], c["reason"]) for c in status["conditions"]]
        if same and all(old.get(k) == v for k, v in status.items() if k != "conditions"):
            return
        meta = obj["metadata"]
        await self._api.call(
            "PATCH",
            f"{GROUP}/namespaces/{meta['namespace']}/{resource}/{meta['name']}/status",
            body={"status": status},
            content_type=MERGE,
        )

    async def _certificate(self, cert: Mapping[str, Any], issuer: Mapping[str, Any]) -> None:
        meta, spec = cert["metadata"], cert["spec"]
        namespace, name = meta["namespace"], spec["secretName"]
        wanted = json.dumps(spec, sort_keys=True)
        path = f"{CORE}/namespaces/{namespace}/secrets/{name}"
        existing = await self._api.get(path)
        if existing is not None:
            annotations = existing["metadata"].get("annotations") or {}
            if annotations.get(SPEC_ANNOTATION) == wanted and _is_ready(cert):
                return
        signer = None
        if "ca" in issuer["spec"]:
            data = await self._secret(namespace, issuer["spec"]["ca"]["secretName"])
            assert data is not None
            signer = (
                x509.load_pem_x509_certificate(data["tls.crt"]),
                serialization.load_pem_private_key(data["tls.key"], None),
            )
        key = _key(spec)
        issued = _sign(spec, key, signer)
        pem = issued.public_bytes(serialization.Encoding.PEM)
        ca = signer[0].public_bytes(serialization.Encoding.PEM) if signer else pem
        secret: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": {
                    "cert-manager.io/certificate-name": meta["name"],
                    "cert-manager.io/issuer-name": issuer["metadata"]["name"],
                    SPEC_ANNOTATION: wanted,
                },
            },
            "data": {
                "tls.crt": base64.b64encode(pem).decode(),
                "tls.key": base64.b64encode(_key_pem(key, spec)).decode(),
                "ca.crt": base64.b64encode(ca).decode(),
            },
        }
        if existing is None:
            await self._api.call("POST", f"{CORE}/namespaces/{namespace}/secrets", body=secret)
        else:
            secret["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            await self._api.call("PUT", path, body=secret)
        ends = issued.not_valid_after_utc
        renew = ends - _duration(spec.get("renewBefore"), (ends - issued.not_valid_before_utc) / 3)
        stamp = "%Y-%m-%dT%H:%M:%SZ"
        await self._set_status(
            "certificates",
            cert,
            {
                "conditions": [
                    _ready(True, "Ready", "Certificate is up to date and has not expired")
                ],
                "notBefore": issued.not_valid_before_utc.strftime(stamp),
                "notAfter": ends.strftime(stamp),
                "renewalTime": renew.strftime(stamp),
            },
        )


@contextlib.asynccontextmanager
async def running(api_url: str) -> AsyncIterator[CertManager]:
    """cert-manager's controllers for the API server at `api_url`, stopped on exit."""
    manager = CertManager(api_url)
    await manager.start()
    try:
        yield manager
    finally:
        await manager.close()
