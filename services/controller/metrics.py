"""Prometheus metrics of the controller.

Restore outcomes come from Redis (Recovery.restore_outcomes_by_type), so every replica reports
the same figures and a restart loses none; while Redis does not answer the last figures read are
served. Fences, decisions and pass durations are counted by
the process that did them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.common import redis_link
from services.controller import recovering
from services.controller.state import leasing, reading

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Outcomes(Collector):  # type: ignore[misc]
    """`agentihooks_restore_outcomes_total{swarm,type}` from the last refresh."""

    def __init__(self) -> None:
        self.by_swarm: dict[str, dict[str, int]] = {}
        self.paused: dict[str, bool] = {}
        self.lost: dict[str, bool] = {}

    def collect(self):  # type: ignore[no-untyped-def]
        outcomes = CounterMetricFamily(
            "agentihooks_restore_outcomes",
            "Verified restore outcomes by continuity type",
            labels=["swarm", "type"],
        )
        for swarm, counts in sorted(self.by_swarm.items()):
            for kind in ("native", "reconstructed", "fresh"):
                outcomes.add_metric([swarm, kind], counts.get(kind, 0))
        yield outcomes
        paused = GaugeMetricFamily(
            "agentihooks_recovery_paused",
            "1 while the swarm's recovery-paused key is set",
            labels=["swarm"],
        )
        for swarm, value in sorted(self.paused.items()):
            paused.add_metric([swarm], 1.0 if value else 0.0)
        yield paused
        lost = GaugeMetricFamily(
            "agentihooks_state_lost",
            "1 while Redis has lost the swarm's recovery state (state_lost), on its lease holder",
            labels=["swarm"],
        )
        for swarm, value in sorted(self.lost.items()):
            lost.add_metric([swarm], 1.0 if value else 0.0)
        yield lost


class Metrics:
    """The controller's registry and its instruments."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._outcomes = _Outcomes()
        self.registry.register(self._outcomes)
        self.fences = self._per_swarm("agentihooks_fences", "Attempts fenced by this controller")
        self.decisions = self._per_swarm(
            "agentihooks_decisions", "Decisions accepted by this controller"
        )
        self.pending = self._per_swarm(
            "agentihooks_recovery_pending", "Fenced attempts moved to awaiting-decision"
        )
        self.launches = self._per_swarm(
            "agentihooks_replacements_launched", "Replacement attempts launched"
        )
        self.missing = self._per_swarm(
            "agentihooks_attempts_missing",
            "Passes that did not find an expected attempt in the runtime's list",
        )
        self.relaunched = self._per_swarm(
            "agentihooks_replacements_relaunched",
            "Refused replacements launched again after their worker was deleted",
        )
        self.watch_fences = self._per_swarm(
            "agentihooks_watch_fences",
            "Attempts fenced from a watch event, without listing the swarm",
        )
        self.pass_seconds = Histogram(
            "agentihooks_recovery_pass_seconds",
            "Duration of one listing recovery pass",
            ["swarm"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
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

    def _per_swarm(self, name: str, documentation: str) -> Counter:
        return Counter(name, documentation, ["swarm"], registry=self.registry)

    def observe(self, swarm: str, report: recovering.PassReport) -> None:
        """Count what one pass did, or work the seat queue did that no pass waited for (from
        the watch, or `queued`: a retry): only a listing pass's duration is observed."""
        if report.standby or report.lease_lost:
            return
        self.fences.labels(swarm).inc(len(report.fenced))
        self.pending.labels(swarm).inc(len(report.pending))
        self.decisions.labels(swarm).inc(len(report.accepted))
        self.launches.labels(swarm).inc(len(report.launched))
        self.missing.labels(swarm).inc(len(report.missing))
        self.relaunched.labels(swarm).inc(len(report.relaunched))
        if report.watched:
            self.watch_fences.labels(swarm).inc(len(report.fenced))
        elif not report.queued:
            self.pass_seconds.labels(swarm).observe(report.seconds)

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
        rendered: bytes = generate_latest(self.registry)
        return rendered
