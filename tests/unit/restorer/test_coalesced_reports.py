"""Capture reports coalesced: "Reports to the controller are coalesced (at most about one a second
per attempt)" (issue 21), the final report always sent.
"""

from __future__ import annotations

import asyncio

from services.restorer import reporting


class Sent:
    def __init__(self) -> None:
        self.reports: list[tuple[int, bool]] = []
        self.arrived = asyncio.Event()

    async def send(self, watermark: int, final: bool) -> None:
        self.reports.append((watermark, final))
        self.arrived.set()


async def test_reports_within_a_period_make_one_and_the_final_is_sent_at_once() -> None:
    sent = Sent()
    reports = reporting.Coalesced(sent.send, period_s=3600.0)
    await reports.report(1)
    await reports.report(2)
    await reports.report(3, wait=False)
    assert sent.reports == [(1, False)]
    await reports.final(4)
    assert sent.reports == [(1, False), (4, True)]
    await reports.report(5)  # nothing after the final report
    await reports.aclose()
    assert sent.reports == [(1, False), (4, True)]
    assert reports.sent == 2


async def test_the_waiting_report_is_the_newest_and_is_sent_once_due() -> None:
    sent = Sent()
    reports = reporting.Coalesced(sent.send, period_s=0.05)
    await reports.report(1)
    sent.arrived.clear()
    for watermark in (2, 3, 4):
        await reports.report(watermark, wait=False)
    await asyncio.wait_for(sent.arrived.wait(), 60)
    assert sent.reports == [(1, False), (4, False)]
    await reports.aclose()
