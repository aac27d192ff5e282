"""A directive whose fields disagree is refused as malformed."""

from __future__ import annotations

import pytest

from services.common import directives

C = directives.Continuity


@pytest.mark.parametrize(
    ("directive", "why"),
    [
        (directives.Directive("ckpt-7", C.FRESH, None, None), "fresh directive names a checkpoint"),
        (directives.Directive(None, C.FRESH, "s", None), "fresh directive names a session"),
        (directives.Directive(None, C.FRESH, None, 3), "fresh directive names a watermark"),
        (directives.Directive("ckpt-7", C.NATIVE, None, 3), "native directive names no session"),
        (directives.Directive(None, C.NATIVE, "s", 3), "native directive names no checkpoint"),
        (
            directives.Directive("c", C.RECONSTRUCTED, "s", 3),
            "reconstructed directive names a session",
        ),
        (directives.Directive("c", C.RECONSTRUCTED, None, None), "has no watermark"),
    ],
)
def test_disagreeing_fields_are_refused(directive: directives.Directive, why: str) -> None:
    """Spec: a fresh directive naming a checkpoint (and its kin) is refused as malformed."""
    with pytest.raises(directives.DirectiveError, match=why):
        directives.checked(directive)


def test_agreeing_directives_pass_and_round_trip() -> None:
    """The four fields: checkpoint_id, recovery, session_id (native only) and watermark."""
    for d in (
        directives.FRESH,
        directives.Directive("ckpt-7", C.NATIVE, "sess", 412),
        directives.Directive("ckpt-7", C.RECONSTRUCTED, None, 412),
    ):
        assert directives.from_json(d.to_json()) == d


def test_unknown_recovery_kind_is_refused() -> None:
    """Recovery is native, reconstructed or fresh; anything else is malformed."""
    with pytest.raises(directives.DirectiveError, match="unknown recovery kind"):
        directives.from_json({"recovery": "partial"})
    with pytest.raises(directives.DirectiveError):
        directives.from_json(
            {"recovery": "native", "checkpoint_id": 5, "session_id": "s", "watermark": 1}
        )
