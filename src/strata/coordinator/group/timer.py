"""Keyed one-shot timers for the group state machine (Kafka's coordinator ``CoordinatorTimer``).

Scheduling a key that is already pending replaces it, which is how Kafka expresses "the member
heartbeated: push its expiry back" and "the join phase got a new deadline". Two implementations:
:class:`LoopTimer` on the broker's asyncio loop (``call_later``: no polling, no threads) and
:class:`ManualTimer`, which fires on an explicit ``advance`` so state-machine tests are exact.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Hashable
from typing import Protocol

from strata.common import ManualClock

log = logging.getLogger(__name__)


class Timer(Protocol):
    def schedule(self, key: Hashable, delay_ms: int, fn: Callable[[], None]) -> None: ...

    def cancel(self, key: Hashable) -> None: ...

    def is_scheduled(self, key: Hashable) -> bool: ...

    def cancel_all(self) -> None: ...


def _run(key: Hashable, fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # a timer must never take the coordinator down
        log.exception("group coordinator timer %s failed", key)


class LoopTimer:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._handles: dict[Hashable, asyncio.TimerHandle] = {}

    def schedule(self, key: Hashable, delay_ms: int, fn: Callable[[], None]) -> None:
        self.cancel(key)

        def fire() -> None:
            self._handles.pop(key, None)
            _run(key, fn)

        self._handles[key] = self._loop.call_later(max(0, delay_ms) / 1000, fire)

    def cancel(self, key: Hashable) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._handles

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()


class ManualTimer:
    """Fires due timers, in deadline order, when the test advances its clock."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._seq = itertools.count()
        self._heap: list[tuple[int, int, Hashable]] = []
        self._live: dict[Hashable, tuple[int, int, Callable[[], None]]] = {}

    def schedule(self, key: Hashable, delay_ms: int, fn: Callable[[], None]) -> None:
        deadline, seq = self.clock.milliseconds() + max(0, delay_ms), next(self._seq)
        self._live[key] = (deadline, seq, fn)
        heapq.heappush(self._heap, (deadline, seq, key))

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._live

    def cancel_all(self) -> None:
        self._live.clear()
        self._heap.clear()

    def deadline(self, key: Hashable) -> int | None:
        entry = self._live.get(key)
        return entry[0] if entry else None

    def advance(self, ms: int = 0) -> None:
        """Move the clock by ``ms``, firing every timer that falls due on the way."""
        target = self.clock.milliseconds() + ms
        while self._heap and self._heap[0][0] <= target:
            deadline, seq, key = heapq.heappop(self._heap)
            entry = self._live.get(key)
            if entry is None or entry[1] != seq:
                continue  # cancelled or rescheduled
            del self._live[key]
            if deadline > self.clock.milliseconds():
                self.clock.advance(deadline - self.clock.milliseconds())
            _run(key, entry[2])
        if target > self.clock.milliseconds():
            self.clock.advance(target - self.clock.milliseconds())
