"""Spark batch read of a tiered topic: ``format("strata")`` rows/s against one consumer and a synthetic source.

    .venv/bin/python bench/spark_bench.py [--quick] [--records N] [--reps N] [--segment-mib N]
                                          [--codec mixed|none|gzip|snappy|lz4|zstd] [--s3] [--no-profile]
                                          [--c1-jit] [--dir PATH] [--json PATH]

A broker process with tiering on (``local`` RSM; with ``--s3`` also the ``s3`` RSM on a SeaweedFS
this benchmark starts, skipped with the reason printed when it cannot start), both on 127.0.0.1
and stopped by pid. One topic of 3 partitions (``segment.bytes`` 8 MiB, ``local.retention.bytes=1``,
``retention.ms=-1``) gets N records (2M; ``--quick`` 300k with 2 MiB segments): key ``k<i>``,
a 40-160 byte value (mean 100, the size of tests/spark/datasets.py's ``value_of``: its text, then
random bytes for the second half, ~2x compressible), timestamp T0 + i, no headers, produced in
chunks each with another codec (none, gzip, snappy, lz4, zstd; ``--codec`` picks one), then every
segment but the active one of each partition is uploaded and deleted locally. Measured in the same
run, each after one untimed warm-up, runs alternating:

* subject: ``spark.read.format("strata").load()`` then ``agg(count(*), sum(length(value)),
  max(offset))`` (every row and every value byte touched; count and value bytes checked), on a
  ``local[2]`` SparkSession: remote segments are read straight from the store by the executors,
  the active segments from the broker. Timed from ``load()`` (planning included) to the result.
* baseline 1 (target: subject rows/s >= 3x): one confluent-kafka consumer, all partitions assigned
  from offset 0, ``consume(10000, 1.0)`` until it has every record, ``len(msg.value())`` of each;
  the broker serves the remote tier (fetch.max.bytes 50 MiB, max.partition.fetch.bytes 8 MiB).
* baseline 2 (target, issue 31: subject rows/s >= 0.9x): a synthetic Python data source of exactly the same
  schema (``strata.spark.columnar.arrow_schema(False)``) yielding the same number of rows with the
  same value sizes as Arrow batches of 65,536 rows built from numpy buffers without copying the
  values, in as many input partitions as the subject's plan; the same aggregation. What Spark
  costs for a Python source that does no I/O and no decoding.
* info: the subject with ``directRemoteReads=false`` (every offset fetched from the broker by the
  executors); the synthetic source in 2 input partitions per core, and a prototype of a coalescing
  planner (Strata's own plan and ``read_slice``, the slices dealt into 2 tasks per core): what
  fewer, larger tasks buy; the plan (``strata.spark.explain``): input partitions, remote vs
  broker offsets; Spark's cost of the query over no rows.

Then (unless ``--no-profile``) the read path in this process on one core, without Spark:
``strata.spark.reading.read_slice`` over every slice of the plan per tier, the remote slices' plain
store reads and ``decode_batches`` over those bytes apart, a cProfile of a ``read_slice`` pass, the
decoder's steps over three remote segments, and the synthetic generator alone: where a task's
time goes.

The session is the tests' quiet ``local[2]`` one (strata.spark.local_session's settings) but with
the JVM's default JIT: the tests stop at C1 (``-XX:TieredStopAtLevel=1``) to start faster, which
costs a long read about twice the JVM CPU per row (``--c1-jit`` measures that setting).

MB/s = 10^6 value bytes/s (the house unit; rows/s are printed below the table, the same ratios).
CPU s = broker process / the client side (for Spark rows: the JVM and its Python workers; for the
consumer: this process, librdkafka's threads included).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import report as bench_report  # noqa: E402
from report import MiB, Result, run_and_save, summarize  # noqa: E402
from tiered_bench import (  # noqa: E402
    Broker,
    _own_cpu_s,
    _proc_cpu_s,
    bench_consumer,
    create_topics,
    seaweedfs,
    tiered_props,
)

TOPIC = "spark-bench"
SYNTHETIC_FORMAT = "strata_bench_synthetic"
GROUPED_FORMAT = "strata_bench_grouped"
ARROW_ROWS = 65536  # the columnar decoder's DEFAULT_MAX_ROWS
RUN_TIMEOUT_S = 300.0
OFFLOAD_TIMEOUT_S = 300.0
T0 = 1_700_000_000_000
RANDOM_POOL_BYTES = 64 * MiB


@dataclass(frozen=True)
class BenchConfig:
    records: int = 2_000_000
    partitions: int = 3
    segment_mib: int = 8
    codec: str = "mixed"  # one codec per produced chunk, in turn (tests/spark/datasets.CODECS), or one codec
    reps: int = 3
    consumer_target: float = 3.0
    synthetic_target: float = 0.9
    s3: bool = False
    profile: bool = True
    c1_jit: bool = False  # the tests' -XX:TieredStopAtLevel=1

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(records=300_000, segment_mib=2, reps=2)


def _log(msg: str) -> None:
    print(msg, flush=True)


def value_bytes_of(records: int) -> int:
    """Total value bytes of records 0..records-1 (``value_of(i)`` is 40 + (i * 7919) % 121 bytes)."""
    import numpy as np

    i = np.arange(records, dtype=np.int64)
    return int((40 + (i * 7919) % 121).sum())


# -- the topic --------------------------------------------------------------------------------------


def produce(bootstrap: str, cfg: BenchConfig) -> float:
    """Records 0..N-1 to partition i % partitions; a producer per codec, one chunk each in turn, flushed.

    Value i has ``value_of(i)``'s size: the first half its text, the rest random bytes (about 2x
    compressible, as JSON-like payloads are; ``value_of`` alone compresses ~10x)."""
    from confluent_kafka import Producer
    from tests.spark.datasets import CODECS, value_of

    codecs = CODECS if cfg.codec == "mixed" else (cfg.codec,)
    producers = {c: Producer({"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False,
                              "compression.type": c, "linger.ms": 20, "batch.size": 1 * MiB, "log_level": 3,
                              "queue.buffering.max.messages": 1_000_000,
                              "queue.buffering.max.kbytes": 512 * 1024}) for c in codecs}
    errors: list[Any] = []

    def failed(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    chunk = max(10_000, cfg.records // 20)
    parts = cfg.partitions
    noise = os.urandom(RANDOM_POOL_BYTES)  # never repeats within a compression window
    at = 0
    started = time.perf_counter()
    try:
        for n, lo in enumerate(range(0, cfg.records, chunk)):
            producer = producers[codecs[n % len(codecs)]]
            produce_one = producer.produce
            for i in range(lo, min(cfg.records, lo + chunk)):
                text = value_of(i)
                half = len(text) // 2
                rest = len(text) - half
                if at + rest > RANDOM_POOL_BYTES:
                    at = 0
                value = text[:half] + noise[at:at + rest]
                at += rest
                while True:
                    try:
                        produce_one(TOPIC, value, b"k%d" % i, partition=i % parts, on_delivery=failed,
                                    timestamp=T0 + i)
                        break
                    except BufferError:
                        producer.poll(0.01)
            if producer.flush(RUN_TIMEOUT_S):
                raise RuntimeError("records still queued after the flush")
    finally:
        for producer in producers.values():
            producer.flush(10)
    if errors:
        raise RuntimeError(f"produce: {len(errors)} errors, e.g. {errors[:3]}")
    return time.perf_counter() - started


def wait_offloaded(broker: Broker, partitions: int, timeout_s: float = OFFLOAD_TIMEOUT_S) -> float:
    """Until each partition holds only its active segment locally (the rest uploaded, then deleted)."""
    started = time.monotonic()
    while True:
        logs = [broker.partition_logs(TOPIC, p) for p in range(partitions)]
        if all(len(ls) == 1 and int(ls[0].name.split(".")[0]) > 0 for ls in logs):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"{TOPIC} not offloaded after {timeout_s:.0f}s: local segments "
                               f"{[len(ls) for ls in logs]}\n" + broker.log_text()[-3000:])
        time.sleep(0.2)


# -- CPU of a process tree ------------------------------------------------------------------------------


def _tree_cpu(root: int) -> dict[int, tuple[str, float, float]]:
    """pid -> (command, own CPU s, CPU s of its reaped children) for ``root`` and its descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[str, float, float]] = {}
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            text = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        f = text.rsplit(")", 1)[1].split()
        stats[int(name)] = (comm, (int(f[11]) + int(f[12])) / tick, (int(f[13]) + int(f[14])) / tick)
        children.setdefault(int(f[1]), []).append(int(name))
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[pid] = stats[pid]
            todo += children.get(pid, [])
    return out


def _split_cpu(root: int, before: dict[int, tuple[str, float, float]],
               after: dict[int, tuple[str, float, float]]) -> tuple[float, float]:
    """(JVM CPU s, Python workers' CPU s) spent between two ``_tree_cpu`` snapshots of the JVM's tree."""
    jvm = py = 0.0
    for pid, (_, own, reaped) in after.items():
        _, own0, reaped0 = before.get(pid, ("", 0.0, 0.0))
        if pid == root:
            jvm += own - own0
            py += reaped - reaped0  # Python workers that exited
        else:
            py += (own - own0) + (reaped - reaped0)
    return jvm, py


# -- the synthetic source -------------------------------------------------------------------------------


def synthetic() -> tuple[type, Callable[[int, int, int, str], Iterator[Any]]]:
    """(a Python data source of Spark's Kafka schema, its batch generator). Defined in a function so
    that cloudpickle ships them by value: Spark's Python workers cannot import this file."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    def batches(partition: int, lo: int, hi: int, topic: str) -> Iterator[Any]:
        """Rows lo..hi-1 in Arrow batches of 65,536: value i has value_of(i)'s size (bytes from one pool
        shared by every batch, not copied), key the 8-byte big-endian i; numpy buffers wrapped as they are."""
        import numpy as np
        import pyarrow as pa

        from strata.spark.columnar import arrow_schema

        schema = arrow_schema(False)
        # The value bytes, made once per Python worker (workers are reused; a 10 MB draw per task
        # would cost ~20 ms of every task): 1 MiB of random bytes, tiled.
        cache = sys.modules.get(SYNTHETIC_FORMAT)
        if cache is None:
            cache = sys.modules[SYNTHETIC_FORMAT] = types.ModuleType(SYNTHETIC_FORMAT)
            block = np.random.default_rng(405).integers(0, 256, MiB, np.uint8)
            cache.pool = pa.py_buffer(np.tile(block, -(-(ARROW_ROWS * 160 + 64) // MiB)))
        pool = cache.pool
        topic_scalar = pa.scalar(topic, pa.string())
        key_offsets = pa.py_buffer(np.arange(0, (ARROW_ROWS + 1) * 8, 8, dtype=np.int32))
        for start in range(lo, hi, ARROW_ROWS):
            n = min(ARROW_ROWS, hi - start)
            offs = np.arange(start, start + n, dtype=np.int64)
            value_offsets = np.zeros(n + 1, np.int32)
            np.cumsum(40 + (offs * 7919) % 121, out=value_offsets[1:])
            columns = [
                pa.Array.from_buffers(pa.binary(), n, [None, key_offsets, pa.py_buffer(offs.astype(">i8"))]),
                pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(value_offsets), pool]),
                pa.repeat(topic_scalar, n),
                pa.array(np.full(n, partition, np.int32)),
                pa.array(offs),
                pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer((offs + T0) * 1000)]),
                pa.array(np.zeros(n, np.int32)),
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)

    class SyntheticReader(DataSourceReader):
        def __init__(self, rows: list[int], topic: str) -> None:
            self.rows = rows
            self.topic = topic

        def partitions(self) -> list[InputPartition]:
            out, lo = [], 0
            for i, n in enumerate(self.rows):
                out.append(InputPartition((i, lo, lo + n)))
                lo += n
            return out

        def read(self, partition: InputPartition) -> Iterator[Any]:
            i, lo, hi = partition.value
            return batches(i % 3, lo, hi, self.topic)

    class SyntheticKafkaSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return SYNTHETIC_FORMAT

        def schema(self) -> str:
            return ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                    "timestampType int")

        def reader(self, schema: Any) -> DataSourceReader:
            return SyntheticReader(json.loads(self.options["rows"]), self.options.get("topic", TOPIC))

    return SyntheticKafkaSource, batches


def grouped_strata() -> type:
    """A prototype of a coalescing planner, not Strata's: Strata's own plan (``plan_batch``) and task
    code (``read_slice``), the plan's slices dealt in order into ``groups`` input partitions of about
    equal offsets, each read one slice after another. What fewer, larger tasks would give the
    subject (the planner now makes one input partition per remote segment)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class GroupedReader(DataSourceReader):
        def __init__(self, options: dict[str, str]) -> None:
            self.options = options

        def partitions(self) -> list[InputPartition]:
            from strata.spark.driver import plan_batch
            from strata.spark.options import parse_source_options

            groups = int(self.options["groups"])
            plan = plan_batch(parse_source_options({k: v for k, v in self.options.items() if k != "groups"}))
            sizes = [s.end_offset - s.start_offset for s in plan.slices]
            total = max(1, sum(sizes))
            out: list[list[Any]] = [[] for _ in range(groups)]
            done = 0
            for s, size in zip(plan.slices, sizes, strict=True):
                out[min(groups - 1, done * groups // total)].append(s)
                done += size
            return [InputPartition(g) for g in out if g]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            from strata.spark.reading import read_slice

            for s in partition.value:
                yield from read_slice(s)

    class GroupedStrataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return GROUPED_FORMAT

        def schema(self) -> str:
            return ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                    "timestampType int")

        def reader(self, schema: Any) -> DataSourceReader:
            return GroupedReader(dict(self.options))

    return GroupedStrataSource


def rows_per_input_partition(plan: Any, records: int) -> list[int]:
    """Rows of each input partition of ``plan`` (pieces of a split segment share its offsets evenly; packed
    slices add up), scaled to ``records`` in total."""
    from strata.spark.planning import RemoteSlice

    pieces: dict[Any, int] = {}
    for s in plan.slices:
        if isinstance(s, RemoteSlice):
            pieces[s.segment.remote_log_segment_id] = pieces.get(s.segment.remote_log_segment_id, 0) + 1

    def size(s: Any) -> float:
        return (s.end_offset - s.start_offset) / (pieces[s.segment.remote_log_segment_id]
                                                  if isinstance(s, RemoteSlice) else 1)
    sizes = [sum(size(s) for s in getattr(i, "slices", (i,))) for i in plan.inputs]  # a SliceGroup: its slices
    total = sum(sizes) or 1
    rows = [int(records * x / total) for x in sizes]
    rows[-1] += records - sum(rows)
    return rows


# -- the runs ------------------------------------------------------------------------------------------


class Runner:
    """One SparkSession (local[2]) and the timed runs of each kind."""

    def __init__(self, records: int, value_bytes: int, c1_jit: bool) -> None:
        self.records = records
        self.value_bytes = value_bytes
        started = time.perf_counter()
        self.spark = spark_session(c1_jit)
        self.session_s = time.perf_counter() - started
        source, self.generate = synthetic()
        if __name__ != "__main__":  # imported by bench/run.py: ship this module's code by value as well
            from pyspark import cloudpickle

            cloudpickle.register_pickle_by_value(sys.modules[__name__])
        self.spark.dataSource.register(source)
        self.spark.dataSource.register(grouped_strata())
        self.jvm_pid = int(self.spark._jvm.java.lang.ProcessHandle.current().pid())  # noqa: SLF001
        self.cpu_split: dict[str, list[tuple[float, float]]] = {}
        self.store_pid: int | None = None  # SeaweedFS's, while the s3 backend runs: it shares the cores
        self.store_cpu: dict[str, list[float]] = {}

    def close(self) -> None:
        self.spark.stop()

    def spark_read(self, fmt: str, options: dict[str, str], result: Result | None, broker: Broker | None) -> float:
        from pyspark.sql import functions as F

        before = _tree_cpu(self.jvm_pid)
        broker_cpu0 = _proc_cpu_s(broker.pid) if broker is not None else 0.0
        store_cpu0 = _proc_cpu_s(self.store_pid) if self.store_pid is not None else None
        started = time.perf_counter()
        df = self.spark.read.format(fmt).options(**options).load()
        row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("value_bytes"),
                     F.max("offset").alias("max_offset")).collect()[0]
        elapsed = time.perf_counter() - started
        jvm, py = _split_cpu(self.jvm_pid, before, _tree_cpu(self.jvm_pid))
        if row["n"] != self.records or row["value_bytes"] != self.value_bytes:
            raise RuntimeError(f"{fmt} read {row['n']} rows, {row['value_bytes']} value bytes; expected "
                               f"{self.records}, {self.value_bytes}")
        if result is not None:
            result.samples_s.append(elapsed)
            result.server_cpu_s.append(_proc_cpu_s(broker.pid) - broker_cpu0 if broker is not None else 0.0)
            result.client_cpu_s.append(jvm + py)
            self.cpu_split.setdefault(result.name, []).append((jvm, py))
            if store_cpu0 is not None and self.store_pid is not None:
                self.store_cpu.setdefault(result.name, []).append(_proc_cpu_s(self.store_pid) - store_cpu0)
        return elapsed


    def overhead(self, partitions: int, reps: int = 3) -> float:
        """Median seconds of the synthetic source with ``partitions`` empty input partitions, same query."""
        from pyspark.sql import functions as F

        times = []
        for _ in range(reps + 1):
            started = time.perf_counter()
            df = self.spark.read.format(SYNTHETIC_FORMAT).options(rows=json.dumps([0] * partitions)).load()
            df.agg(F.count("*"), F.sum(F.length("value")), F.max("offset")).collect()
            times.append(time.perf_counter() - started)
        return statistics.median(times[1:])


def consume(bootstrap: str, partitions: int, records: int, value_bytes: int) -> float:
    """One confluent-kafka consumer, every partition from offset 0, until ``records`` records are in."""
    from confluent_kafka import TopicPartition

    c = bench_consumer(bootstrap, "spark-bench")
    try:
        c.list_topics(TOPIC, timeout=10)
        started = time.perf_counter()
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        got = nbytes = 0
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while got < records:
            msgs = c.consume(10_000, 1.0)
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"consume {TOPIC}: {m.error()}")
                nbytes += len(m.value())
            got += len(msgs)
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumed {got} of {records} records in {RUN_TIMEOUT_S}s")
        elapsed = time.perf_counter() - started
    finally:
        c.close()
    if got != records or nbytes != value_bytes:
        raise RuntimeError(f"consumed {got} records, {nbytes} value bytes; expected {records}, {value_bytes}")
    return elapsed


def strata_options(bootstrap: str, backend: str, **extra: str) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC, **extra}
    if backend == "s3":  # the store's address comes from the broker (DescribeConfigs), the keys from the query
        from tests.support.seaweedfs import ACCESS_KEY, SECRET_KEY

        opts.update({"rsm.config.aws.access.key.id": ACCESS_KEY, "rsm.config.aws.secret.access.key": SECRET_KEY})
    return opts


def run_backend(work: Path, backend: str, cfg: BenchConfig, runner: Runner, server: Any | None) -> dict:
    """Produce, tier, then every measured run against one broker."""
    from strata.spark import explain
    from strata.spark.driver import plan_batch
    from strata.spark.options import parse_source_options

    props = tiered_props(backend, work / f"broker-{backend}", server,
                         **{"rlmm.config.remote.log.metadata.topic.num.partitions": "5"})
    broker = Broker(work / f"broker-{backend}", props)
    broker.start()
    info: dict[str, Any] = {"backend": backend}
    runner.store_pid = server.proc.pid if backend == "s3" and server is not None else None
    try:
        create_topics(broker.bootstrap, {TOPIC: {"remote.storage.enable": "true", "retention.ms": "-1",
                                                 "segment.bytes": str(cfg.segment_mib * MiB),
                                                 "local.retention.bytes": "1"}}, cfg.partitions)
        info["produce_s"] = produce(broker.bootstrap, cfg)
        info["offload_wait_s"] = wait_offloaded(broker, cfg.partitions)
        _log(f"  {backend}: produced {cfg.records} records ({runner.value_bytes / 1e6:.0f} MB of values, codec "
             f"{cfg.codec}) in {info['produce_s']:.1f} s; tiered {info['offload_wait_s']:.1f} s after the last ack")
        options = strata_options(broker.bootstrap, backend)
        started = time.perf_counter()
        summary = explain(options)
        info["explain_s"] = time.perf_counter() - started
        info["plan"] = {**asdict(summary), "text": str(summary)}
        plan = plan_batch(parse_source_options(options))
        rows = rows_per_input_partition(plan, cfg.records)
        _log(f"  {backend}: plan {summary} (planned in {info['explain_s']:.2f} s, in this process)")

        consumer = Result(f"{backend}: 1 confluent-kafka consumer", "baseline", nbytes=runner.value_bytes,
                          note=f"{cfg.partitions} partitions assigned, via the broker")
        subject = Result(f"{backend}: spark format(strata)", "subject", nbytes=runner.value_bytes,
                         baseline=consumer.name, note=f"{summary.input_partitions} input partitions, local[2]")
        via_broker = Result(f"{backend}: spark, directRemoteReads=false", "subject", nbytes=runner.value_bytes,
                            baseline=consumer.name, informational=True, note="every offset from the broker")
        synth = Result(f"{backend}: synthetic Arrow source", "baseline", nbytes=runner.value_bytes,
                       note=f"{len(rows)} input partitions, no I/O, no decoding")
        vs_synth = Result(f"{backend}: spark format(strata), vs synth", "subject", nbytes=runner.value_bytes,
                          baseline=synth.name, note="the subject's runs again")
        vs_synth.samples_s = subject.samples_s  # the same runs, a second ratio
        vs_synth.server_cpu_s, vs_synth.client_cpu_s = subject.server_cpu_s, subject.client_cpu_s

        few = 2 * int(runner.spark.sparkContext.defaultParallelism)
        synth_few = Result(f"{backend}: synthetic, {few} input partitions", "subject", nbytes=runner.value_bytes,
                           baseline=synth.name, informational=True, note="what fewer, larger tasks buy")
        synth_opts = {"rows": json.dumps(rows), "topic": TOPIC}
        few_rows = [cfg.records // few] * few
        few_rows[-1] += cfg.records - sum(few_rows)
        few_opts = {"rows": json.dumps(few_rows), "topic": TOPIC}
        grouped = Result(f"{backend}: spark, plan in {few} tasks (proto)", "subject", nbytes=runner.value_bytes,
                         baseline=consumer.name, informational=True,
                         note="the plan's slices grouped: a coalescing planner")
        grouped_opts = {**options, "groups": str(few)}
        runs: list[tuple[Result, Callable[[Result | None], float]]] = [
            (subject, lambda r: runner.spark_read("strata", options, r, broker)),
            (consumer, lambda r: _consume_run(broker, cfg, runner, r)),
            (synth, lambda r: runner.spark_read(SYNTHETIC_FORMAT, synth_opts, r, broker)),
            (via_broker, lambda r: runner.spark_read("strata", {**options, "directRemoteReads": "false"}, r,
                                                     broker)),
            (synth_few, lambda r: runner.spark_read(SYNTHETIC_FORMAT, few_opts, r, broker)),
            (grouped, lambda r: runner.spark_read(GROUPED_FORMAT, grouped_opts, r, broker)),
        ]
        warmup = {}
        for result, fn in runs:
            warmup[result.name] = fn(None)
        info["warmup_s"] = warmup
        for rep in range(cfg.reps):
            order = runs[rep % len(runs):] + runs[:rep % len(runs)]
            for result, fn in order:
                fn(result)
            _log(f"  {backend} rep {rep + 1}/{cfg.reps}: spark "
                 f"{cfg.records / subject.samples_s[-1] / 1e6:.2f} M rows/s, "
                 f"consumer {cfg.records / consumer.samples_s[-1] / 1e6:.2f}, synthetic "
                 f"{cfg.records / synth.samples_s[-1] / 1e6:.2f} ({few} partitions: "
                 f"{cfg.records / synth_few.samples_s[-1] / 1e6:.2f}), via broker "
                 f"{cfg.records / via_broker.samples_s[-1] / 1e6:.2f}, plan in {few} tasks "
                 f"{cfg.records / grouped.samples_s[-1] / 1e6:.2f} (load {os.getloadavg()[0]:.2f})")
        info["results"] = (summarize([consumer, subject, via_broker, grouped], cfg.consumer_target)
                           + summarize([synth, vs_synth, synth_few], cfg.synthetic_target))
        info["rows_per_s"] = {name: {"median": cfg.records / statistics.median(r.samples_s),
                                     "best": cfg.records / min(r.samples_s)}
                              for name, r in (("spark", subject), ("consumer", consumer), ("synthetic", synth),
                                              ("spark_via_broker", via_broker), ("synthetic_few", synth_few),
                                              ("spark_grouped", grouped))}
        info["cpu_split_s"] = {name: runner.cpu_split.get(r.name, []) for name, r in
                               (("spark", subject), ("synthetic", synth), ("spark_via_broker", via_broker),
                                ("synthetic_few", synth_few), ("spark_grouped", grouped))}
        info["store_cpu_s"] = {name: runner.store_cpu.get(r.name, []) for name, r in
                               (("spark", subject), ("synthetic", synth))}
        info["spark_overhead_s"] = {"1": runner.overhead(1), str(len(rows)): runner.overhead(len(rows))}
        if cfg.profile:
            _log(f"  {backend}: the read path in this process (one core, no Spark)")
            info["profile"] = profile_read(plan, runner, cfg)
        info["warnings"] = [line for line in broker.log_text().splitlines()
                            if " WARNING " in line or " ERROR " in line][-10:]
    finally:
        broker.stop()
    return info


def _consume_run(broker: Broker, cfg: BenchConfig, runner: Runner, result: Result | None) -> float:
    cpu0, mine0 = _proc_cpu_s(broker.pid), _own_cpu_s()
    elapsed = consume(broker.bootstrap, cfg.partitions, cfg.records, runner.value_bytes)
    if result is not None:
        result.samples_s.append(elapsed)
        result.server_cpu_s.append(_proc_cpu_s(broker.pid) - cpu0)
        result.client_cpu_s.append(_own_cpu_s() - mine0)
    return elapsed


# -- the read path in this process ---------------------------------------------------------------------


def profile_read(plan: Any, runner: Runner, cfg: BenchConfig) -> dict:
    """What Spark's tasks run, one after another on this thread: ``read_slice`` over every slice of
    ``plan`` per tier; for the remote slices also their plain store reads (bytes only) and
    ``decode_batches`` over those bytes; a cProfile of one ``read_slice`` pass; the decoder's steps
    over three remote segments; the synthetic generator alone. Best of 2 each, after a warm-up."""
    import cProfile
    import io
    import pstats
    import re

    from strata.spark.columnar import decode_batches
    from strata.spark.planning import RemoteSlice
    from strata.spark.reading import read_slice

    remote = [s for s in plan.slices if isinstance(s, RemoteSlice)]
    broker = [s for s in plan.slices if not isinstance(s, RemoteSlice)]

    def best(fn: Callable[[], Any], n: int = 2) -> tuple[float, Any]:
        times, out = [], None
        for _ in range(n):
            started = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - started)
        return min(times), out

    def read_pass(slices: list[Any]) -> int:
        return sum(b.num_rows for s in slices for b in read_slice(s))

    read_pass(plan.slices)  # warm-up: the store's client, the page cache
    tiers: dict[str, dict[str, float]] = {}
    for tier, slices in (("remote", remote), ("broker", broker)):
        if slices:
            wall, rows = best(lambda slices=slices: read_pass(slices))
            tiers[tier] = {"slices": len(slices), "rows": rows, "read_slice_s": wall}
    rows = sum(t["rows"] for t in tiers.values())
    if rows != cfg.records:
        raise RuntimeError(f"read_slice over the plan gave {rows} rows, expected {cfg.records}")
    if remote:
        store_s, data = best(lambda: remote_segment_bytes(plan, len(remote)))
        decode_s, _ = best(lambda: sum(decode_batches(d, topic=s.topic, partition=s.partition,
                                                      start_offset=s.start_offset, end_offset=s.end_offset).rows
                                       for s, d in zip(remote, data, strict=True)))
        tiers["remote"].update(store_read_s=store_s, decode_s=decode_s, bytes=sum(len(d) for d in data))
    else:
        data = []
    profiler = cProfile.Profile()
    profiler.enable()
    read_pass(plan.slices)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
    hot = [" ".join(line.split()) for line in text.getvalue().splitlines() if re.match(r"\s+\d+", line)][:14]

    per_part = rows_per_input_partition(plan, cfg.records)

    def generate() -> int:
        lo = n = 0
        for i, count in enumerate(per_part):
            n += sum(b.num_rows for b in runner.generate(i % 3, lo, lo + count, TOPIC))
            lo += count
        return n

    gen_s, _ = best(generate, 3)
    return {"tiers": tiers, "rows": rows, "read_s": sum(t["read_slice_s"] for t in tiers.values()),
            "profile_top": hot, "generator_s": gen_s, "decoder": decoder_stages(data[:3])}


def remote_segment_bytes(plan: Any, limit: int) -> list[bytes]:
    """The byte ranges of the first ``limit`` remote slices of ``plan``, read from the store."""
    from strata.spark.planning import RemoteSlice
    from strata.spark.remote import open_rsm

    out = []
    for s in [s for s in plan.slices if isinstance(s, RemoteSlice)][:limit]:
        assert s.settings.rsm_class is not None
        rsm = open_rsm(s.settings.rsm_class, dict(s.settings.rsm_props))
        end = None if s.end_position is None else s.end_position - 1
        chunks = []
        with rsm.fetch_log_segment(s.segment, s.start_position or 0, end) as stream:
            while chunk := stream.read(8 * MiB):
                chunks.append(chunk)
        out.append(b"".join(chunks))
    return out


DECODER_STAGES = (("decompress", "decompress (codecs)"), ("_record_bodies", "record walk (_record_bodies)"),
                  ("_decode_records", "fields (_decode_records)"), ("_assemble", "Arrow arrays (_assemble)"))


def decoder_stages(segments: list[bytes]) -> dict:
    """``decode_batches`` over whole remote segments (best of 3), with the time spent in the columnar
    module's steps (found by name; a step that is not there any more is left out): the rest is the
    header walk, CRCs, joining sections, slicing."""
    import numpy as np

    import strata.spark.columnar as col
    from strata.protocol.records import iter_batches

    spent: dict[str, float] = {}

    def timer(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - started
        return timed

    patched = []
    for name, _ in DECODER_STAGES:
        owner = col.ColumnarDecoder if name == "_assemble" else col
        original = owner.__dict__.get(name)
        if callable(original):
            patched.append((owner, name, original))
            setattr(owner, name, timer(name, original))
    try:
        totals = dict.fromkeys(["decode_batches", *(n for n, _ in DECODER_STAGES)], 0.0)
        rows = 0
        per_batch: list[int] = []
        for data in segments:
            per_batch += [h.records_count for _, h in iter_batches(memoryview(data), verify_crc=False)]
            runs = []
            for _ in range(3):
                spent.clear()
                started = time.perf_counter()
                result = col.decode_batches(data, topic=TOPIC, partition=0)
                runs.append((time.perf_counter() - started, dict(spent), result.rows))
            total, steps, n = min(runs, key=lambda r: r[0])
            totals["decode_batches"] += total
            for k, v in steps.items():
                totals[k] += v
            rows += n
    finally:
        for owner, name, original in patched:
            setattr(owner, name, original)
    return {"segments": len(segments), "rows": rows, "kafka_batches": len(per_batch),
            "records_per_batch_median": float(np.median(per_batch)) if per_batch else 0.0,
            "bytes": sum(len(d) for d in segments), "stages_s": totals,
            "found": [n for _, n, _ in patched]}


# -- the benchmark ---------------------------------------------------------------------------------------


def spark_session(c1_jit: bool) -> Any:
    """The tests' quiet local[2] session (strata.spark.local_session's settings), with the JVM's default
    JIT unless ``c1_jit``: the tests stop at C1 (-XX:TieredStopAtLevel=1) to start faster, which
    about doubles the JVM's CPU per row of a long read."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import strata.spark

    java_options = ["-XX:TieredStopAtLevel=1"] if c1_jit else []
    for log4j in (Path(strata.spark.__file__).with_name("log4j2-quiet.properties"),
                  ROOT / "tests" / "spark" / "log4j2-quiet.properties"):
        if log4j.exists():
            java_options.append(f"-Dlog4j2.configurationFile=file:{log4j}")
            break
    builder = (SparkSession.builder.master("local[2]").appName("strata-spark-bench")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.log.level", "ERROR"))
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", " ".join(java_options))
    session = builder.getOrCreate()
    strata.spark.register(session)
    return session


def environment() -> dict:
    import confluent_kafka
    import numpy
    import pyarrow
    import pyspark

    return bench_report.environment(pyspark=pyspark.__version__, pyarrow=pyarrow.__version__, numpy=numpy.__version__,
                                    confluent_kafka=confluent_kafka.__version__,
                                    librdkafka=confluent_kafka.libversion()[0],
                                    loadavg_at_start=" ".join(f"{x:.2f}" for x in os.getloadavg()))


def run(work: Path, cfg: BenchConfig) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    report: dict[str, Any] = {"config": asdict(cfg), "environment": environment()}
    value_bytes = value_bytes_of(cfg.records)
    report["value_bytes"] = value_bytes
    runner = None
    try:
        if not cfg.s3:
            _log("s3: skipped (no --s3)")
        with seaweedfs(work, cfg.s3) as server:
            report["s3"] = server is not None
            runner = Runner(cfg.records, value_bytes, cfg.c1_jit)
            report["spark_session_s"] = runner.session_s
            _log(f"spark: local[2] session up in {runner.session_s:.1f} s (JVM pid {runner.jvm_pid}, "
                 f"{'C1 JIT only' if cfg.c1_jit else 'default JIT'})")
            backends = ["local"] + (["s3"] if server is not None else [])
            report["backends"] = [run_backend(work / b, b, cfg, runner, server) for b in backends]
    finally:
        if runner is not None:
            runner.close()
        shutil.rmtree(work, ignore_errors=True)
    return report


def format_summary(report: dict) -> str:
    records = report["config"]["records"]
    lines = []
    for info in report["backends"]:
        b = info["backend"]
        r = info["rows_per_s"]
        spark, consumer, synth = r["spark"]["median"], r["consumer"]["median"], r["synthetic"]["median"]
        lines.append(f"{b}: rows/s, median (best) of {len(info['results'][0]['samples_s'])} runs of {records:,} "
                     f"records:")
        for name, label in (("spark", "spark format(strata)"), ("consumer", "1 confluent-kafka consumer"),
                            ("synthetic", "synthetic Arrow source"),
                            ("spark_via_broker", "spark, directRemoteReads=false"),
                            ("synthetic_few", "synthetic, 2 per core partitions"),
                            ("spark_grouped", "spark, plan in 2 per core tasks*")):
            lines.append(f"  {label:<32} {r[name]['median'] / 1e6:6.2f} M/s ({r[name]['best'] / 1e6:.2f})")
        lines.append("  * a prototype of a coalescing planner in this benchmark: Strata's plan and read_slice, the "
                     "slices dealt into fewer tasks")
        lines.append(f"  spark / consumer {spark / consumer:.2f} (target >= {report['config']['consumer_target']}), "
                     f"spark / synthetic {spark / synth:.2f} (target >= {report['config']['synthetic_target']}), "
                     f"direct reads / via broker {spark / r['spark_via_broker']['median']:.2f}")
        lines.append(f"  plan: {info['plan']['text']}; planned in {info['explain_s']:.2f} s in this process")
        over = info["spark_overhead_s"]
        n = max(over, key=int)
        subject_s = records / spark
        lines.append(f"  Spark's cost of a query with no rows (synthetic source, same aggregation): 1 input partition "
                     f"{over['1']:.2f} s, {n} input partitions {over[n]:.2f} s (= {100 * over[n] / subject_s:.0f}% of "
                     f"a median subject run, {(over[n] - over['1']) / max(int(n) - 1, 1) * 1e3:.0f} ms per extra "
                     f"task on local[2])")
        for name, splits in info["cpu_split_s"].items():
            if splits:
                jvm = statistics.median(s[0] for s in splits)
                py = statistics.median(s[1] for s in splits)
                lines.append(f"  CPU s per run, {name}: JVM {jvm:.2f}, Python workers {py:.2f}")
        budget = cpu_budget(info, records)
        if budget:
            lines.append(budget)
        p = info.get("profile")
        if p:
            lines.append(f"  in this process, one core, no Spark: read_slice over the plan {p['read_s']:.2f} s "
                         f"({records / p['read_s'] / 1e6:.2f} M rows/s); the synthetic generator alone "
                         f"{p['generator_s']:.3f} s ({records / p['generator_s'] / 1e6:.1f} M rows/s)")
            for tier, t in p["tiers"].items():
                line = (f"    {tier}: {t['slices']:.0f} slices, {t['rows']:,.0f} rows, read_slice "
                        f"{t['read_slice_s']:.2f} s ({t['rows'] / t['read_slice_s'] / 1e6:.2f} M rows/s)")
                if "decode_s" in t:
                    line += (f"; apart: store reads {t['store_read_s']:.2f} s ({t['bytes'] / MiB:.0f} MiB, "
                             f"{t['bytes'] / t['store_read_s'] / 1e6:.0f} MB/s), decode_batches of those bytes "
                             f"{t['decode_s']:.2f} s ({t['rows'] / t['decode_s'] / 1e6:.2f} M rows/s)")
                lines.append(line)
            d = p.get("decoder")
            if d and d["rows"]:
                total = d["stages_s"]["decode_batches"]
                steps = [(label, d["stages_s"][name]) for name, label in DECODER_STAGES if name in d["found"]]
                steps.append(("the rest (header walk, CRCs, joins)", total - sum(v for _, v in steps)))
                lines.append(f"    decoder stages over {d['segments']} remote segments ({d['bytes'] / MiB:.1f} MiB, "
                             f"{d['rows']:,} rows in {d['kafka_batches']} Kafka batches, median "
                             f"{d['records_per_batch_median']:.0f} records each): decode_batches {total * 1e3:.0f} ms "
                             f"({d['rows'] / total / 1e6:.2f} M rows/s); its steps:")
                lines.append("      " + ", ".join(f"{k} {v * 1e3:.0f} ms ({100 * v / total:.0f}%)" for k, v in steps))
            lines.append("    cProfile of one pass, top functions by own time (ncalls tottime percall cumtime percall "
                         "where):")
            lines += [f"      {line}"[:170] for line in p["profile_top"]]
        for w in info.get("warnings", []):
            lines.append(f"  broker {b}: {w[:200]}")
    return "\n".join(lines)


def cpu_budget(info: dict, records: int) -> str | None:
    """The ratio to the synthetic source that CPU allows, when both runs keep the cores busy.

    Every process's CPU counts (Spark's JVM, its Python workers and, for s3, SeaweedFS on the same cores), so
    the bound is synthetic CPU-s / subject CPU-s. The codecs' share is ``decompress`` of the in-process
    decoder profile, scaled to the run's rows: the bound for a source whose only work beyond the synthetic's
    were inflating the batches it reads.
    """
    med = statistics.median
    splits = info["cpu_split_s"]
    if not splits.get("spark") or not splits.get("synthetic"):
        return None
    store = info.get("store_cpu_s", {})
    cpu = {name: med(sum(s) for s in splits[name]) + (med(store[name]) if store.get(name) else 0.0)
           for name in ("spark", "synthetic")}
    walls = {name: records / info["rows_per_s"][name]["median"] for name in ("spark", "synthetic")}
    line = (f"  CPU s per run, all processes{' (SeaweedFS included)' if store.get('spark') else ''}: spark "
            f"{cpu['spark']:.2f}, synthetic {cpu['synthetic']:.2f}; busy cores {cpu['spark'] / walls['spark']:.2f} vs "
            f"{cpu['synthetic'] / walls['synthetic']:.2f}; so CPU allows spark / synthetic "
            f"{cpu['synthetic'] / cpu['spark']:.2f}")
    d = (info.get("profile") or {}).get("decoder")
    codecs = d["stages_s"]["decompress"] / d["rows"] * records if d and d["rows"] and "decompress" in d["found"] else 0
    if codecs >= 0.005:  # compressed batches
        line += (f"; the codecs alone take {codecs:.2f} CPU-s of the rows' batches (in-process profile, scaled), "
                 f"which caps it at {cpu['synthetic'] / (cpu['synthetic'] + codecs):.2f}")
    return line


NOTES = """\
notes: every Spark run is timed from load() (the plan, made in a Python planner worker, included) to
       the aggregate's result; local[2]: two tasks at a time on this 2-core machine, which also runs
       the broker (idle during direct remote reads, serving the active segments), SeaweedFS (s3) and
       anything else running meanwhile (see loadavg). The consumer is one process with librdkafka's
       threads; the broker serves its fetches of the remote tier. The synthetic source yields what
       the decoder yields (same schema, rows, value sizes, Arrow batch size, input partitions) from
       numpy buffers, so subject / synthetic is the share of Spark's ceiling for a Python source
       that the read path keeps. Ratio = median of the subject / median of its baseline."""


def print_report(report: dict) -> None:
    print()
    print("environment: " + ", ".join(f"{k}={v}" for k, v in report["environment"].items()))
    print()
    print("Spark read of a tiered topic (targets: vs one consumer >= 3, vs a synthetic Arrow source >= 0.9)")
    print(bench_report.format_table([row for info in report["backends"] for row in info["results"]]))
    print()
    print(format_summary(report))
    if not report.get("s3") and report["config"]["s3"]:
        print("s3 rows: none (SeaweedFS not started, see above)")
    print()
    print(NOTES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300k records, 2 MiB segments, 2 reps")
    parser.add_argument("--records", type=int, help="records produced (default 2,000,000)")
    parser.add_argument("--reps", type=int, help="timed runs of each kind (after one warm-up)")
    parser.add_argument("--segment-mib", type=int, help="segment.bytes of the topic, in MiB")
    parser.add_argument("--codec", choices=["mixed", "none", "gzip", "snappy", "lz4", "zstd"],
                        help="compression of the produced batches (mixed: each chunk another codec)")
    parser.add_argument("--s3", action="store_true", help="also the s3 backend on SeaweedFS")
    parser.add_argument("--no-profile", action="store_true", help="skip the in-process read path profile")
    parser.add_argument("--c1-jit", action="store_true",
                        help="the tests' JVM flag -XX:TieredStopAtLevel=1 (faster start, slower long reads)")
    parser.add_argument("--dir", type=Path, default=OUT / "work" / "spark", help="scratch directory (deleted)")
    parser.add_argument("--json", type=Path, default=OUT / "spark_bench.json", help="where to write results")
    args = parser.parse_args(argv)
    cfg = BenchConfig.quick() if args.quick else BenchConfig()
    overrides = {k: v for k, v in (("records", args.records), ("reps", args.reps), ("segment_mib", args.segment_mib),
                                   ("codec", args.codec)) if v is not None}
    cfg = dataclasses.replace(cfg, s3=args.s3, profile=not args.no_profile, c1_jit=args.c1_jit, **overrides)
    return run_and_save(lambda: run(args.dir, cfg), print_report, quick=args.quick, json_path=args.json)


if __name__ == "__main__":
    sys.exit(main())
