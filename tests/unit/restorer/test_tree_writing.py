"""Writing many files (a worktree's untracked files): one writer, the same checks for each file.

`paths.TreeWriter` keeps the folders it opened, and `staged_files.Staging` writes bytes ahead to
be moved into place later; neither may relax a check `write_file_no_follow` makes on a record's
path: no symlink leading out of the root, none followed at the last component, no hard link
written into, exact modes, nothing left behind.
"""

from __future__ import annotations

import os
import pathlib
import stat

import pytest

from services.restorer import paths, staged_files
from tests.support import trees
from tests.unit.restorer import test_paths

HOSTILE = test_paths.HOSTILE


_tree = trees.tree


def test_many_files_land_with_their_modes_and_nothing_else(tmp_path: pathlib.Path) -> None:
    """Files in many folders (more than the writer keeps open) all land, modes exact, and no
    temporary name is left."""
    files = {
        f"d{n % 50:02d}/sub/f{n:04d}": (f"{n}".encode(), 0o644 | (n % 2) * 0o111)
        for n in range(300)
    }
    with paths.TreeWriter(tmp_path) as writer:
        for relative, (data, mode) in files.items():
            assert writer.write(relative, data, mode) == tmp_path.resolve() / relative
    written = {
        p.relative_to(tmp_path).as_posix(): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in tmp_path.rglob("*")
        if p.is_file()
    }
    assert written == files


@pytest.mark.parametrize("relative", HOSTILE)
def test_hostile_paths_are_refused_by_write_and_place(
    tmp_path: pathlib.Path, relative: str
) -> None:
    """Every hostile form is refused whether the bytes are written or moved in from staging."""
    root, aside = tmp_path / "root", tmp_path / "aside"
    root.mkdir()
    aside.mkdir()
    staging = staged_files.Staging(aside)
    staged = staging.add(b"x", 0o644)
    with paths.TreeWriter(root) as writer:
        with pytest.raises(paths.UnsafePath):
            writer.write(relative, b"x", 0o644)
        with pytest.raises(paths.UnsafePath):
            writer.place(relative, staging, staged)
    staging.close()
    assert _tree(root) == {}
    assert _tree(aside) == {}


def test_symlinks_leading_out_are_refused_by_place(tmp_path: pathlib.Path) -> None:
    """A symlink on the way (or at the last component) that leads out of the root refuses the
    move exactly as it refuses a write; the staged bytes never reach the outside."""
    root, outside, aside = tmp_path / "root", tmp_path / "outside", tmp_path / "aside"
    (root / "deep").mkdir(parents=True)
    outside.mkdir()
    aside.mkdir()
    (root / "link").symlink_to(outside)
    (root / "deep" / "up").symlink_to("../../outside")
    (root / "file-link").symlink_to(outside / "target.txt")
    staging = staged_files.Staging(aside)
    with paths.TreeWriter(root) as writer:
        for relative in ["link/x", "link", "deep/up/x", "file-link"]:
            staged = staging.add(b"escaped", 0o644)
            with pytest.raises(paths.UnsafePath):
                writer.place(relative, staging, staged)
    staging.close()
    assert list(outside.iterdir()) == []


def test_place_replaces_a_final_symlink_or_hard_link_and_keeps_the_mode(
    tmp_path: pathlib.Path,
) -> None:
    """A moved-in file replaces a symlink inside the root (never written through) and a hard
    link (its other name keeps its bytes), with the staged file's exact mode."""
    root, aside = tmp_path / "root", tmp_path / "aside"
    root.mkdir()
    aside.mkdir()
    (root / "target.txt").write_text("keep")
    (root / "name").symlink_to("target.txt")
    (tmp_path / "other.txt").write_text("keep too")
    os.link(tmp_path / "other.txt", root / "linked")
    staging = staged_files.Staging(aside)
    with paths.TreeWriter(root) as writer:
        writer.place("name", staging, staging.add(b"new", 0o755))
        writer.place("linked", staging, staging.add(b"new too", 0o600))
    staging.close()
    assert (root / "target.txt").read_text() == "keep"
    assert not (root / "name").is_symlink() and (root / "name").read_bytes() == b"new"
    assert stat.S_IMODE((root / "name").stat().st_mode) == 0o755
    assert (tmp_path / "other.txt").read_text() == "keep too"
    assert (root / "linked").read_bytes() == b"new too"
    assert aside.exists() and list(aside.iterdir()) == []


def test_a_replaced_symlink_is_not_followed_by_a_kept_folder(tmp_path: pathlib.Path) -> None:
    """A folder reached through a symlink (inside the root) is forgotten once that symlink is
    replaced by a file: a later path through the same name is checked again and refused, as
    `write_file_no_follow` would refuse it, instead of landing through a stale descriptor."""
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to("real")
    with paths.TreeWriter(tmp_path) as writer:
        writer.write("alias/a", b"through the link", 0o644)
        writer.write("alias", b"now a file", 0o644)
        with pytest.raises(paths.UnsafePath):
            writer.write("alias/b", b"x", 0o644)
    assert _tree(tmp_path) == {
        "alias": b"now a file",
        "real": "dir",
        "real/a": b"through the link",
    }


def test_safe_join_all_agrees_with_safe_join(tmp_path: pathlib.Path) -> None:
    """The batch check resolves each folder once, with the single check's answer for each."""
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to("real")
    (tmp_path / "out").symlink_to("/")
    good = ["a", "alias/x", "real/y/z", "alias", "new/deep/file"]
    assert paths.safe_join_all(tmp_path, good) == [paths.safe_join(tmp_path, g) for g in good]
    for bad in ["out/etc/passwd", "out", "a/../b"]:
        with pytest.raises(paths.UnsafePath):
            paths.safe_join_all(tmp_path, [*good, bad])


def test_closing_a_staging_folder_removes_what_was_not_placed(tmp_path: pathlib.Path) -> None:
    """Staged files nobody placed go with their private folder (mode 0700, a fresh name)."""
    staging = staged_files.Staging(tmp_path)
    staging.add(b"left behind", 0o644)
    (folder,) = tmp_path.iterdir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    staging.close()
    staging.close()  # a second close changes nothing
    assert list(tmp_path.iterdir()) == []
