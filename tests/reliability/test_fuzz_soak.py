"""Soak: >= 100,000 hostile frames (``STRATA_SOAK_FUZZ_FRAMES``, default 120,000) against one broker.

The same machinery as the fast test in ``make test`` (``tests/broker/test_fuzz.py``, see
``fuzz_harness.py``) at ten times the volume, with Kafka's default ``socket.request.max.bytes`` (100 MiB)
so that size prefixes can claim up to 100 MiB each: sixteen connections at a time announce frames of
up to that size and never finish them, while the broker's RSS must stay within 100 MiB of where it
started. Seeds are synthetic requests of every API, the frames of real confluent-kafka, kafka-python
and aiokafka sessions, and the golden compressed client batches.

At the end the broker is alive, logged no traceback, has not leaked connections (its open sockets
are back to what a quiet broker holds) and confluent-kafka still produces and consumes through it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator

import pytest
from tests.reliability.fuzz_harness import (
    FRAMES_PER_EXAMPLE,
    FuzzTarget,
    assert_broker_survived,
    fuzz,
    fuzz_target,
    real_client_still_works,
)

FRAMES = int(os.environ.get("STRATA_SOAK_FUZZ_FRAMES", "120000"))
MAX_REQUEST = 104_857_600  # Kafka's default socket.request.max.bytes
RSS_GROWTH_LIMIT_KIB = 100 * 1024
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")


def _open_sockets(pid: int) -> int:
    fd_dir = f"/proc/{pid}/fd"
    count = 0
    for name in os.listdir(fd_dir):
        try:
            count += os.readlink(f"{fd_dir}/{name}").startswith("socket:")
        except OSError:
            pass
    return count


@pytest.fixture
def soak_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzTarget]:
    yield from fuzz_target(tmp_path_factory.mktemp("fuzz-soak"), CLIENTS, MAX_REQUEST)


@pytest.mark.slow
@pytest.mark.timeout(300 + FRAMES // 200)
def test_a_hundred_thousand_hostile_frames_leave_the_broker_serving(soak_target: FuzzTarget) -> None:
    broker = soak_target.broker
    assert broker.proc is not None
    sockets_before = _open_sockets(broker.proc.pid)
    examples = math.ceil(FRAMES / (sum(FRAMES_PER_EXAMPLE) / 2))
    stats = fuzz(broker, soak_target.seeds(), examples, MAX_REQUEST)
    assert stats.sent >= min(FRAMES, 100_000) * 0.95
    assert stats.answered > stats.sent // 10 and stats.closed_by_broker > stats.sent // 10
    assert stats.kinds.get("announce", 0) > stats.sent // 50
    assert stats.stalled < stats.sent // 100
    rss = stats.rss_samples_kib
    assert max(rss) - rss[0] < RSS_GROWTH_LIMIT_KIB, f"RSS grew from {rss[0]} to {max(rss)} KiB"
    assert_broker_survived(broker)
    # Every connection the fuzzer opened (hundreds of thousands of frames, thousands of connections)
    # is gone from the broker once the client side closed it.
    deadline = time.monotonic() + 10
    while _open_sockets(broker.proc.pid) > sockets_before + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _open_sockets(broker.proc.pid) <= sockets_before + 2
    real_client_still_works(broker.bootstrap)
