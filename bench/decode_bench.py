"""Per-request cost of ``decode_request`` on the hot path (not part of ``make bench``).

    .venv/bin/python bench/decode_bench.py [--reps N] [--number N]

Two typical frames: a Produce v9 request with one 16 KiB batch (one topic, one partition) and a
Fetch v12 request for 10 partitions of one topic. Prints, per frame, the median (and min) over
``--reps`` runs of ``--number`` decodes of: the whole ``decode_request``, and the part of it that
validates length prefixes before kio's reader runs (``strata.protocol.lengths``), in µs.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kio.index import load_request_schema  # noqa: E402
from kio.serial import entity_writer  # noqa: E402

from strata.protocol.build import make, zero_values  # noqa: E402
from strata.protocol.frame import decode_request  # noqa: E402
from strata.protocol.records import BatchBuilder  # noqa: E402

try:
    from strata.protocol.lengths import length_check
except ImportError:  # before the length check existed
    length_check = None


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
    assert 16 * 1024 - 512 < len(batch) < 16 * 1024 + 512, len(batch)
    return frame(0, 9, transactional_id=None, acks=-1, timeout=30000,
                 topic_data=[{"name": "bench-topic", "partition_data": [{"index": 0, "records": batch}]}])


def fetch_v12() -> bytes:
    parts = [{"partition": i, "current_leader_epoch": 3, "fetch_offset": 1000 * i, "last_fetched_epoch": -1,
              "log_start_offset": -1, "partition_max_bytes": 1 << 20} for i in range(10)]
    return frame(1, 12, replica_id=-1, max_wait=500, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                 session_id=0, session_epoch=-1, topics=[{"topic": "bench-topic", "partitions": parts}],
                 forgotten_topics_data=[], rack_id="")


def per_call_us(fn: Any, number: int, reps: int) -> tuple[float, float]:
    runs = [t / number * 1e6 for t in timeit.repeat(fn, number=number, repeat=reps)]
    return statistics.median(runs), min(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--number", type=int, default=20000)
    args = ap.parse_args()
    for name, data in (("Produce v9, one 16 KiB batch", produce_v9()), ("Fetch v12, 10 partitions", fetch_v12())):
        req = decode_request(data)
        med, best = per_call_us(lambda data=data: decode_request(data), args.number, args.reps)
        line = f"{name:30s} {len(data):6d} B  decode_request {med:6.2f} µs (min {best:6.2f})"
        if length_check is not None:
            check = length_check(type(req.body))
            pos = len(data) - req.size + 0  # placeholder: header length found below
            header_len = _header_len(data)
            pos = header_len
            med, best = per_call_us(lambda data=data, pos=pos, check=check: check(data, pos), args.number, args.reps)
            line += f"   of which length check {med:5.2f} µs (min {best:5.2f})"
        print(line)


def _header_len(data: bytes) -> int:
    from kio.serial import entity_reader

    req = decode_request(data)
    return entity_reader(type(req.body).__header_schema__)(data, 0)[1]


if __name__ == "__main__":
    main()
