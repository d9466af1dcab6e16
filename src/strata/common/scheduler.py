"""Delayed background work (Kafka's KafkaScheduler), e.g. removing ``.deleted`` segment files.

The log layer is synchronous and must not import asyncio; it only needs "run this later".
Tests use :class:`ManualScheduler` to decide when deferred work happens.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


class Scheduler(Protocol):
    def schedule(self, name: str, fn: Callable[[], None], delay_ms: int = 0) -> None: ...


class ThreadScheduler:
    """One daemon thread running tasks at their due time; errors are logged, never raised."""

    def __init__(self) -> None:
        self._queue: list[tuple[float, int, str, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="strata-scheduler", daemon=True)
        self._thread.start()

    def schedule(self, name: str, fn: Callable[[], None], delay_ms: int = 0) -> None:
        import time

        with self._cond:
            if self._closed:
                fn_now = True
            else:
                heapq.heappush(self._queue, (time.monotonic() + delay_ms / 1000, next(self._seq), name, fn))
                self._cond.notify()
                fn_now = False
        if fn_now:  # after shutdown, run inline so deferred deletions are not lost
            _run_task(name, fn)

    def _run(self) -> None:
        import time

        while True:
            with self._cond:
                while not self._closed and (not self._queue or self._queue[0][0] > time.monotonic()):
                    timeout = None if not self._queue else max(0.0, self._queue[0][0] - time.monotonic())
                    self._cond.wait(timeout)
                if self._closed:
                    return
                _, _, name, fn = heapq.heappop(self._queue)
            _run_task(name, fn)

    def shutdown(self, run_pending: bool = True) -> None:
        """Stop the thread; with ``run_pending`` the queued tasks run now, whatever their delay."""
        with self._cond:
            self._closed = True
            pending, self._queue = self._queue, []
            self._cond.notify()
        self._thread.join(timeout=10)
        if run_pending:
            for _, _, name, fn in sorted(pending):
                _run_task(name, fn)


class ManualScheduler:
    """Collects tasks; ``run_pending()`` runs them (for tests and single-threaded tools)."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, Callable[[], None], int]] = []

    def schedule(self, name: str, fn: Callable[[], None], delay_ms: int = 0) -> None:
        self.tasks.append((name, fn, delay_ms))

    def run_pending(self) -> int:
        tasks, self.tasks = self.tasks, []
        for name, fn, _ in tasks:
            _run_task(name, fn)
        return len(tasks)


def _run_task(name: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        log.exception("scheduled task %s failed", name)
