"""What a capture answers: the checkpoint it wrote (`Captured`), or why it wrote none
(`CaptureError`). The capture itself is `capturing.Capturer`."""

from __future__ import annotations

import dataclasses


class CaptureError(Exception):
    """A capture that produced no checkpoint; the message is a reason code or `source: …`."""


@dataclasses.dataclass(frozen=True)
class Captured:
    """One capture's checkpoint: `written` is False when nothing had changed since the last.

    `native_session_id` is the session the attempt holds, reported as such even when the
    checkpoint is context only (its harness version is not qualified for native resume).
    """

    checkpoint_id: str
    continuity: str
    native_session_id: str | None
    watermark: int
    written: bool
