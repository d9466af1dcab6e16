"""Columnar decoding for Spark: Kafka record batches to Arrow, against a per-record decoder and an Arrow ceiling.

    .venv/bin/python bench/columnar_bench.py [--quick] [--reps N] [--records N] [--records-per-batch N]
                                             [--codecs none,lz4,zstd] [--json PATH]

The input, built once per codec (untimed): ``records`` records of ``value_bytes``-byte text-like
values (JSON-ish, about 2x compressible), no key, no headers, in batches of ``records_per_batch``
(a client's batch.size-bound batch; 64 distinct batches cycled, offsets patched to increase).
Each run decodes the whole buffer in one thread, CRCs checked:

* subject, ``strata.spark.columnar.decode_batches``: Arrow record batches of 65,536 rows in Spark's
  Kafka-source schema;
* baseline, the reference per-record decoder (``decode_batch``, i.e. ``decode_records``) over the same
  bytes. It stops at Python ``Record`` objects, so it is a lower bound for a per-record path (which
  would still have to build Arrow arrays from them);
* ceiling (informational): a generator yielding the same number of Arrow batches of the same schema
  from ready-made numpy buffers, zero-copy: what a data source costs that does no decoding at all.

MB/s = 10^6 value bytes/s (the house unit; rows/s are printed below the table, same ratios). The
speed-up target applies to uncompressed input; with a codec both paths share the decompression
(cramjam, per Kafka batch), so those ratios are shown for insight only.
Runs alternate (the order rotates each repetition); a warm-up pass of each runs untimed first.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from report import Result, environment, format_table, run_and_save, summarize
from strata.protocol.records import BatchBuilder, CompressionType, decode_batch, iter_batches, set_base_offset
from strata.spark.columnar import arrow_schema, decode_batches

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
TOPIC = "bench"
ARROW_ROWS = 65536


@dataclass(frozen=True)
class BenchConfig:
    records: int = 1_000_000
    value_bytes: int = 100
    records_per_batch: int = 100
    pool_batches: int = 64
    codecs: tuple[str, ...] = ("none", "lz4", "zstd")
    reps: int = 5
    target: float = 10.0  # uncompressed: columnar rows/s over the per-record decoder's (codecs: shown only)
    min_rows_per_s: float = 2e6  # uncompressed, one thread
    seed: int = 405

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(records=200_000, reps=3)


def _value(rng: random.Random, size: int) -> bytes:
    text = (f'{{"id":{rng.randrange(10**9)},"user":"u{rng.randrange(10**5):05d}","kind":"'
            f'{rng.choice(["click", "view", "buy", "scroll"])}","payload":"')
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    text += "".join(rng.choices(alphabet, k=max(0, size - len(text) - 2))) + '"}'
    return text.encode()[:size]


def build_input(cfg: BenchConfig, codec: CompressionType) -> bytes:
    """``cfg.records`` records in batches cycled from a pool of distinct ones, offsets increasing."""
    rng = random.Random(cfg.seed)
    now = 1_700_000_000_000
    pool = []
    for _ in range(cfg.pool_batches):
        builder = BatchBuilder(compression=codec)
        for i in range(cfg.records_per_batch):
            builder.append(_value(rng, cfg.value_bytes), key=None, timestamp=now + i)
        pool.append(builder.build())
    out = bytearray()
    offset = 0
    while offset < cfg.records:
        position = len(out)
        out += pool[(offset // cfg.records_per_batch) % len(pool)]
        set_base_offset(out, position, offset)
        offset += cfg.records_per_batch
    return bytes(out)


def run_columnar(data: bytes, expected_rows: int) -> float:
    gc.collect()
    start = time.perf_counter()
    result = decode_batches(data, topic=TOPIC, partition=0, max_rows_per_batch=ARROW_ROWS)
    elapsed = time.perf_counter() - start
    assert result.rows == expected_rows and result.bytes_consumed == len(data), (result.rows, expected_rows)
    return elapsed


def run_reference(data: bytes, expected_rows: int) -> float:
    gc.collect()
    start = time.perf_counter()
    rows = 0
    for position, _ in iter_batches(data):
        rows += len(decode_batch(data, position).records)  # CRC, codec, every record
    elapsed = time.perf_counter() - start
    assert rows == expected_rows
    return elapsed


class Ceiling:
    """Arrow batches of the same schema and row count straight from prepared numpy buffers (no decoding)."""

    def __init__(self, cfg: BenchConfig) -> None:
        n = min(ARROW_ROWS, cfg.records)
        rng = np.random.default_rng(cfg.seed)
        self.values = rng.integers(97, 123, n * cfg.value_bytes, dtype=np.uint8)
        self.value_offsets = np.arange(n + 1, dtype=np.int32) * cfg.value_bytes
        self.key_offsets = np.zeros(n + 1, np.int32)
        self.key_validity = np.zeros((n + 7) // 8, np.uint8)
        self.partitions = np.zeros(n, np.int32)
        self.offsets = np.arange(cfg.records, dtype=np.int64)
        self.timestamps = np.full(n, 1_700_000_000_000_000, np.int64)
        self.ts_types = np.zeros(n, np.int32)
        self.records = cfg.records
        self.schema = arrow_schema(False)

    def batches(self):  # noqa: ANN201 - a generator of pa.RecordBatch
        for start in range(0, self.records, ARROW_ROWS):
            n = min(ARROW_ROWS, self.records - start)
            columns = [
                pa.Array.from_buffers(pa.binary(), n, [pa.py_buffer(self.key_validity), pa.py_buffer(self.key_offsets),
                                                       pa.py_buffer(b"")], n),
                pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(self.value_offsets),
                                                       pa.py_buffer(self.values)]),
                pa.repeat(pa.scalar(TOPIC, pa.string()), n),
                pa.array(self.partitions[:n]),
                pa.array(self.offsets[start : start + n]),
                pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(self.timestamps[:n])]),
                pa.array(self.ts_types[:n]),
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def run(self) -> float:
        gc.collect()
        start = time.perf_counter()
        rows = sum(b.num_rows for b in self.batches())
        elapsed = time.perf_counter() - start
        assert rows == self.records
        return elapsed


def run(cfg: BenchConfig, log: Callable[[str], None] = print) -> dict:
    value_bytes = cfg.records * cfg.value_bytes
    ceiling = Ceiling(cfg)
    ceiling_result = Result("arrow ceiling (zero-copy buffers)", "baseline", nbytes=value_bytes,
                            note="no decoding")
    runs: list[tuple[Result, Callable[[], float]]] = [(ceiling_result, ceiling.run)]
    results = [ceiling_result]
    inputs = {}
    per_codec = []
    for name in cfg.codecs:
        codec = CompressionType.from_name(name)
        t0 = time.perf_counter()
        data = inputs[name] = build_input(cfg, codec)
        log(f"built {name}: {len(data) / 1e6:.1f} MB for {cfg.records} records in {time.perf_counter() - t0:.1f} s")
        reference = Result(f"per-record decode_records ({name})", "baseline", nbytes=value_bytes,
                           note=f"{len(data)} B input")
        columnar = Result(f"columnar decode_batches ({name})", "subject", nbytes=value_bytes,
                          baseline=reference.name, informational=codec != CompressionType.NONE)
        vs_ceiling = Result(f"  columnar ({name}) / ceiling", "subject", nbytes=value_bytes,
                            baseline=ceiling_result.name, informational=True)
        vs_ceiling.samples_s = columnar.samples_s  # the same runs, a second ratio
        results += [reference, columnar, vs_ceiling]
        per_codec.append((name, reference, columnar))
        runs.append((reference, lambda d=data: run_reference(d, cfg.records)))
        runs.append((columnar, lambda d=data: run_columnar(d, cfg.records)))

    for _, fn in runs:  # warm-up: first-touch page faults and allocator growth stay out of the timings
        fn()
    for rep in range(cfg.reps):
        order = runs[rep % len(runs):] + runs[:rep % len(runs)]
        for result, fn in order:
            result.samples_s.append(fn())
        log(f"rep {rep + 1}/{cfg.reps} done")

    rows_per_s = {}
    for name, reference, columnar in per_codec:
        rows_per_s[name] = {
            "columnar": cfg.records / statistics.median(columnar.samples_s),
            "reference": cfg.records / statistics.median(reference.samples_s),
        }
    rows_per_s["ceiling"] = cfg.records / statistics.median(ceiling_result.samples_s)
    return {
        "config": asdict(cfg),
        "environment": environment(pyarrow=pa.__version__, numpy=np.__version__),
        "input_bytes": {name: len(data) for name, data in inputs.items()},
        "rows_per_s": rows_per_s,
        "results": summarize(results, cfg.target),
    }


def format_summary(report: dict) -> str:
    cfg = report["config"]
    rates = report["rows_per_s"]
    lines = [f"rows/s (median), {cfg['records']} records of {cfg['value_bytes']} B in batches of "
             f"{cfg['records_per_batch']}, one thread:"]
    for name in cfg["codecs"]:
        columnar, reference = rates[name]["columnar"], rates[name]["reference"]
        lines.append(f"  {name:6s} columnar {columnar / 1e6:6.2f} M/s   per-record {reference / 1e6:6.3f} M/s"
                     f"   speed-up {columnar / reference:5.1f}x   of ceiling {columnar / rates['ceiling']:.3f}"
                     f"   (input {report['input_bytes'][name] / 1e6:.0f} MB)")
    lines.append(f"  ceiling   {rates['ceiling'] / 1e6:8.1f} M/s (Arrow batches from ready buffers, no decoding)")
    if "none" in rates:
        ok = rates["none"]["columnar"] >= cfg["min_rows_per_s"]
        lines.append(f"  target: uncompressed columnar >= {cfg['min_rows_per_s'] / 1e6:.1f} M rows/s: "
                     + ("PASS" if ok else "FAIL"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200k records, 3 reps")
    parser.add_argument("--reps", type=int, help="repetitions of each measurement (>= 3 recommended)")
    parser.add_argument("--records", type=int, help="records per input")
    parser.add_argument("--records-per-batch", type=int, help="records per Kafka batch (default 100)")
    parser.add_argument("--codecs", help="comma-separated: none,gzip,snappy,lz4,zstd (default none,lz4,zstd)")
    parser.add_argument("--json", type=Path, default=OUT / "columnar_bench.json", help="where to write results")
    args = parser.parse_args(argv)
    cfg = BenchConfig.quick() if args.quick else BenchConfig()
    overrides: dict = {k: v for k, v in (("reps", args.reps), ("records", args.records),
                                         ("records_per_batch", args.records_per_batch)) if v is not None}
    if args.codecs:
        overrides["codecs"] = tuple(c.strip() for c in args.codecs.split(",") if c.strip())
    cfg = replace(cfg, **overrides)
    return run_and_save(lambda: run(cfg), show_report, quick=args.quick,
                        json_path=args.json)


def show_report(report: dict) -> None:
    print(f"\n{format_table(report['results'])}\n\n{format_summary(report)}")


if __name__ == "__main__":
    sys.exit(main())
