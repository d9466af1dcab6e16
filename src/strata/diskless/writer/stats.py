"""Counters and latency samples the writer keeps for the broker's metrics to read.

Plain attributes, updated on the event loop thread only, so reading them needs no lock. Latencies are
the last ``SAMPLES`` values (a metrics reporter derives percentiles from them), measured on the
writer's monotonic clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

SAMPLES = 1024


def _samples() -> deque[int]:
    return deque(maxlen=SAMPLES)


@dataclass(slots=True)
class WriterStats:
    requests: int = 0                 # write() calls that buffered at least one batch
    entries: int = 0                  # partition entries buffered
    rotations_by_size: int = 0
    rotations_by_interval: int = 0
    rotations_by_flush: int = 0       # flush() and close()
    objects_uploaded: int = 0
    bytes_uploaded: int = 0
    put_requests: int = 0             # every PUT attempt, retries included (what the store bills)
    upload_retries: int = 0
    upload_failures: int = 0          # objects given up on
    commits: int = 0                  # commits the coordinator answered
    batches_committed: int = 0        # batches the coordinator accepted (duplicates included)
    commit_failures: int = 0          # commits that raised (outcome unknown or refused)
    objects_deleted: int = 0          # objects removed after a failed commit
    delete_failures: int = 0
    upload_latency_ms: deque[int] = field(default_factory=_samples)
    commit_latency_ms: deque[int] = field(default_factory=_samples)
