"""The verdict of `agentihooks-restorer qualify` (`qualifying`), as printed to an operator.

One line, or one JSON object for a script: qualified or not; when qualified outside the spec's
defaults, the `AGENTIHOOKS_QUALIFIED_VERSIONS` item that names the version; when not, the step
that failed (`version`, `session`, `capture`, `restore`, `resume`, `history`) and why. It never
holds anything of the conversation.
"""

from __future__ import annotations

import dataclasses

from services.common import qualified_versions
from services.restorer.harness import versions


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether `harness` at `version` resumes natively; `step` and `reason` say why not."""

    harness: str
    version: str
    qualified: bool
    step: str = ""
    reason: str = ""
    by_default: bool = False
    """Qualified already without the setting (the spec's Claude Code 2.1, Codex 0.162)."""

    def setting(self) -> str:
        """The `AGENTIHOOKS_QUALIFIED_VERSIONS` item that names this version."""
        return f"{self.harness.replace('_', '-')}={numeric(self.version)}"

    def line(self) -> str:
        label = f"{self.harness.replace('_', '-')} {self.version or '(version unknown)'}"
        if self.qualified and self.by_default:
            return f"qualified: {label} resumes a restored session natively (qualified by default)"
        if self.qualified:
            return (
                f"qualified: {label} resumes a restored session natively; to use it, set"
                f" {qualified_versions.VARIABLE}={self.setting()} on the worker and its sidecar"
            )
        return f"not qualified: {label}: {self.step}: {self.reason}"

    def as_json(self) -> dict[str, object]:
        found: dict[str, object] = {
            "harness": self.harness,
            "version": self.version,
            "qualified": self.qualified,
        }
        if self.qualified:
            found["by_default"] = self.by_default
            if not self.by_default:
                found["setting"] = f"{qualified_versions.VARIABLE}={self.setting()}"
        else:
            found.update(step=self.step, reason=self.reason)
        return found


def numeric(version: str) -> str:
    """The dotted numbers a version starts with, as the setting names it (`0.171.0-rc.1`:
    `0.171.0`)."""
    return ".".join(str(part) for part in versions.version_components(version))
