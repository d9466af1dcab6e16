"""A windowed rate and the throttle time that brings it back under a bound: Kafka's ``Rate`` over a
``SampledStat`` and ``QuotaUtils.throttleTime``.

Kafka measures every quota the same way: values go into ``samples`` windows of ``window_s`` seconds
each (``quota.window.num`` = 11 and ``quota.window.size.seconds`` = 1 for client quotas); windows older
than ``samples * window_s`` are forgotten; the rate is the sum of the live windows divided by the
time they span, which is never taken as less than ``samples - 1`` full windows (so a client's first
burst is averaged over ten seconds, not over the milliseconds it took). When a recorded value takes
the rate over the bound, the throttle time is how long the client must stay silent for the rate to
fall back to it: ``(rate - bound) / bound * window_span``. Times are seconds from a monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Sample:
    start: float
    value: float = 0.0


class Rate:
    """The sum of the recorded values per second over the last ``samples`` windows of ``window_s``."""

    __slots__ = ("samples", "window_s", "_samples", "_current", "last_record")

    def __init__(self, samples: int = 11, window_s: float = 1.0) -> None:
        if samples < 1:
            raise ValueError("a rate needs at least 1 sample")
        if window_s <= 0:
            raise ValueError("the sample window must be positive")
        self.samples = samples
        self.window_s = window_s
        self._samples: list[_Sample] = []
        self._current = 0
        self.last_record = 0.0

    def record(self, value: float, now: float) -> None:
        """Kafka's ``SampledStat.record``: into the current window, or a new one once it has elapsed."""
        self.last_record = now
        sample = self._samples[self._current] if self._samples else None
        if sample is None or now >= sample.start + self.window_s:
            sample = self._advance(now)
        sample.value += value

    def _advance(self, now: float) -> _Sample:
        if len(self._samples) < self.samples:
            self._samples.append(_Sample(now))
            self._current = len(self._samples) - 1
        else:  # reuse the oldest window
            self._current = (self._current + 1) % self.samples
            self._samples[self._current] = _Sample(now)
        return self._samples[self._current]

    def _purge(self, now: float) -> None:
        """Windows that ended more than ``samples * window_s`` ago count for nothing (Kafka resets them)."""
        expire = self.samples * self.window_s
        for sample in self._samples:
            if now - sample.start >= expire:
                sample.value = 0.0
                sample.start = now

    def window_span(self, now: float) -> float:
        """Kafka's ``Rate.windowSize``: the time the live windows span, at least ``samples - 1`` windows."""
        self._purge(now)
        oldest = min((s.start for s in self._samples), default=now)
        elapsed = now - oldest
        full = int(elapsed / self.window_s)
        minimum = self.samples - 1
        if full < minimum:
            elapsed += (minimum - full) * self.window_s
        return max(elapsed, 1e-3)  # one sample only: a first value must not divide by zero

    def measure(self, now: float) -> float:
        """Value per second over :meth:`window_span`."""
        span = self.window_span(now)  # purges first: the sum is of the live windows only
        return sum(s.value for s in self._samples) / span

    def throttle_s(self, bound: float, now: float) -> float:
        """How long the recorder must wait for the rate to fall back to ``bound`` (0: it is within)."""
        span = self.window_span(now)
        total = sum(s.value for s in self._samples)
        rate = total / span
        if rate <= bound:
            return 0.0
        return (rate - bound) / bound * span

    def unrecord(self, value: float, now: float) -> None:
        """Take back a value recorded in the current window (Kafka does so for a throttled fetch)."""
        if self._samples:
            sample = self._samples[self._current]
            sample.value = max(0.0, sample.value - value)


class SimpleRate(Rate):
    """Kafka's ``SimpleRate`` (what ``RLMQuotaManager`` measures with): the span is the time since the oldest
    live window, at least one window - not ``samples - 1`` of them - so a first burst counts at once
    (``Rate`` would average it over ten seconds and let ten seconds' worth through). With a growing span
    :meth:`throttle_s` is exactly the wait for ``recorded / bound`` seconds to have passed. One sample is
    allowed, as in Kafka (``remote.log.manager.*.quota.window.num`` >= 1)."""

    __slots__ = ()

    def __init__(self, samples: int = 11, window_s: float = 1.0) -> None:
        if samples < 1:
            raise ValueError("a rate needs at least 1 sample")
        super().__init__(max(samples, 2), window_s)
        self.samples = samples

    def window_span(self, now: float) -> float:
        self._purge(now)
        oldest = min((s.start for s in self._samples), default=now)
        return max(now - oldest, self.window_s)

    def time_to_bound(self, bound: float, now: float) -> float:
        """With nothing more recorded, how long until the rate is back at ``bound`` (0: it is): until the time
        since the oldest window reaches ``total / bound``. Exact, where :meth:`throttle_s` is short while the
        span is still held at one window (the first second after a burst); windows expiring meanwhile only
        make it sooner."""
        self._purge(now)
        total = sum(s.value for s in self._samples)
        oldest = min((s.start for s in self._samples), default=now)
        if total <= bound * max(now - oldest, self.window_s):
            return 0.0
        return total / bound - (now - oldest)
