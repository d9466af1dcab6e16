"""Per-request cost of ``decode_request`` on the hot path, and of its length check (not part of ``make bench``).

    .venv/bin/python bench/decode_bench.py [--reps N] [--number N]

Two typical frames: a Produce v9 request with one 16 KiB batch (one topic, one partition) and a
Fetch v12 request for 10 partitions of one topic. For each, in µs of CPU per request:
``decode_request`` as the broker runs it; ``decode_request`` as it was before the length check
(kio's readers looked up per call, nothing between them; the patched-in no-op, ~0.05 µs, is
counted there too); and the length check of ``strata.protocol.lengths`` alone. Runs alternate;
the minimum and the median over ``--reps`` runs of ``--number`` calls are printed (thread CPU time,
so a busy machine inflates the figures less than wall time would).
"""

from __future__ import annotations

import argparse
import functools
import io
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kio.index import load_request_schema  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402

import strata.protocol.frame as frame_module  # noqa: E402
from strata.protocol.build import make, zero_values  # noqa: E402
from strata.protocol.frame import _readers, decode_request  # noqa: E402
from strata.protocol.lengths import length_check  # noqa: E402
from strata.protocol.records import BatchBuilder  # noqa: E402

CPU = time.thread_time  # CPU time of this thread: steadier than wall time on a shared machine


def frame(key: int, version: int, **fields: Any) -> bytes:
    cls = load_request_schema(key, version)
    buf = io.BytesIO()
    header_cls = cls.__header_schema__
    entity_writer(header_cls)(buf, make(header_cls, request_api_key=key, request_api_version=version,
                                        correlation_id=7, client_id="bench-client"))
    entity_writer(cls)(buf, make(cls, **{**zero_values(cls), **fields}))
    return buf.getvalue()


def produce_v9() -> bytes:
    b = BatchBuilder()
    for i in range(16):
        b.append(bytes([i]) * 1000, key=b"key-%d" % i)
    batch = b.build()
    return frame(0, 9, transactional_id=None, acks=-1, timeout=30000,
                 topic_data=[{"name": "bench-topic", "partition_data": [{"index": 0, "records": batch}]}])


def fetch_v12() -> bytes:
    parts = [{"partition": i, "current_leader_epoch": 3, "fetch_offset": 1000 * i, "last_fetched_epoch": -1,
              "log_start_offset": -1, "partition_max_bytes": 1 << 20} for i in range(10)]
    return frame(1, 12, replica_id=-1, max_wait=500, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                 session_id=0, session_epoch=-1, topics=[{"topic": "bench-topic", "partitions": parts}],
                 forgotten_topics_data=[], rack_id="")


def _readers_before(cls: type) -> tuple[Any, Callable[[Any, int], int], Any]:
    """decode_request as it was before the check: kio's two readers looked up per call, nothing between."""
    return entity_reader(cls.__header_schema__), _skip, entity_reader(cls)


def _skip(buf: Any, pos: int) -> int:
    return pos


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--number", type=int, default=20000)
    args = ap.parse_args()
    for name, data in (("Produce v9, one 16 KiB batch", produce_v9()), ("Fetch v12, 10 partitions", fetch_v12())):
        cls = type(decode_request(data).body)
        pos = entity_reader(cls.__header_schema__)(data, 0)[1]
        check = length_check(cls)
        assert check(data, pos) == len(data)
        runs: dict[str, list[float]] = {"with": [], "before": [], "check": []}
        decode = functools.partial(decode_request, data)
        check_alone = functools.partial(check, data, pos)
        for _ in range(args.reps):
            frame_module._readers = _readers
            runs["with"].append(timeit.timeit(decode, number=args.number, timer=CPU))
            frame_module._readers = _readers_before
            runs["before"].append(timeit.timeit(decode, number=args.number, timer=CPU))
            frame_module._readers = _readers
            runs["check"].append(timeit.timeit(check_alone, number=args.number, timer=CPU))
        us = {k: [t / args.number * 1e6 for t in v] for k, v in runs.items()}
        print(f"{name} ({len(data)} B):")
        for label, key in (("decode_request", "with"), ("  before the check", "before"),
                           ("  the check alone", "check")):
            print(f"  {label:22s} min {min(us[key]):5.2f} µs   median {statistics.median(us[key]):5.2f} µs")
        print(f"  {'overhead (min - min)':22s}     {min(us['with']) - min(us['before']):5.2f} µs")

if __name__ == "__main__":
    main()
