"""A real S3 endpoint (moto's threaded server) on a free loopback port for aioboto3.

One server per test session; every test that asks for `s3_bucket` gets a reset server holding
one fresh, empty bucket, and AWS credentials in its environment that point nowhere real.
"""

from __future__ import annotations

import dataclasses
import urllib.request
from collections.abc import Iterator

import aioboto3
import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.support import ports

REGION = "us-east-1"
ACCESS_KEY = "testing"
SECRET_KEY = "testing"


@dataclasses.dataclass(frozen=True)
class S3Bucket:
    """A fresh bucket on the moto server: its endpoint URL and name."""

    endpoint_url: str
    name: str

    def session(self) -> aioboto3.Session:
        """An aioboto3 session with the test credentials."""
        return aioboto3.Session(
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def keys(self) -> list[str]:
        """Every object key in the bucket plus every multipart upload still open, as text."""
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )
        listed = client.list_objects_v2(Bucket=self.name).get("Contents", [])
        uploads = client.list_multipart_uploads(Bucket=self.name).get("Uploads", [])
        return [item["Key"] for item in listed] + [f"upload:{item['Key']}" for item in uploads]


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """Start moto's S3 server on 127.0.0.1 (a port the kernel picks, so no race); yields its URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        ports.wait_port(port)
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A reset moto server holding one empty bucket; test AWS credentials in the environment."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    reset = urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(reset, timeout=10) as response:
        assert response.status == 200
    bucket = S3Bucket(moto_endpoint, "agentihooks-checkpoints")
    boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    ).create_bucket(Bucket=bucket.name)
    return bucket
