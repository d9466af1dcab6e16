"""Small client-side helpers shared by the security tests."""

from __future__ import annotations

import time
from typing import Any


def poll_kafka_python(consumer: Any, want: int, timeout_s: float = 30.0) -> list[bytes]:
    """Values from a kafka-python consumer until ``want`` arrived (iterating would wait out consumer_timeout_ms)."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [r.value for r in records]
    return got
