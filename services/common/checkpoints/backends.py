"""Choosing the checkpoint backend from configuration: the bucket wins over the root folder."""

from __future__ import annotations

import pathlib
import re
import urllib.parse

from services.common.checkpoints import local, storing

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def open_backend(
    root: str | None, bucket: str | None, endpoint_url: str | None
) -> storing.Backend | None:
    """The configured checkpoint backend, or None when no store is configured.

    Args:
        root: `AGENTIHOOKS_CHECKPOINT_ROOT`, an absolute folder path.
        bucket: `AGENTIHOOKS_CHECKPOINT_BUCKET`; takes precedence over `root`.
        endpoint_url: `AGENTIHOOKS_S3_ENDPOINT_URL` of an S3-compatible server, used with the
            bucket only.

    An empty string counts as unset. With neither set there is no store: "with no checkpoint
    store configured, the controller lists no checkpoints".

    Raises:
        ValueError: a relative root, a malformed bucket name or endpoint URL; the message
            names the variable.
    """
    if bucket:
        if _BUCKET.fullmatch(bucket) is None:
            raise ValueError("AGENTIHOOKS_CHECKPOINT_BUCKET is not a valid bucket name")
        if endpoint_url:
            parsed = urllib.parse.urlsplit(endpoint_url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ValueError("AGENTIHOOKS_S3_ENDPOINT_URL must be an http(s) URL")
        # Imported here: aioboto3 costs about half a second of start-up, paid only with a bucket.
        from services.common.checkpoints import s3

        return s3.S3Backend(bucket, endpoint_url or None)
    if root:
        return local.LocalFolderBackend(pathlib.Path(root))
    return None
