"""One-shot timers for the commit interval: the event loop's in a broker, a hand-cranked one in tests.

The writer reads time from a :class:`~strata.common.clock.Clock`, but a clock cannot wake anyone up;
the interval rotation needs a callback. ``LoopTimer`` is ``loop.call_later``; ``ManualTimer`` fires
callbacks only when a test advances its :class:`~strata.common.clock.ManualClock`, so tests control
exactly when a half-full active file rotates without sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from strata.common.clock import ManualClock


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Timer(Protocol):
    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` (on the event loop's thread) once, ``delay_ms`` from now."""
        ...


class LoopTimer:
    """The running event loop's timers (monotonic time); must be used from inside the loop."""

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(delay_ms / 1000, callback)


@dataclass(order=True)
class _Scheduled:
    due_ms: int
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimer:
    """Timers on a :class:`ManualClock`: ``advance(ms)`` moves the clock and runs what fell due, in due
    order, each with the clock set to its due time."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._heap: list[_Scheduled] = []
        self._seq = itertools.count()

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        entry = _Scheduled(self.clock.milliseconds() + max(0, delay_ms), next(self._seq), callback)
        heapq.heappush(self._heap, entry)
        return entry

    @property
    def pending(self) -> int:
        """Timers armed and not cancelled."""
        return sum(1 for e in self._heap if not e.cancelled)

    def advance(self, ms: int) -> int:
        """Move time forward by ``ms``, firing due callbacks; returns how many fired."""
        target = self.clock.milliseconds() + ms
        fired = 0
        while self._heap and self._heap[0].due_ms <= target:
            entry = heapq.heappop(self._heap)
            if entry.cancelled:
                continue
            self.clock.advance(max(0, entry.due_ms - self.clock.milliseconds()))
            entry.callback()
            fired += 1
        self.clock.advance(target - self.clock.milliseconds())
        return fired
