"""Transcripts: records split on newlines only, the archive and its watermark, continuation.txt."""

from __future__ import annotations

import json
import os
import pathlib
import stat
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.restorer import transcripts

SEPARATORS = "\u2028\u2029\u0085\r\x0b\x0c\x1c\x1d\x1e"


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """A umask that would leave a file group- and world-readable unless the writer sets 0600."""
    old = os.umask(0)
    yield
    os.umask(old)


def _record(text: str) -> str:
    return json.dumps({"type": "user", "message": text}, ensure_ascii=False)


def test_unicode_separators_stay_inside_their_record() -> None:
    """Spec: records split on newlines only, so a raw U+2028 / U+2029 restores."""
    records = [_record("line\u2028separator"), _record("paragraph\u2029separator"), _record("x")]
    data = ("\n".join(records) + "\n").encode("utf-8")
    assert len(data.decode().splitlines()) > 3  # what str.splitlines would have done
    assert transcripts.split_records(data) == records
    assert transcripts.watermark(data) == 3


def test_every_other_line_boundary_stays_inside_a_record() -> None:
    """Only `\\n` separates records: U+0085, `\\r`, `\\x0b`, `\\x0c`, `\\x1c`-`\\x1e` do not."""
    record = _record(f"all of them: {SEPARATORS}")
    assert transcripts.split_records(f"{record}\n{record}") == [record, record]


def test_archive_round_trip_and_watermark() -> None:
    """The archive holds the first `watermark` records; reading it back gives them unchanged."""
    records = [_record(f"turn {n}\u2028with a separator") for n in range(5)]
    archived = transcripts.archive(records, 3)
    assert archived.endswith(b"\n")
    assert transcripts.split_records(archived) == records[:3]
    assert transcripts.watermark(archived) == 3
    assert transcripts.watermark(transcripts.archive(records)) == 5
    assert transcripts.archive(records, 0) == b""


@given(st.lists(st.text(st.characters(codec="utf-8", blacklist_characters="\n"), min_size=1)))
def test_any_records_without_newlines_round_trip(records: list[str]) -> None:
    """For any records with no `\\n`, split(archive(records)) == records."""
    assert transcripts.split_records(transcripts.archive(records)) == records


@pytest.mark.parametrize(
    ("records", "upto"),
    [(["a"], 2), (["a"], -1), (["a\nb"], None), ([""], None), (["\ud800"], None)],
)
def test_archive_refuses_what_would_not_read_back(records: list[str], upto: int | None) -> None:
    """A watermark outside the transcript, or a record that would split differently, is refused."""
    with pytest.raises(transcripts.TranscriptError):
        transcripts.archive(records, upto)


def test_continuation_starts_with_the_exact_line() -> None:
    """Spec: the opening prompt comes after the line `Continue from this recorded conversation.
    Native resume was unavailable.`"""
    archived = transcripts.archive([_record("hello\u2028there"), _record("bye")])
    text = transcripts.continuation_text(archived)
    first, rest = text.split("\n", 1)
    assert first == "Continue from this recorded conversation. Native resume was unavailable."
    assert rest.encode("utf-8") == archived


@pytest.mark.parametrize("bad", [b"\xff\xfesecret words", b'{"t": "secret\x00words"}\n'])
def test_continuation_refuses_unusable_transcripts_without_quoting_them(bad: bytes) -> None:
    """A transcript that is not UTF-8 or holds a NUL is refused; the message quotes nothing."""
    with pytest.raises(transcripts.TranscriptError) as raised:
        transcripts.continuation_text(bad)
    assert "secret" not in str(raised.value)
    assert "\\x" not in str(raised.value)


def test_continuation_file_is_0600_whatever_the_umask(
    tmp_path: pathlib.Path, loose_umask: None
) -> None:
    """Spec: continuation.txt in the attempt folder is readable only by the worker user."""
    text = transcripts.continuation_text(transcripts.archive([_record("a\u2029b")]))
    written = transcripts.write_continuation(tmp_path, text)
    assert written == tmp_path / "continuation.txt"
    info = written.lstat()
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert written.read_text(encoding="utf-8") == text
    assert written.read_text(encoding="utf-8").split("\n", 1)[0] == transcripts.OPENING_LINE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["continuation.txt"]


def test_continuation_file_is_owned_by_the_worker_user(tmp_path: pathlib.Path) -> None:
    """Running as root, the file belongs to the worker user (uid/gid given); otherwise the
    writer already is the worker user and no chown is attempted."""
    written = transcripts.write_continuation(tmp_path, "Continue…", uid=4242, gid=4343)
    owner = (written.stat().st_uid, written.stat().st_gid)
    assert owner == ((4242, 4343) if os.geteuid() == 0 else (os.geteuid(), os.getegid()))
    assert stat.S_IMODE(written.stat().st_mode) == 0o600


def test_a_planted_symlink_is_replaced_not_followed(tmp_path: pathlib.Path) -> None:
    """A symlink at continuation.txt is never written through: the target stays as it was."""
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    (attempt / "continuation.txt").symlink_to(outside)
    written = transcripts.write_continuation(attempt, "Continue…")
    assert outside.read_text() == "keep me"
    assert not written.is_symlink()
    assert written.read_text() == "Continue…"


def test_a_retried_write_replaces_the_earlier_file(tmp_path: pathlib.Path) -> None:
    """A restore that runs again replaces continuation.txt whole."""
    transcripts.write_continuation(tmp_path, "first")
    transcripts.write_continuation(tmp_path, "second")
    assert (tmp_path / "continuation.txt").read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["continuation.txt"]


def test_an_attempt_folder_that_is_a_symlink_is_refused(tmp_path: pathlib.Path) -> None:
    """The attempt folder itself is opened without following a symlink."""
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "attempt"
    link.symlink_to(real)
    with pytest.raises(OSError):
        transcripts.write_continuation(link, "Continue…")
    assert list(real.iterdir()) == []
