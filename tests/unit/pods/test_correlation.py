"""Events aggregated into series and rate-limited per Pod, as client-go's recorder does (issue
24, part 2): the correlator's plans, with the clock given."""

from __future__ import annotations

from services.controller.pods import correlation, event_bodies, notices


def body(
    pod: str = "pod-a", reason: notices.Reason = notices.Reason.FENCED, at: str = ""
) -> event_bodies.EventBody:
    notice = notices.Notice("example", "eng-1", "e-1", reason, "note", at=at)
    return event_bodies.event(
        notice, namespace="ns", instance="controller-1", regarding=event_bodies.PodRef(pod, "u")
    )


T1, T2, T3 = "2026-12-02T10:00:01Z", "2026-12-02T10:00:02Z", "2026-12-02T10:00:03Z"


def test_a_first_occurrence_creates_and_a_repeat_patches_the_series() -> None:
    """client-go: the first occurrence is created; a repeat of the same object and reason
    patches the Event's series with the count and the last time, never a second create."""
    c = correlation.Correlator()
    first = c.observe(body(at=T1), now=0.0)
    assert isinstance(first, correlation.Create) and "series" not in first.body
    assert c.observe(body(at=T2), now=0.1) is None  # in flight: merged into the next call
    c.sent(first)
    (patch,) = c.due(now=0.2)
    assert isinstance(patch, correlation.PatchSeries) and patch.name == first.name
    assert patch.series == {"count": 2, "lastObservedTime": "2026-12-02T10:00:02.000000Z"}
    c.sent(patch)
    again = c.observe(body(at=T3), now=0.3)
    assert isinstance(again, correlation.PatchSeries) and again.series["count"] == 3
    c.sent(again)
    assert c.due(now=1.0) == [] and c.waiting == 0


def test_another_reason_or_pod_is_another_event() -> None:
    c = correlation.Correlator()
    posts = [
        c.observe(body(), now=0.0),
        c.observe(body(reason=notices.Reason.AWAITING_DECISION), now=0.0),
        c.observe(body(pod="pod-b"), now=0.0),
    ]
    assert all(isinstance(p, correlation.Create) for p in posts)
    assert len({p.name for p in posts if p is not None}) == 3


def test_already_exists_adds_nothing_until_it_repeats_here() -> None:
    """A create answered AlreadyExists (another replica posted it) is done; a repeat seen here
    patches the existing Event's series instead of creating again."""
    c = correlation.Correlator()
    create = c.observe(body(), now=0.0)
    assert isinstance(create, correlation.Create)
    c.exists(create)
    assert c.due(now=1.0) == []
    patch = c.observe(body(), now=2.0)
    assert isinstance(patch, correlation.PatchSeries) and patch.series["count"] == 2


def test_a_patch_answered_not_found_creates_the_event_again_with_its_series() -> None:
    c = correlation.Correlator()
    create = c.observe(body(at=T1), now=0.0)
    assert create is not None
    c.sent(create)
    patch = c.observe(body(at=T2), now=0.1)
    assert isinstance(patch, correlation.PatchSeries)
    c.missing(patch)
    (recreate,) = c.due(now=0.2)
    assert isinstance(recreate, correlation.Create)
    assert recreate.body["series"] == {
        "count": 2,
        "lastObservedTime": "2026-12-02T10:00:02.000000Z",
    }


def test_each_pod_has_a_token_bucket_and_a_storm_is_merged() -> None:
    """client-go's spam filter: a Pod's Events make at most `burst` calls at once, then one
    per `refill_s`; occurrences held back meanwhile go out as one patch with the whole count.
    Another Pod's bucket is its own."""
    c = correlation.Correlator(burst=2, refill_s=10.0)
    calls = []
    for n in range(50):
        post = c.observe(body(reason=notices.Reason.RESTORE_REFUSED), now=0.0)
        if post is not None:
            calls.append(post)
            c.sent(post)
        for held in c.due(now=0.0):
            calls.append(held)
            c.sent(held)
        assert n < 1 or len(calls) <= 2
    assert len(calls) == 2 and c.limited > 0 and c.waiting == 1
    other = c.observe(body(pod="pod-b"), now=0.0)
    assert isinstance(other, correlation.Create)
    assert c.due(now=5.0) == []  # half a token
    (merged,) = c.due(now=10.0)
    assert isinstance(merged, correlation.PatchSeries) and merged.series["count"] == 50


def test_failures_are_tried_again_a_few_times_and_refusals_never() -> None:
    c = correlation.Correlator(attempts=3)
    post = c.observe(body(), now=0.0)
    assert post is not None
    for _ in range(2):
        c.failed(post, temporary=True)
        (post,) = c.due(now=0.0)
    c.failed(post, temporary=True)
    assert c.due(now=0.0) == []  # given up after three calls
    refused = c.observe(body(pod="pod-b"), now=0.0)
    assert refused is not None
    c.failed(refused, temporary=False)
    assert c.due(now=0.0) == []


def test_memory_is_bounded() -> None:
    c = correlation.Correlator(memory=3)
    for pod in ("a", "b", "c", "d"):
        post = c.observe(body(pod=f"pod-{pod}"), now=0.0)
        assert post is not None
        c.sent(post)
    again = c.observe(body(pod="pod-a"), now=0.0)
    assert isinstance(again, correlation.Create)  # forgotten: created again (AlreadyExists)
