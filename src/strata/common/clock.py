"""Injected time, so roll and retention rules are testable without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int: ...

    def monotonic_ms(self) -> int: ...


class SystemClock:
    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to; wall and monotonic time advance together."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def milliseconds(self) -> int:
        return self.now_ms

    def monotonic_ms(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms
