"""Conversation transcripts: records, the archive, its watermark and the continuation prompt.

A transcript is JSON Lines: one conversation record per line. Records are split on `\\n` ONLY,
never with `str.splitlines`, which also breaks on U+2028, U+2029, U+0085, `\\r`, `\\x0b`, `\\x0c`
and `\\x1c`-`\\x1e`; a record holding a raw Unicode line or paragraph separator is one record
(spec: "A native resume reads conversation records split on newlines only").

The watermark is the number of records archived (the 1-based index of the last one).

Pure except `write_continuation`, the one writer, which never follows a symlink.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import secrets
from collections.abc import Sequence

OPENING_LINE = "Continue from this recorded conversation. Native resume was unavailable."
CONTINUATION_FILE = "continuation.txt"


class TranscriptError(ValueError):
    """A transcript that cannot be archived or passed on. The message holds no content."""


def split_records(data: bytes | str) -> list[str]:
    """Split a transcript into its conversation records, on `\\n` only.

    Empty lines are not records (a trailing newline ends the last record; it does not start a
    new one). A `\\r` before the `\\n` stays part of its record.

    Args:
        data: the transcript, as UTF-8 bytes or text.

    Returns:
        The records, without their newlines.

    Raises:
        TranscriptError: bytes that are not UTF-8.
    """
    text = _decode(data) if isinstance(data, bytes) else data
    return [record for record in text.split("\n") if record != ""]


def archive(records: Sequence[str], upto: int | None = None) -> bytes:
    """The archive of the first `upto` records: each record followed by `\\n`, UTF-8.

    Args:
        records: conversation records, as `split_records` returns them.
        upto: how many records to archive (the watermark); None archives all of them.

    Returns:
        The archived bytes; `watermark(archive(r, n)) == n`.

    Raises:
        TranscriptError: `upto` is negative or beyond the records, a record holds `\\n` or
            is empty (either would change the record count on reading back), or a record
            holds a lone surrogate.
    """
    count = len(records) if upto is None else upto
    if count < 0 or count > len(records):
        raise TranscriptError("watermark is outside the transcript")
    parts: list[str] = []
    for record in records[:count]:
        if record == "" or "\n" in record:
            raise TranscriptError("a record is empty or holds a newline")
        parts.append(record)
        parts.append("\n")
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: no UTF-8 archive can hold it (`from None`: the message quotes it).
        raise TranscriptError("a record is not valid Unicode text") from None


def watermark(data: bytes | str) -> int:
    """The number of records in an archived transcript (its watermark)."""
    return len(split_records(data))


def continuation_text(transcript: bytes) -> str:
    """The opening prompt of a reconstructed conversation.

    It starts with the exact line `Continue from this recorded conversation. Native resume was
    unavailable.` followed by the archived transcript.

    Raises:
        TranscriptError: the transcript is not UTF-8 or holds a NUL (no process argument or
            prompt can carry one).
    """
    text = _decode(transcript)
    if "\x00" in text:
        raise TranscriptError("transcript holds a NUL")
    return f"{OPENING_LINE}\n{text}"


def write_continuation(
    attempt_dir: str | os.PathLike[str],
    text: str,
    uid: int | None = None,
    gid: int | None = None,
) -> pathlib.Path:
    """Write `continuation.txt` in the attempt folder, readable only by the worker user.

    The file is created fresh (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600 set explicitly whatever the
    umask) under a temporary name, owned by the worker user when running as root, and renamed
    into place, so it appears whole, a planted symlink is replaced instead of followed, and a
    retried restore replaces an earlier file.

    Args:
        attempt_dir: the attempt folder (must exist and must not itself be a symlink).
        text: the continuation, as `continuation_text` returns it.
        uid: the worker user's uid; applied only when running as root.
        gid: the worker user's gid; applied only when running as root.

    Returns:
        The path of continuation.txt.

    Raises:
        OSError: the folder is missing, a symlink, or the write failed.
    """
    data = text.encode("utf-8")
    dir_fd = os.open(attempt_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        temp = f".{CONTINUATION_FILE}.{secrets.token_hex(6)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o600, dir_fd=dir_fd)
        try:
            try:
                os.fchmod(fd, 0o600)
                if os.geteuid() == 0 and (uid is not None or gid is not None):
                    os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, CONTINUATION_FILE, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)
    return pathlib.Path(attempt_dir) / CONTINUATION_FILE


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # `from None`: the codec's message quotes the offending bytes.
        raise TranscriptError("transcript is not UTF-8") from None
