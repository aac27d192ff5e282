"""Events aggregated into series and rate-limited per Pod, as client-go's recorder does (pure).

client-go's `tools/events` recorder keeps the Events it posted (an LRU of 4096) and turns a
repeat of one (same object, reason, action, related object) into its `series`: the first repeat
patches the Event's `series.count` and `lastObservedTime` instead of creating a new one. Its
spam filter gives each object a token bucket (a burst of 25, then one token per 5 minutes), so a
storm about one object cannot flood the API server. `Correlator` does both and only plans: it
says which call to make (`Create`, `PatchSeries`) and is told how it went; `recording` makes the
calls. Counts are absolute (the number of occurrences this process saw), so a repeated patch or
a replica posting what another posted converges on the same Event instead of counting twice.

A call the bucket holds back is not lost: the Event stays due and `due` plans it once the
object has a token again, with every occurrence seen meanwhile in one patch.
"""

from __future__ import annotations

import collections
import dataclasses
import time

from services.controller.pods import event_bodies

BURST = 25
"""Calls one Pod's Events may make at once (client-go's spam filter burst)."""

REFILL_S = 300.0
"""Seconds until a Pod gets one more call (client-go's spam filter: 1/300 per second)."""

MEMORY = 4096
"""Events remembered for aggregation, and Pods for their buckets (client-go's LRU size)."""

ATTEMPTS = 5
"""Calls one Event gets for a temporary failure (an API that does not answer) before it is
given up."""


@dataclasses.dataclass(frozen=True)
class Create:
    """Create the Event (with its series when it already repeated)."""

    name: str
    body: event_bodies.EventBody
    count: int


@dataclasses.dataclass(frozen=True)
class PatchSeries:
    """Set the Event's series: how often it happened and when last."""

    name: str
    series: event_bodies.Series
    count: int


Post = Create | PatchSeries


class TokenBucket:
    """`burst` tokens, refilled one per `refill_s` seconds; times are the caller's (monotonic)."""

    def __init__(self, burst: int, refill_s: float, now: float) -> None:
        self._burst = float(burst)
        self._refill_s = refill_s
        self._tokens = float(burst)
        self._at = now

    def take(self, now: float) -> bool:
        if self._refill_s > 0:
            self._tokens = min(self._burst, self._tokens + (now - self._at) / self._refill_s)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


@dataclasses.dataclass
class _Series:
    body: event_bodies.EventBody
    pod: str
    count: int = 1
    last: str = ""
    held: int = 0
    """The count the API server holds as far as known (0: not created)."""
    sending: bool = False
    failures: int = 0

    def post(self, name: str) -> Post:
        if self.held == 0:
            body = event_bodies.EventBody(**self.body)
            if self.count > 1:
                body["series"] = self._series()
            return Create(name, body, self.count)
        return PatchSeries(name, self._series(), self.count)

    def _series(self) -> event_bodies.Series:
        return event_bodies.Series(count=self.count, lastObservedTime=self.last)


class Correlator:
    """Which Event calls to make, aggregated and rate-limited (see the module docstring).

    Args:
        burst: Calls one Pod's Events may make at once.
        refill_s: Seconds until a Pod gets one more call.
        memory: Events (and Pods) remembered; the oldest are forgotten first.
        attempts: Calls one Event gets for temporary failures before it is given up.
    """

    def __init__(
        self,
        *,
        burst: int = BURST,
        refill_s: float = REFILL_S,
        memory: int = MEMORY,
        attempts: int = ATTEMPTS,
    ) -> None:
        self._burst = burst
        self._refill_s = refill_s
        self._memory = memory
        self._attempts = attempts
        self._series: collections.OrderedDict[str, _Series] = collections.OrderedDict()
        self._buckets: collections.OrderedDict[str, TokenBucket] = collections.OrderedDict()
        self._due: dict[str, None] = {}
        self.limited = 0
        """Calls the buckets held back (each made later, or merged into a later one)."""

    def observe(self, body: event_bodies.EventBody, now: float | None = None) -> Post | None:
        """One occurrence of an Event; the call to make now, if any (None: it is in flight,
        or its Pod has no token left and it waits for `due`)."""
        name = body["metadata"]["name"]
        found = self._series.get(name)
        if found is None:
            found = _Series(body, body["regarding"]["name"], last=body["eventTime"])
            self._series[name] = found
            self._forget_oldest()
        else:
            found.count += 1
            found.last = max(found.last, body["eventTime"])
            self._series.move_to_end(name)
        return self._plan(name, found, _now(now))

    def due(self, now: float | None = None) -> list[Post]:
        """The calls held back earlier whose Pods have a token again."""
        at = _now(now)
        posts = []
        for name in list(self._due):
            found = self._series.get(name)
            self._due.pop(name, None)
            if found is not None and (post := self._plan(name, found, at)) is not None:
                posts.append(post)
        return posts

    @property
    def waiting(self) -> int:
        """Events with a call held back."""
        return len(self._due)

    def sent(self, post: Post) -> None:
        """The API server holds the Event with `post.count`."""
        found = self._done(post)
        if found is not None:
            found.held, found.failures = max(found.held, post.count), 0
            self._requeue(post.name, found)

    def exists(self, post: Create) -> None:
        """Creating it was answered AlreadyExists: another replica (or this controller before a
        restart) posted it. It holds at least one occurrence; a repeat seen here is patched."""
        found = self._done(post)
        if found is not None:
            found.held, found.failures = max(found.held, 1), 0
            self._requeue(post.name, found)

    def missing(self, post: PatchSeries) -> None:
        """Patching it was answered NotFound (expired, deleted): create it again."""
        found = self._done(post)
        if found is not None:
            found.held = 0
            self._requeue(post.name, found)

    def failed(self, post: Post, *, temporary: bool) -> None:
        """The call failed: a temporary failure is tried again (a few times), a refusal is not
        (the Event is given up as if it had been posted)."""
        found = self._done(post)
        if found is None:
            return
        found.failures += 1
        if temporary and found.failures < self._attempts:
            self._due[post.name] = None
        else:
            found.held, found.failures = found.count, 0

    def _plan(self, name: str, found: _Series, now: float) -> Post | None:
        if found.sending or found.held >= found.count:
            return None
        bucket = self._buckets.get(found.pod)
        if bucket is None:
            bucket = self._buckets[found.pod] = TokenBucket(self._burst, self._refill_s, now)
            if len(self._buckets) > self._memory:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(found.pod)
        if not bucket.take(now):
            self.limited += 1
            self._due[name] = None
            return None
        self._due.pop(name, None)
        found.sending = True
        return found.post(name)

    def _done(self, post: Post) -> _Series | None:
        found = self._series.get(post.name)
        if found is not None:
            found.sending = False
        return found

    def _requeue(self, name: str, found: _Series) -> None:
        if found.held < found.count:
            self._due[name] = None

    def _forget_oldest(self) -> None:
        while len(self._series) > self._memory:
            oldest = next(iter(self._series))
            self._due.pop(oldest, None)
            del self._series[oldest]


def _now(now: float | None) -> float:
    return time.monotonic() if now is None else now
