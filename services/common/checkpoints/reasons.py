"""The verdict reasons of checkpoint validation, spelled exactly as the spec's refusal table."""

from __future__ import annotations

import enum


class Reason(enum.StrEnum):
    """Why `Validator.verify` refused a checkpoint (spec: "Refusals").

    The value is the spec's reason code; a verdict carries this code and nothing else.
    """

    MANIFEST_ABSENT = "manifest_absent"
    CORRUPT_MANIFEST = "corrupt_manifest"
    MISSING_OBJECT = "missing_object"
    CORRUPT_OBJECT = "corrupt_object"
    UNSUPPORTED_VERSION = "unsupported_version"
    INVALID_RECORD = "invalid_record"
    NOT_COMMITTED = "not_committed"
    MISSING_MATERIAL = "missing_material"
    MISSING_WATERMARK = "missing_watermark"
    INVENTORY_MISMATCH = "inventory_mismatch"
    SCOPE_MISMATCH = "scope_mismatch"
    IDENTITY_MISMATCH = "identity_mismatch"
