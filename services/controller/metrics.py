"""Prometheus metrics of the controller.

Restore outcomes come from Redis (one pipeline for every swarm before a scrape), so every
replica reports the same figures and a restart loses none; while Redis does not answer the last
figures read are served. Fences, decisions and pass durations are counted by the process that
did them.

The families labelled by swarm are kept and written out here (`SwarmCounter`,
`SwarmHistogram`, `_Outcomes`) rather than by prometheus_client's generic walk, which took a
second for 5,000 swarms: the text is the same exposition format (0.0.4), without the optional
`_created` series. The process-wide gauges stay prometheus_client's.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.utils import floatToGoString

from services.common import redis_link
from services.controller import recovering
from services.controller.state import leasing, reading

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _label(value: str) -> str:
    """A label value as the exposition format quotes it."""
    if "\\" in value or '"' in value or "\n" in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _head(name: str, documentation: str, kind: str) -> str:
    text = documentation.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {text}\n# TYPE {name} {kind}\n"


class SwarmCounter:
    """A counter labelled by swarm (`NAME_total{swarm}`)."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name = f"{name}_total"
        self.documentation = documentation
        self.values: dict[str, float] = {}

    def inc(self, swarm: str, amount: float = 1.0) -> None:
        self.values[swarm] = self.values.get(swarm, 0.0) + amount

    def lines(self) -> Iterator[str]:
        yield _head(self.name, self.documentation, "counter")
        for swarm, value in self.values.items():
            yield f'{self.name}{{swarm="{_label(swarm)}"}} {floatToGoString(value)}\n'


class SwarmHistogram:
    """A histogram labelled by swarm (`NAME_bucket{le,swarm}`, `_count`, `_sum`)."""

    def __init__(self, name: str, documentation: str, buckets: Iterable[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = tuple(sorted(buckets))
        self._les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}

    def observe(self, swarm: str, value: float) -> None:
        counts = self.counts.get(swarm)
        if counts is None:
            counts = self.counts[swarm] = [0] * (len(self.bounds) + 1)
            self.sums[swarm] = 0.0
        counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sums[swarm] += value

    def count(self, swarm: str) -> int:
        """How many values were observed for `swarm`."""
        return sum(self.counts.get(swarm, ()))

    def lines(self) -> Iterator[str]:
        yield _head(self.name, self.documentation, "histogram")
        name = self.name
        for swarm, counts in self.counts.items():
            label = _label(swarm)
            total = 0
            for le, count in zip(self._les, counts, strict=True):
                total += count
                yield f'{name}_bucket{{le="{le}",swarm="{label}"}} {total}.0\n'
            yield f'{name}_count{{swarm="{label}"}} {total}.0\n'
            yield f'{name}_sum{{swarm="{label}"}} {floatToGoString(self.sums[swarm])}\n'


class _Outcomes:
    """`agentihooks_restore_outcomes_total{swarm,type}`, `agentihooks_recovery_paused{swarm}`
    and `agentihooks_state_lost{swarm}`, from the last refresh."""

    def __init__(self) -> None:
        self.by_swarm: dict[str, Mapping[str, int]] = {}
        self.paused: dict[str, bool] = {}
        self.lost: dict[str, bool] = {}

    def lines(self) -> Iterator[str]:
        name = "agentihooks_restore_outcomes_total"
        yield _head(name, "Verified restore outcomes by continuity type", "counter")
        for swarm, counts in sorted(self.by_swarm.items()):
            label = _label(swarm)
            for kind in reading.OUTCOME_KINDS:
                value = floatToGoString(counts.get(kind, 0))
                yield f'{name}{{swarm="{label}",type="{kind}"}} {value}\n'
        yield from _flags(
            "agentihooks_recovery_paused",
            "1 while the swarm's recovery-paused key is set",
            self.paused,
        )
        yield from _flags(
            "agentihooks_state_lost",
            "1 while Redis has lost the swarm's recovery state (state_lost), on its lease holder",
            self.lost,
        )


def _flags(name: str, documentation: str, values: Mapping[str, bool]) -> Iterator[str]:
    yield _head(name, documentation, "gauge")
    for swarm, value in sorted(values.items()):
        yield f'{name}{{swarm="{_label(swarm)}"}} {"1.0" if value else "0.0"}\n'


class Metrics:
    """The controller's registry and its instruments."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._outcomes = _Outcomes()
        self.fences = SwarmCounter("agentihooks_fences", "Attempts fenced by this controller")
        self.decisions = SwarmCounter(
            "agentihooks_decisions", "Decisions accepted by this controller"
        )
        self.pending = SwarmCounter(
            "agentihooks_recovery_pending", "Fenced attempts moved to awaiting-decision"
        )
        self.launches = SwarmCounter(
            "agentihooks_replacements_launched", "Replacement attempts launched"
        )
        self.missing = SwarmCounter(
            "agentihooks_attempts_missing",
            "Passes that did not find an expected attempt in the runtime's list",
        )
        self.relaunched = SwarmCounter(
            "agentihooks_replacements_relaunched",
            "Refused replacements launched again after their worker was deleted",
        )
        self.watch_fences = SwarmCounter(
            "agentihooks_watch_fences",
            "Attempts fenced from a watch event, without listing the swarm",
        )
        self.pass_seconds = SwarmHistogram(
            "agentihooks_recovery_pass_seconds",
            "Duration of one listing recovery pass",
            PASS_BUCKETS,
        )
        self.redis_available = Gauge(
            "agentihooks_redis_available",
            "1 while Redis answers this controller, 0 while it does not",
            registry=self.registry,
        )
        self.kubernetes_available = Gauge(
            "agentihooks_kubernetes_available",
            "1 while the Kubernetes API answers this controller, 0 while it does not"
            " (1 on the local runtime)",
            registry=self.registry,
        )
        self.kubernetes_available.set(1.0)
        self.leases_held = Gauge(
            "agentihooks_leases_held",
            "Swarm leases this controller holds and renews",
            registry=self.registry,
        )
        self.renewal_slack = Gauge(
            "agentihooks_lease_renewal_slack_seconds",
            "Lease time the lowest lease had left when the latest renewal round confirmed it"
            " (near 0: renewals are starved and leases about to be lost)",
            registry=self.registry,
        )

    def observe(self, swarm: str, report: recovering.PassReport) -> None:
        """Count what one pass did, or work the seat queue did that no pass waited for (from
        the watch, or `queued`: a retry): only a listing pass's duration is observed."""
        if report.standby or report.lease_lost:
            return
        self.fences.inc(swarm, len(report.fenced))
        self.pending.inc(swarm, len(report.pending))
        self.decisions.inc(swarm, len(report.accepted))
        self.launches.inc(swarm, len(report.launched))
        self.missing.inc(swarm, len(report.missing))
        self.relaunched.inc(swarm, len(report.relaunched))
        if report.watched:
            self.watch_fences.inc(swarm, len(report.fenced))
        elif not report.queued:
            self.pass_seconds.observe(swarm, report.seconds)

    async def refresh(
        self, client: redis_link.Client, recoveries: dict[str, recovering.Recovery]
    ) -> None:
        """Read the Redis-backed figures of every swarm (before a scrape), in one pipeline."""
        swarms = sorted(recoveries)
        found = await reading.outcomes_and_pauses(client, swarms)
        for swarm in swarms:
            self._outcomes.lost[swarm] = recoveries[swarm].loss is not None
            self._outcomes.by_swarm[swarm], self._outcomes.paused[swarm] = found[swarm]

    def leases(self, renewals: leasing.Renewals) -> None:
        """The leases this process renews, and how much lease time its latest renewal round
        left the lowest of them."""
        self.leases_held.set(renewals.held)
        if renewals.slack_s is not None:
            self.renewal_slack.set(renewals.slack_s)

    def render(self) -> bytes:
        families: list[SwarmCounter | SwarmHistogram | _Outcomes] = [
            self._outcomes,
            self.fences,
            self.decisions,
            self.pending,
            self.launches,
            self.missing,
            self.relaunched,
            self.watch_fences,
            self.pass_seconds,
        ]
        text = "".join(line for family in families for line in family.lines())
        rendered: bytes = text.encode() + generate_latest(self.registry)
        return rendered
