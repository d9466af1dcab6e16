"""KIP-956 remote storage quotas: Kafka 3.9's ``RLMQuotaManager`` and its throttle-time sensors.

Two instances live in the RemoteLogManager, one per direction, each shared by every partition of the broker:

- copy (``remote.log.manager.copy.max.bytes.per.second``): before a segment is uploaded its copy task waits
  (:meth:`RLMQuotaManager.acquire`) while the copy rate is over the bound, then records the segment's size.
  Kafka holds a fair lock around that check-and-record; here an ``asyncio.Lock`` (FIFO) does the same for the
  copy tasks on the event loop, and the wait sleeps the throttle time the rate gives (no polling), woken
  early when the quota changes (a dynamic config raising it frees the waiting tasks at once).
- fetch (``remote.log.manager.fetch.max.bytes.per.second``): a consumer fetch that needs the remote tier
  asks :meth:`RLMQuotaManager.is_quota_exceeded` first and does not read the remote tier while it is
  (the partition is answered with no records and no error, the client fetches again); the reader records
  the bytes each remote read returned.

The rate is Kafka's ``SimpleRate`` over ``window.num`` windows of ``window.size.seconds`` (see
:class:`strata.quota.rate.SimpleRate`); "exceeded" is Kafka's ``checkQuotas``: the rate is above the bound.
Thread-safe: the reader pool records, the event loop checks and waits.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from strata.quota.rate import SimpleRate

UNBOUNDED = 2**63 - 1  # Long.MAX_VALUE, the keys' default: no quota
MIN_WAIT_S = 0.001  # a throttle time that rounds to nothing still yields to the loop once


class RLMQuotaManager:
    """One byte-rate quota: ``record`` bytes, ask ``is_quota_exceeded``/``throttle_s``, ``update_quota`` live."""

    def __init__(self, bytes_per_s: float = UNBOUNDED, samples: int = 11, window_s: float = 1.0, *,
                 description: str = "", clock: Callable[[], float] = time.monotonic) -> None:
        if bytes_per_s <= 0:
            raise ValueError("a quota must be positive")
        self.description = description
        self._clock = clock
        self._lock = threading.Lock()
        self._rate = SimpleRate(samples, window_s)
        self._quota = float(bytes_per_s)
        self._changed: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._turn: asyncio.Lock | None = None  # the copy tasks' fair lock (created on the loop that uses it)

    @property
    def quota(self) -> float:
        return self._quota

    @property
    def unbounded(self) -> bool:
        return self._quota >= UNBOUNDED

    def update_quota(self, bytes_per_s: float) -> None:
        """Kafka's ``updateQuota``: the new bound applies to the rate measured so far; waiters re-check at once."""
        if bytes_per_s <= 0:
            raise ValueError("a quota must be positive")
        with self._lock:
            self._quota = float(bytes_per_s)
            waiters = list(self._changed)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                pass

    def record(self, value: float, now: float | None = None) -> None:
        with self._lock:
            self._rate.record(value, self._clock() if now is None else now)

    def measure(self, now: float | None = None) -> float:
        """Bytes per second over the live windows (Kafka's ``byte-rate`` metric of the quota)."""
        with self._lock:
            return self._rate.measure(self._clock() if now is None else now)

    def throttle_s(self, now: float | None = None) -> float:
        """Kafka's ``getThrottleTimeMs`` in seconds: how long until the rate is back at the bound (0: within)."""
        with self._lock:
            if self._quota >= UNBOUNDED:
                return 0.0
            return self._rate.throttle_s(self._quota, self._clock() if now is None else now)

    def is_quota_exceeded(self, now: float | None = None) -> bool:
        return self.throttle_s(now) > 0

    async def wait_until_not_exceeded(self, on_throttle: Callable[[float], None] | None = None) -> float:
        """Sleep while the quota is exceeded, each time for the throttle time the rate gives, and return the
        seconds waited. ``update_quota`` wakes the sleeper early to re-check. ``on_throttle`` gets each
        throttle time before it is slept (Kafka records it in the throttle-time sensor)."""
        throttle = self.throttle_s()
        if throttle <= 0:
            return 0.0
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        waiter = (loop, event)
        started = self._clock()
        with self._lock:
            self._changed.add(waiter)
        try:
            while throttle > 0:
                if on_throttle is not None:
                    on_throttle(throttle)
                event.clear()
                try:
                    await asyncio.wait_for(event.wait(), max(throttle, MIN_WAIT_S))
                except TimeoutError:
                    pass
                throttle = self.throttle_s()
        finally:
            with self._lock:
                self._changed.discard(waiter)
        return max(0.0, self._clock() - started)

    async def acquire(self, value: float, on_throttle: Callable[[float], None] | None = None) -> float:
        """The copy side (Kafka's ``copyQuotaManagerLock``): in FIFO turn with the other copy tasks, wait until
        the quota is not exceeded, then record ``value``. Returns the seconds waited."""
        if self._turn is None:
            self._turn = asyncio.Lock()
        async with self._turn:
            waited = await self.wait_until_not_exceeded(on_throttle)
            self.record(value)
        return waited


class ThrottleTimeSensor:
    """Kafka's ``RLMQuotaMetrics`` sensor (``remote-copy-throttle-time``, ``remote-fetch-throttle-time``): the
    average and maximum of recorded throttle times in ms over 2 windows of 30 s (a sensor's default config);
    both read 0 with nothing recorded in that time (Kafka reports NaN/-Infinity there)."""

    def __init__(self, samples: int = 2, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._samples = samples
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: list[list[float]] = []  # [start, sum, count, max], newest last

    def record(self, ms: float, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        with self._lock:
            if not self._windows or now >= self._windows[-1][0] + self._window_s:
                self._windows.append([now, 0.0, 0, 0.0])
                del self._windows[:-self._samples]
            w = self._windows[-1]
            w[1] += ms
            w[2] += 1
            w[3] = max(w[3], ms)

    def _live(self, now: float | None) -> list[list[float]]:
        now = self._clock() if now is None else now
        expire = self._samples * self._window_s
        return [w for w in self._windows if now - w[0] < expire]

    def avg(self, now: float | None = None) -> float:
        with self._lock:
            live = self._live(now)
            count = sum(w[2] for w in live)
            return sum(w[1] for w in live) / count if count else 0.0

    def max(self, now: float | None = None) -> float:
        with self._lock:
            return max((w[3] for w in self._live(now)), default=0.0)
