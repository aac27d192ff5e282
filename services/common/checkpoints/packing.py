"""Packed manifests: a checkpoint's manifest stored deflated against a fixed dictionary.

Continuous capture writes one record about every second, each naming a few new segments, and
records are never deleted, so the records' bytes are what a long session stores beside its own
bytes. As JSON a version 3 record is about 2.6 KB, more than half of it field names, structure
and hashes repeated inside the record: for a capture that appends one 4.6 KB session record, the
records alone would add 0.6x the session to the store. Deflated against a dictionary that
already holds a record's structure, the same record is about 730 bytes, mostly the hashes that
are new in it.

A packed manifest's bytes:

    b"AHCM" | format (1 byte, 1) | raw deflate (RFC 1951) of the manifest's canonical JSON,
                                   with `DICTIONARY` as its preset dictionary

The manifest inside is exactly what an unpacked one holds, `{"manifest_sha256", "record"}`, and
its hash is still taken over the record's canonical JSON, so packing changes no hash and no
verdict. A manifest stored as plain JSON (every one written before packing, or by hand) reads as
before. The dictionary belongs to format 1 for ever (a test pins its hash): a new dictionary is a
new format byte, and readers keep every old one.

Unpacking is bounded: output over `limit` bytes, a truncated stream, bytes after its end or an
unknown format is refused (`ValueError`), so a few hostile bytes cannot expand into gigabytes.

Pure: no I/O, except `python3 -m services.common.checkpoints.packing < MANIFEST`, which prints a
stored manifest (packed or not) as JSON for an operator.
"""

from __future__ import annotations

import sys
import zlib
from typing import Final

MAGIC: Final = b"AHCM"
FORMAT: Final = 1
LEVEL: Final = 9
_WBITS: Final = -15
"""Raw deflate: no zlib header or checksum (the manifest carries its own SHA-256)."""

DICTIONARY: Final = (
    b'{"manifest_sha256":"","record":{"authority":{"execution_generation":1,'
    b'"execution_id":"e-","seat":"","swarm":"","task_generation":1,'
    b'"task_id":"t-"},"checkpoint_id":"ckpt-e-","committed":true,"compatibility_key":"",'
    b'"continuity":"context_only","created_at":"2026-01-01T00:00:00Z",'
    b'"inventory":[{"role":"transcript","sha256":"","size":0},{"role":"native_session",'
    b'"sha256":"","size":0},{"role":"source_bundle","sha256":"","size":0},'
    b'{"role":"source_patch","sha256":"","size":0},{"role":"untracked",'
    b'"sha256":"","size":0}],"native":{"files":[{"index":[{"bytes":0,'
    b'"level":2,"sha256":"","size":102},{"bytes":0,"level":1,"sha256":"",'
    b'"size":326}],"path":".codex/sessions/","segments":[{"sha256":"",'
    b'"size":0}],"sha256":"","size":0}],"harness":"codex","harness_version":"",'
    b'"native_session_id":""},"project":"","schema_version":3,"sequence":1,'
    b'"source":{"base_commit":"","branch":"main","bundles":[{"sha256":"",'
    b'"size":0,"tip":""}],"head_commit":"","patch":{"sha256":"","size":0},'
    b'"repository":"https://","untracked":[{"mode":420,"path":"","sha256":"",'
    b'"size":0}]},"transcript":{"same_as":".codex/sessions/","sha256":"",'
    b'"size":0,"watermark":0}}}{"manifest_sha256":"","record":{"authority":{"execution_generat'
    b'ion":1,"execution_id":"e-","seat":"","swarm":"","task_generation":1,'
    b'"task_id":"t-"},"checkpoint_id":"ckpt-e-","committed":true,"compatibility_key":"",'
    b'"continuity":"native","created_at":"2026-01-01T00:00:00Z","inventory":[{"role":"transcri'
    b'pt","sha256":"","size":0},{"role":"native_session","sha256":"",'
    b'"size":0},{"role":"source_bundle","sha256":"","size":0},{"role":"source_patch",'
    b'"sha256":"","size":0},{"role":"untracked","sha256":"","size":0}],'
    b'"native":{"files":[{"index":[{"bytes":0,"level":2,"sha256":"",'
    b'"size":102},{"bytes":0,"level":1,"sha256":"","size":326}],"path":".claude/projects/",'
    b'"segments":[{"sha256":"","size":0}],"sha256":"","size":0}],"harness":"claude_code",'
    b'"harness_version":"","native_session_id":""},"project":"","schema_version":3,'
    b'"sequence":1,"source":{"base_commit":"","branch":"main","bundles":[{"sha256":"",'
    b'"size":0,"tip":""}],"head_commit":"","patch":null,"repository":"https://",'
    b'"untracked":[{"mode":420,"path":"","sha256":"","size":0}]},"transcript":{"same_as":".cla'
    b'ude/projects/","sha256":"","size":0,"watermark":0}}}'
)
"""Format 1's preset dictionary: two version 3 manifests (a Codex one, then a Claude Code one),
their hashes left empty, so every field name, most structure and the common values are already
there to refer back to. Never change it: manifests packed with it would no longer unpack."""


def is_packed(data: bytes) -> bool:
    """Whether `data` is a packed manifest (a plain JSON one starts with `{`)."""
    return data.startswith(MAGIC)


def pack(text: bytes) -> bytes:
    """The packed form of a manifest's canonical JSON bytes."""
    packer = zlib.compressobj(LEVEL, zlib.DEFLATED, _WBITS, 9, zlib.Z_DEFAULT_STRATEGY, DICTIONARY)
    return MAGIC + bytes([FORMAT]) + packer.compress(text) + packer.flush()


def unpack(data: bytes, limit: int) -> bytes:
    """The manifest's JSON bytes from its packed form.

    Raises:
        ValueError: not a packed manifest of a known format, a damaged or truncated stream,
            bytes after its end, or more than `limit` bytes once unpacked.
    """
    if not is_packed(data) or len(data) <= len(MAGIC):
        raise ValueError("not a packed manifest")
    if data[len(MAGIC)] != FORMAT:
        raise ValueError("a packed manifest of an unknown format")
    unpacker = zlib.decompressobj(_WBITS, zdict=DICTIONARY)
    try:
        text = unpacker.decompress(data[len(MAGIC) + 1 :], limit + 1)
    except zlib.error:
        raise ValueError("a packed manifest that does not inflate") from None
    if len(text) > limit or unpacker.unconsumed_tail:
        raise ValueError("a packed manifest over the size limit once unpacked")
    if not unpacker.eof or unpacker.unused_data:
        raise ValueError("a packed manifest truncated or followed by other bytes")
    return text


def main() -> int:
    """Print the manifest on standard input as JSON (packed or not)."""
    data = sys.stdin.buffer.read()
    try:
        text = unpack(data, 64 * 1024 * 1024) if is_packed(data) else data
    except ValueError as error:
        print(f"packing: {error}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(text + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
