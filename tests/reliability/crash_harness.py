"""The crash suite's harness: a tiered broker process ``kill -9``-ed again and again under load.

One :class:`CrashRun` is one broker (``local`` or ``s3`` backend) with tiering turned up (8 KiB
segments, local retention of a segment or less, remote retention on one topic, DeleteRecords on
the other, RLMM snapshots every few events, checkpoints twice a second) and a :class:`Load` of
idempotent ``acks=all`` producers: one kept across every restart (librdkafka retries its
in-flight batches against the restarted broker, which must deduplicate them from the producer
state it rebuilt) and a fresh one per cycle.

A cycle is a kill (two for a *restart* cycle) and a restart:

* a *point* cycle arms a named crash point (:mod:`strata.common.crashpoints`) at the previous
  restart, dormant; after that restart has been checked, SIGUSR1 activates it and the broker
  kills itself the N-th time the point is reached (mid-append, mid-roll, mid-copy, mid-delete,
  mid-metadata write, mid-checkpoint write);
* a *random* cycle sends SIGKILL after a random delay under load;
* a *restart* cycle does the same, then kills the restarting broker too, 0.1-1.5 s after it was
  spawned: in recovery, during the metadata load, in the first copy and retention runs, or just
  after it became ready.

After each restart the load is paused and flushed (every batch acknowledged or failed; a fatal
idempotence error or any failed delivery fails the run), the remote tier left to settle, and
:meth:`CrashRun.verify` checks what Kafka promises:

* every acknowledged record is read back exactly once at its acknowledged offset (from both
  tiers, with a real consumer); offsets are dense from the log start to the high watermark, which
  is at least every acknowledged offset + 1; no value appears twice (acknowledged or not);
* the log start moved only as far as DeleteRecords (acknowledged <= start <= requested) or
  retention allowed (the bytes kept stay >= ``retention.bytes``), and no local segment wholly
  below it stays on disk;
* the leader-epoch checkpoints and producer snapshots the kill left parse (never torn), epochs and
  start offsets increase and stay within the log;
* no two COPY_SEGMENT_FINISHED segments overlap; the offsets below the local log start are all in
  finished remote segments (nothing was deleted locally before it was uploaded); the broker's
  upload gate (ListOffsets -5) never runs ahead of the finished segments;
* the store holds exactly the finished segments' objects, all five of each, and no temp files: no
  dangling upload survives a restart; each uploaded producer snapshot holds the state at its
  segment's end;
* the broker's own view (``/v1/tiers``: the RLMM cache restored from its snapshot and the topic's
  tail) agrees with a full replay of ``__remote_log_metadata`` and with ListOffsets.

Every random choice comes from one ``random.Random(seed)``; failures name the seed and cycle.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import random
import signal
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from tests.tiered.harness import S3TieredBroker, TieredBroker

from strata.client.cluster import EARLIEST, LATEST, KafkaCluster
from strata.client.remote_metadata import complete_batches
from strata.log.checkpoints import LeaderEpochCheckpointFile
from strata.log.producer_state import decode_snapshot, read_snapshot
from strata.protocol.records import decode_batch
from strata.tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, uuid_to_str
from strata.tiered.metadata.serde import deserialize
from strata.tools.tiers import metrics_endpoint

SEGMENT_BYTES = 8192
RET_BYTES = 6 * SEGMENT_BYTES  # retention.bytes of the topic with remote retention
KEEP, RET = "crash-keep", "crash-ret"
TOPICS = {KEEP: 2, RET: 1}
META = "__remote_log_metadata"
EARLIEST_LOCAL, LATEST_TIERED = -4, -5
REQUIRED_SUFFIXES = {"log", "index", "timeindex", "snapshot", "leader_epoch_checkpoint"}
STARTED, FINISHED, DELETE_STARTED, DELETE_FINISHED = 0, 1, 2, 3
TP = tuple[str, int]

# Every crash point in src/ (as a STRATA_CRASH_POINT pattern) -> the largest N a cycle arms it with:
# it fires at a random hit 1..N after activation.
CRASH_POINTS: dict[str, int] = {
    "log.append.after_write": 40,
    "log.roll.before_new_segment": 3,
    "log.roll.before_snapshot": 3,
    "log.delete.after_rename": 3,
    "rlmm.append.after_write": 6,
    "copy.after_started": 3,
    "rsm.copy.mid": 3,
    "copy.after_upload": 3,
    "delete.after_started": 2,
    "delete.after_store_delete": 2,
    "checkpoint.before_rename/*.snapshot": 3,
    "checkpoint.before_rename/leader-epoch-checkpoint": 2,
    "checkpoint.before_rename/__remote_log_metadata-snapshot": 2,
    "checkpoint.before_rename/*-offset-checkpoint": 3,
}
RANDOM = "random"
RESTART = "restart"  # a random kill, then a second one while the broker starts again
FATAL_CONSUME = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}
POINT_TIMEOUT_S = 20.0  # a point not reached by then fails the run: the workload must reach every point
FLUSH_TIMEOUT_S = 90.0
SETTLE_TIMEOUT_S = 45.0
QUIET_S = 0.3  # three runs of the copy, expiration and retention tasks
CONSUME_TIMEOUT_S = 60.0


def broker_props() -> dict[str, str]:
    return {
        "remote.log.manager.task.interval.ms": "100",
        "remote.log.manager.task.retry.backoff.ms": "100",
        "remote.log.manager.task.retry.backoff.max.ms": "500",
        "log.retention.check.interval.ms": "100",
        "log.initial.task.delay.ms": "100",
        "log.flush.offset.checkpoint.interval.ms": "500",
        "rlmm.config.remote.log.metadata.snapshot.events": "25",
        "rlmm.config.remote.log.metadata.snapshot.interval.ms": "1000",
        "remote.fetch.max.wait.ms": "3000",
        "num.partitions": "1",
    }


def topic_configs() -> dict[str, dict[str, str]]:
    common = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "index.interval.bytes": "1024"}
    return {
        # no retention: only DeleteRecords (issued by the test) moves its log start
        KEEP: {**common, "local.retention.bytes": str(SEGMENT_BYTES), "retention.ms": "-1", "retention.bytes": "-1"},
        # size retention across both tiers: remote segments are expired as data flows in
        RET: {**common, "local.retention.bytes": "1", "retention.ms": "-1", "retention.bytes": str(RET_BYTES)},
    }


@contextlib.contextmanager
def environment(values: dict[str, str | None]) -> Iterator[None]:
    """Set (or unset, for None) variables of this process for a child about to be started."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- the load ------------------------------------------------------------------------------------


@dataclass
class Acked:
    """What the delivery reports confirmed: value -> offset per partition, and every failure."""

    offsets: dict[tuple[str, int], dict[bytes, int]] = field(default_factory=lambda: defaultdict(dict))
    produced: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    fatal: list[str] = field(default_factory=list)
    client_errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.offsets.values())


class Load:
    """Producer threads: ``resume`` starts sending, ``pause`` stops and waits for every delivery report."""

    def __init__(self, bootstrap: str, rng: random.Random, acked: Acked) -> None:
        self.bootstrap = bootstrap
        self.rng = random.Random(rng.random())
        self.acked = acked
        self._long = self._producer("L")
        self._fresh: tuple[str, Producer] | None = None
        self._seq: Counter[str] = Counter()
        self._run = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._loop, name="crash-load", daemon=True)
        self._thread.start()
        self.fresh_count = 0

    def _producer(self, tag: str) -> Producer:
        def on_error(err: KafkaError) -> None:
            with self.acked.lock:
                if err.fatal():
                    self.acked.fatal.append(f"{tag}: {err}")
                else:
                    self.acked.client_errors[err.name()] += 1

        return Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 300_000, "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 100,
            "retry.backoff.ms": 10, "retry.backoff.max.ms": 100, "topic.metadata.refresh.interval.ms": 200,
            "log_level": 0, "error_cb": on_error, "compression.type": "none",
            # a produce larger than segment.bytes is refused (RECORD_LIST_TOO_LARGE), as Kafka refuses it
            "batch.size": SEGMENT_BYTES // 2,
        })

    def _deliver(self, err: Any, msg: Any) -> None:
        with self.acked.lock:
            if err is not None:
                self.acked.failed[err.name()] += 1
                if err.fatal():
                    self.acked.fatal.append(str(err))
            else:
                self.acked.offsets[(msg.topic(), msg.partition())][msg.value()] = msg.offset()

    def _send(self, tag: str, producer: Producer, n: int) -> None:
        for _ in range(n):
            self._seq[tag] += 1
            seq = self._seq[tag]
            topic = KEEP if self.rng.random() < 0.7 else RET
            partition = self.rng.randrange(TOPICS[topic])
            value = f"{tag}:{seq}:".encode() + b"x" * self.rng.randrange(20, 200)
            try:
                producer.produce(topic, value=value, key=tag.encode(), partition=partition, on_delivery=self._deliver)
                self.acked.produced += 1
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._run.is_set():
                self._idle.set()
                self._long.poll(0.02)
                continue
            self._idle.clear()
            self._send("L", self._long, self.rng.randrange(1, 8))
            if self._fresh is not None:
                self._send(self._fresh[0], self._fresh[1], self.rng.randrange(1, 5))
            time.sleep(0.02)

    def resume(self, fresh_tag: str | None) -> None:
        assert self._idle.is_set() and self._fresh is None
        if fresh_tag is not None:
            self._fresh = (fresh_tag, self._producer(fresh_tag))
            self.fresh_count += 1
        self._run.set()

    def pause(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Stop sending, then wait until every message has its delivery report (acked or failed)."""
        self._run.clear()
        if not self._idle.wait(10):
            raise AssertionError("the load thread did not pause")
        deadline = time.monotonic() + timeout_s
        producers = [self._long] + ([self._fresh[1]] if self._fresh else [])
        for p in producers:
            left = p.flush(max(0.1, deadline - time.monotonic()))
            if left:
                raise AssertionError(f"{left} messages still undelivered after {timeout_s}s")
        self._fresh = None

    def close(self) -> None:
        self._run.clear()
        self._stop.set()
        self._thread.join(10)
        with contextlib.suppress(Exception):
            self._long.flush(5)


# -- observing the broker ----------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """One remote segment as ``__remote_log_metadata`` describes it (latest state)."""

    topic: str
    partition: int
    start: int
    end: int
    size: int
    state: int


def remote_segments(bootstrap: str) -> dict[str, Segment]:
    """Segment id -> latest state, replayed from every partition of ``__remote_log_metadata``."""
    out: dict[str, Segment] = {}
    with KafkaCluster(bootstrap, timeout_s=20) as cluster:
        md = cluster.metadata([META])
        info = md.topics.get(META)
        if info is None:
            return out
        keys = [(META, p) for p in sorted(info.partitions)]
        starts = cluster.list_offsets(dict.fromkeys(keys, EARLIEST))
        ends = cluster.list_offsets(dict.fromkeys(keys, LATEST))
        for key in keys:
            position, end = starts[key], ends[key]
            while position < end:
                fetched = cluster.fetch(META, key[1], position)
                assert fetched.error_code == 0, f"{META}-{key[1]}@{position}: error {fetched.error_code}"
                before = position
                for pos, header in complete_batches(fetched.records):
                    for record in decode_batch(fetched.records, pos).records:
                        if record.offset < position or record.value is None:
                            continue
                        _apply(out, deserialize(record.value))
                    position = max(position, header.last_offset + 1)
                assert position > before, f"no progress reading {META}-{key[1]} at {position}"
    return out


def _apply(out: dict[str, Segment], md: Any) -> None:
    if isinstance(md, RemoteLogSegmentMetadata):
        tip = md.remote_log_segment_id.topic_id_partition
        out[uuid_to_str(md.remote_log_segment_id.id)] = Segment(tip.topic, tip.partition, md.start_offset,
                                                                md.end_offset, md.segment_size_in_bytes,
                                                                int(md.state))
    elif isinstance(md, RemoteLogSegmentMetadataUpdate):
        sid = uuid_to_str(md.remote_log_segment_id.id)
        assert sid in out, f"{META} updates segment {sid} ({md.state.name}) that was never added"
        old = out[sid]
        out[sid] = Segment(old.topic, old.partition, old.start, old.end, old.size, int(md.state))


def parse_store_name(name: str) -> tuple[str, str, bool]:
    """``{start:020d}-{segmentId}.{suffix}[.tmp-{hex}]`` -> (segment id, suffix, is temp file)."""
    stem, _, rest = name.partition(".")
    suffix, _, tmp = rest.partition(".tmp-")
    return stem[21:], suffix, bool(tmp) or ".tmp-" in rest


@dataclass
class Snapshot:
    segments: dict[str, Segment]
    objects: list[tuple[str, str, bool]]
    offsets: dict[tuple[str, int], dict[str, int]]
    files: dict[tuple[str, int], list[int]]
    tiers: dict[tuple[str, int], dict[str, Any]]


@dataclass
class CycleStats:
    kind: str
    fired: bool = False
    kill_after_s: float = 0.0
    restart_s: float = 0.0
    verify_s: float = 0.0
    records_read: int = 0
    remote_records_read: int = 0


class CrashRun:
    """One broker, its load, and the cycles; ``stats`` and ``log`` for the report."""

    def __init__(self, tmp: Path, backend: str, seed: int, s3: Any = None) -> None:
        self.tmp = tmp
        self.backend = backend
        self.seed = seed
        self.rng = random.Random(seed)
        if backend == "s3":
            self.tb: TieredBroker = S3TieredBroker(tmp, s3, key_prefix=f"crash-{seed}-{os.getpid()}/",
                                                   **broker_props())
        else:
            self.tb = TieredBroker(tmp, **broker_props())
        self.acked = Acked()
        self.load: Load | None = None
        self.cycle = 0
        self.stats: list[CycleStats] = []
        self.delete_requested: dict[tuple[str, int], int] = {}
        self.delete_acked: dict[tuple[str, int], int] = {}
        self.max_remote_segments = 0
        self.deletes_seen = 0
        self._last: dict[tuple[str, int], tuple[int, int]] = {}  # (log start, HW) at the last check
        self._crash_epochs: dict[tuple[str, int], list[Any]] = {}
        self._armed: str | None = None
        self._snapshots_checked: set[str] = set()
        self._tiers_url: str | None = None
        self._s3_client: Any = None
        self._points_fired = 0

    @property
    def broker(self) -> Any:
        return self.tb.broker

    def where(self) -> str:
        return f"[{self.backend} seed={self.seed} cycle={self.cycle}]"

    # -- lifecycle -------------------------------------------------------------------------------

    def _start(self, point: str | None) -> float:
        spec = None
        if point is not None:
            spec = f"{point}:{self.rng.randint(1, CRASH_POINTS[point])}"
        started = time.monotonic()
        self._tiers_url = None
        with environment({"STRATA_CRASH_POINT": spec, "STRATA_CRASH_POINT_ARM": "signal" if spec else None}):
            self.tb.start()
        self._armed = spec
        return time.monotonic() - started

    def setup(self, first: str) -> None:
        self._start(first if first in CRASH_POINTS else None)
        admin = self.tb.admin()
        from confluent_kafka.admin import NewTopic

        cfgs = topic_configs()
        futures = admin.create_topics([NewTopic(t, n, 1, config=cfgs[t]) for t, n in TOPICS.items()],
                                      operation_timeout=10)
        for f in futures.values():
            f.result(30)
        self.load = Load(self.tb.bootstrap, self.rng, self.acked)

    def clean_restart(self) -> None:
        """SIGTERM (a clean shutdown, which must work after all the crashes), start, verify."""
        assert self.load is not None
        self.load.resume(None)
        time.sleep(0.3)
        code = self.broker.stop()
        assert code == 0, f"{self.where()} a clean shutdown after the crashes exited with {code}"
        self._start(None)
        self.load.pause()
        self.verify()

    def close(self) -> None:
        if self.load is not None:
            self.load.close()
        self.tb.stop()

    # -- one cycle -------------------------------------------------------------------------------

    def run_cycle(self, kind: str, next_kind: str) -> CycleStats:
        """Kill (at the armed point, or at random), restart armed for ``next_kind``, verify."""
        assert self.load is not None
        self.cycle += 1
        st = CycleStats(kind)
        self.load.resume(f"F{self.cycle}" if self.rng.random() < 0.7 else None)
        t0 = time.monotonic()
        if kind in (RANDOM, RESTART):
            time.sleep(self.rng.uniform(0.05, 2.0))
            if self.rng.random() < 0.3:
                self._delete_records()
            self._kill()
            if kind == RESTART:
                self.check_crash_files()
                st.fired = self._kill_during_start(self.rng.uniform(0.1, 1.5))
        else:
            if kind.startswith("delete.") or self.rng.random() < 0.3:
                time.sleep(self.rng.uniform(0.2, 0.6))  # something to delete below the new log start
                self._delete_records()
            pid = self.broker.pid()
            os.kill(pid, signal.SIGUSR1)
            st.fired = self._wait_for_death(POINT_TIMEOUT_S)
            if not st.fired:
                self._kill()
                raise AssertionError(f"{self.where()} crash point {self._armed} not reached in {POINT_TIMEOUT_S}s")
            self._points_fired += 1
            lines = self._fired_lines()
            assert len(lines) == self._points_fired, \
                f"{self.where()} the broker died without its crash point line:\n{self.broker.tail()}"
            name = lines[-1].split()[3]  # "strata crash point NAME reached (hit N): kill -9"
            assert self._armed is not None and fnmatch.fnmatchcase(name, self._armed.rsplit(":", 1)[0]), \
                f"{self.where()} armed {self._armed}, fired {lines[-1]}"
        st.kill_after_s = time.monotonic() - t0
        self.check_crash_files()
        st.restart_s = self._start(next_kind if next_kind in CRASH_POINTS else None)
        t1 = time.monotonic()
        self.load.pause()
        self.verify(st)
        st.verify_s = time.monotonic() - t1
        self.stats.append(st)
        return st

    def _kill_during_start(self, delay_s: float) -> bool:
        """Start the broker and SIGKILL it ``delay_s`` after the process began: in recovery, the metadata
        load, the first copy and retention runs, or just after the ready line. True if killed before ready."""
        broker = self.broker

        def killer() -> None:
            deadline = time.monotonic() + 10
            while broker.proc is None and time.monotonic() < deadline:
                time.sleep(0.002)
            proc = broker.proc
            if proc is not None:
                time.sleep(delay_s)
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGKILL)

        thread = threading.Thread(target=killer, name="crash-killer", daemon=True)
        thread.start()
        before_ready = False
        try:
            self.tb.start()
        except RuntimeError as e:  # killed before it was ready
            assert "exited with -9" in str(e), f"{self.where()} {e}"
            before_ready = True
        thread.join(15)
        code = broker.stop(signal.SIGKILL)
        assert code == -signal.SIGKILL, f"{self.where()} broker exit code {code}"
        return before_ready

    def _kill(self) -> None:
        code = self.broker.stop(signal.SIGKILL)
        assert code == -signal.SIGKILL, f"{self.where()} broker exit code {code}"

    def _wait_for_death(self, timeout_s: float) -> bool:
        proc = self.broker.proc
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                code = self.broker.stop()
                assert code == -signal.SIGKILL, f"{self.where()} broker exited with {code}:\n{self.broker.tail()}"
                return True
            time.sleep(0.01)
        return False

    def _fired_lines(self) -> list[str]:
        text = self.broker.log_path.read_text(errors="replace")
        return [line for line in text.splitlines() if line.startswith("strata crash point ") and " reached " in line]

    def _delete_records(self) -> None:
        """DeleteRecords on one partition of the topic without retention, a third of the way in."""
        p = self.rng.randrange(TOPICS[KEEP])
        start, hw = self._last.get((KEEP, p), (0, 0))
        if hw - start < 10:
            return
        # mostly into the remote part; sometimes past the local log start, into data not uploaded yet
        target = start + (hw - start) // 3 if self.rng.random() < 0.6 else hw - self.rng.randrange(1, 10)
        tp = (KEEP, p)
        self.delete_requested[tp] = max(self.delete_requested.get(tp, 0), target)
        try:
            futures = self.tb.admin().delete_records([CkTopicPartition(KEEP, p, target)], request_timeout=5)
            for f in futures.values():
                f.result(10)
        except Exception:  # noqa: BLE001 - the broker may be killed under it: then not acknowledged
            return
        self.delete_acked[tp] = max(self.delete_acked.get(tp, 0), target)

    # -- checks ----------------------------------------------------------------------------------

    def check_crash_files(self) -> None:
        """What the kill left on disk: every leader-epoch checkpoint and producer snapshot parses,
        epochs and their start offsets increase (the files are replaced atomically: never torn)."""
        logs = self.broker.data_dir / "logs"
        self._crash_epochs = {}
        for d in logs.iterdir():
            if not d.is_dir() or not any(d.name.startswith(t + "-") for t in TOPICS):
                continue
            lec = d / "leader-epoch-checkpoint"
            if lec.exists():
                entries = LeaderEpochCheckpointFile(lec).read()
                epochs = [e.epoch for e in entries]
                starts = [e.start_offset for e in entries]
                assert epochs == sorted(set(epochs)) and starts == sorted(set(starts)), \
                    f"{self.where()} {lec}: {entries}"
                self._crash_epochs[_tp_of(d.name)] = entries
            for snap in d.glob("*.snapshot"):
                entries = read_snapshot(snap)  # raises on a torn or corrupt file
                offset = int(snap.name.split(".")[0])
                for e in entries:
                    assert e.last_data_offset < offset, f"{self.where()} {snap}: {e} beyond the snapshot offset"

    def offsets(self) -> dict[tuple[str, int], dict[str, int]]:
        keys = [(t, p) for t, n in TOPICS.items() for p in range(n)]
        out: dict[tuple[str, int], dict[str, int]] = {k: {} for k in keys}
        with KafkaCluster(self.tb.bootstrap, timeout_s=20) as cluster:
            for name, spec in (("start", EARLIEST), ("local_start", EARLIEST_LOCAL), ("hw", LATEST),
                               ("tiered", LATEST_TIERED)):
                for k, v in cluster.list_offsets(dict.fromkeys(keys, spec)).items():
                    out[k][name] = v
        return out

    def store_objects(self) -> list[tuple[str, str, bool]]:
        """(segment id, suffix, temp file?) of every object the store holds."""
        return [parse_store_name(name.rsplit("/", 1)[-1]) for name in self._store_names()]

    def _s3(self) -> Any:
        if self._s3_client is None:  # one client: creating one costs more than a listing
            self._s3_client = self.tb.s3.boto3_client()  # type: ignore[attr-defined]
        return self._s3_client

    def _store_names(self) -> list[str]:
        if isinstance(self.tb, S3TieredBroker):
            pages = self._s3().get_paginator("list_objects_v2").paginate(Bucket=self.tb.s3.bucket,
                                                                         Prefix=self.tb.key_prefix)
            return [o["Key"] for page in pages for o in page.get("Contents", [])]
        return [str(path) for path in self.tb.remote_dir.rglob("*")
                if path.is_file() and path.parent != self.tb.remote_dir]

    def _read_object(self, name: str) -> bytes:
        if isinstance(self.tb, S3TieredBroker):
            return bytes(self._s3().get_object(Bucket=self.tb.s3.bucket, Key=name)["Body"].read())
        return Path(name).read_bytes()

    def check_remote_snapshots(self, segments: dict[str, Segment]) -> None:
        """The producer snapshot uploaded with each finished segment holds the state at the segment's
        end: every batch here comes from an idempotent producer, so the producer of the segment's
        last batch is in it with that batch's last offset (an empty snapshot, uploaded when the
        local one was missing, fails this)."""
        names = {parse_store_name(n.rsplit("/", 1)[-1])[0]: n for n in self._store_names() if n.endswith(".snapshot")}
        for sid, seg in segments.items():
            if seg.state != FINISHED or sid in self._snapshots_checked or sid not in names:
                continue
            entries = decode_snapshot(self._read_object(names[sid]), names[sid])
            last = max((e.last_data_offset for e in entries), default=None)
            assert last == seg.end, (f"{self.where()} remote producer snapshot of {seg} (id {sid}) holds "
                                     f"{len(entries)} producers, last offset {last}, not the segment's end")
            self._snapshots_checked.add(sid)

    def tiers(self) -> dict[TP, dict[str, Any]]:
        """The broker's own view of both tiers (``/v1/tiers``, what ``strata tiers`` shows)."""
        if self._tiers_url is None:  # metrics.port=0: a new port at every start
            host, port = metrics_endpoint(self.tb.bootstrap)
            self._tiers_url = f"http://{host}:{port}/v1/tiers"
        with urllib.request.urlopen(self._tiers_url, timeout=10) as resp:
            doc = json.loads(resp.read())
        return {(p["topic"], p["partition"]): p for p in doc["partitions"] if p["topic"] in TOPICS}

    def local_files(self) -> dict[tuple[str, int], list[int]]:
        """Base offsets of the local ``.log`` files of every partition (``.deleted`` ones excluded)."""
        out = {}
        for t, n in TOPICS.items():
            for p in range(n):
                d = self.broker.data_dir / "logs" / f"{t}-{p}"
                out[(t, p)] = sorted(int(f.name.split(".")[0]) for f in d.glob("*.log"))
        return out

    def settle(self) -> Snapshot:
        """Wait until the remote tier is quiet (no segment in a *_STARTED state, and no change for
        several task intervals), then take the broker's offsets, the local files and the store's
        objects between two identical reads of the metadata and two identical listings of the
        local files: one consistent picture."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        last = None
        while True:
            before = remote_segments(self.tb.bootstrap)
            busy = [s for s in before.values() if s.state in (STARTED, DELETE_STARTED)]
            if not busy:
                time.sleep(QUIET_S)
                files = self.local_files()
                offsets = self.offsets()
                objects = self.store_objects()
                tiers = self.tiers()
                after = remote_segments(self.tb.bootstrap)
                if after == before and self.local_files() == files:
                    return Snapshot(after, objects, offsets, files, tiers)
                last = "metadata or local files changed meanwhile"
            else:
                last = f"{len(busy)} segments in a *_STARTED state: {busy[:3]}"
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.where()} the remote tier did not settle in {SETTLE_TIMEOUT_S}s: {last}")
            time.sleep(0.2)

    def verify(self, st: CycleStats | None = None) -> None:
        assert self.load is not None
        where = self.where()
        with self.acked.lock:
            assert not self.acked.fatal, f"{where} fatal producer errors: {self.acked.fatal[:3]}"
            assert not self.acked.failed, f"{where} delivery failures: {dict(self.acked.failed)}"
            acked = {tp: dict(v) for tp, v in self.acked.offsets.items()}
        for attempt in range(3):
            snap = self.settle()
            self._check_store(snap.segments, snap.objects)
            self.check_remote_snapshots(snap.segments)
            for tp, o in snap.offsets.items():
                self._check_partition(tp, o, snap.segments, snap.files[tp], acked.get(tp, {}))
                self._check_broker_view(tp, o, snap.segments, snap.tiers[tp])
            got = self._consume(snap.offsets)
            # a retention run between the snapshot and the reads moves the log start: take it again
            if self.offsets() == snap.offsets:
                break
            print(f"{where} offsets moved while reading (attempt {attempt + 1}): checking again")
        segments, offsets = snap.segments, snap.offsets
        self.max_remote_segments = max(self.max_remote_segments,
                                       sum(1 for s in segments.values() if s.state == FINISHED))
        self.deletes_seen = sum(1 for s in segments.values() if s.state == DELETE_FINISHED)
        for tp, o in offsets.items():
            records, remote = self._check_records(tp, o, got[tp], acked.get(tp, {}))
            if st is not None:
                st.records_read += records
                st.remote_records_read += remote
            self._last[tp] = (o["start"], o["hw"])
        for tp, entries in self._crash_epochs.items():
            for e in entries:  # the log end never moves back past an epoch's start (acked data is kept)
                assert e.start_offset <= offsets[tp]["hw"], f"{where} {tp}: epoch {e} beyond the log end {offsets[tp]}"

    def _check_store(self, segments: dict[str, Segment], objects: list[tuple[str, str, bool]]) -> None:
        where = self.where()
        temp = [o for o in objects if o[2]]
        assert not temp, f"{where} temp files of interrupted uploads left in the store: {temp[:5]}"
        finished = {sid for sid, s in segments.items() if s.state == FINISHED}
        by_id: dict[str, set[str]] = defaultdict(set)
        for sid, suffix, _ in objects:
            by_id[sid].add(suffix)
        dangling = {sid: sorted(sfx) for sid, sfx in by_id.items() if sid not in finished}
        assert not dangling, (f"{where} objects of segments that are not COPY_SEGMENT_FINISHED (dangling uploads "
                              f"or undeleted segments): {dict(list(dangling.items())[:5])} states "
                              f"{[segments[s].state if s in segments else None for s in list(dangling)[:5]]}")
        for sid in finished:
            missing = REQUIRED_SUFFIXES - by_id.get(sid, set())
            assert not missing, f"{where} finished segment {sid} {segments[sid]} lacks objects {sorted(missing)}"

    def _check_partition(self, tp: tuple[str, int], o: dict[str, int], segments: dict[str, Segment],
                         logs: list[int], acked: dict[bytes, int]) -> None:
        where = f"{self.where()} {tp[0]}-{tp[1]}"
        start, local_start, hw, tiered = o["start"], o["local_start"], o["hw"], o["tiered"]
        assert start <= local_start <= hw, f"{where} offsets {o}"
        if acked:
            assert hw >= max(acked.values()) + 1, f"{where} HW {hw} below an acknowledged offset {max(acked.values())}"
        finished = sorted((s for s in segments.values() if (s.topic, s.partition) == tp and s.state == FINISHED),
                          key=lambda s: s.start)
        for a, b in zip(finished, finished[1:], strict=False):
            assert b.start > a.end, f"{where} overlapping finished remote segments {a} and {b}"
        # nothing was deleted locally before it was uploaded: [start, local start) is all in the remote tier
        covered = start
        for s in finished:
            if s.start <= covered <= s.end:
                covered = s.end + 1
        assert covered >= local_start, (f"{where} offsets [{covered}, {local_start}) are neither local nor in a "
                                        f"finished remote segment (log start {start}); remote: "
                                        f"{[(s.start, s.end) for s in finished][-5:]}")
        highest = max((s.end for s in finished), default=-1)
        # the broker's upload gate never runs ahead of what is really finished in the remote tier
        assert tiered <= highest, f"{where} latest tiered offset {tiered}, highest finished end offset {highest}"
        assert logs and max(logs[0], start) == local_start, f"{where} local segments {logs[:3]} vs {o}"
        # and no local segment lies wholly below the log start: those are deleted, uploaded or not
        below = [b for b, nxt in zip(logs, logs[1:], strict=False) if nxt <= start]
        assert not below, f"{where} local segments {below[:5]} wholly below the log start {start} were kept"
        # the log start moved only as DeleteRecords or retention allowed
        if tp[0] == KEEP:
            lo, hi = self.delete_acked.get(tp, 0), self.delete_requested.get(tp, 0)
            assert lo <= start <= hi, f"{where} log start {start} outside the DeleteRecords range [{lo}, {hi}]"
        else:
            # the local .log files of the snapshot not in the remote tier; one uploaded and deleted locally
            # since the snapshot was taken can no longer be measured: then the check waits for the next cycle
            directory = self.broker.data_dir / "logs" / f"{tp[0]}-{tp[1]}"
            sizes = [_size_or_none(directory / f"{base:020d}.log") for base in logs if base > highest]
            local = sum(size or 0 for size in sizes)
            retained = local + sum(s.size for s in finished if s.end >= start)
            total = retained + sum(s.size for s in finished if s.end < start)
            if start > 0 and None not in sizes:
                assert retained >= RET_BYTES, \
                    f"{where} retention deleted too much: {retained} bytes kept of {total}, retention.bytes={RET_BYTES}"

    def _check_broker_view(self, tp: TP, o: dict[str, int], segments: dict[str, Segment],
                           view: dict[str, Any]) -> None:
        """The RLMM's cache (restored from its snapshot plus the topic's tail after a crash) agrees with a
        full replay of ``__remote_log_metadata``, and the log's offsets with ListOffsets."""
        finished = [s for s in segments.values() if (s.topic, s.partition) == tp and s.state == FINISHED]
        want = {"remote_segments": len(finished), "remote_bytes": sum(s.size for s in finished),
                "log_start_offset": o["start"], "local_log_start_offset": o["local_start"],
                "high_watermark": o["hw"], "log_end_offset": o["hw"], "highest_offset_in_remote_storage": o["tiered"]}
        got = {k: view[k] for k in want}
        assert got == want, f"{self.where()} {tp[0]}-{tp[1]}: the broker's tiers view {got} differs from {want}"

    def _consume(self, offsets: dict[TP, dict[str, int]]) -> dict[TP, list[tuple[int, bytes]]]:
        """Every record in [log start, HW) of every partition, read with a real consumer (both tiers)."""
        got: dict[TP, list[tuple[int, bytes]]] = {tp: [] for tp in offsets}
        c = Consumer({"bootstrap.servers": self.tb.bootstrap, "group.id": f"crash-check-{time.monotonic_ns()}",
                      "enable.auto.commit": False, "auto.offset.reset": "error", "log_level": 0,
                      "fetch.wait.max.ms": 100, "max.partition.fetch.bytes": 256 * 1024,
                      "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 250})
        errors: Counter[str] = Counter()
        try:
            c.assign([CkTopicPartition(t, p, OFFSET_BEGINNING) for t, p in offsets])
            todo = {tp for tp, o in offsets.items() if o["hw"] > o["start"]}
            deadline = time.monotonic() + CONSUME_TIMEOUT_S
            while todo and time.monotonic() < deadline:
                for msg in c.consume(500, 0.05):
                    if msg.error() is not None:
                        errors[msg.error().name()] += 1
                        # out of range or a failed offset reset: an offset the broker should have is not there
                        assert msg.error().code() not in FATAL_CONSUME, (
                            f"{self.where()} consuming {msg.topic()}-{msg.partition()}: {msg.error()}; offsets "
                            f"{offsets}; read so far { {tp: (v[-1][0] if v else None) for tp, v in got.items()} }")
                        continue
                    tp = (msg.topic(), msg.partition())
                    got[tp].append((msg.offset(), msg.value()))
                    if msg.offset() >= offsets[tp]["hw"] - 1:
                        todo.discard(tp)
            assert not todo, (f"{self.where()} consuming stopped short on {sorted(todo)}: read "
                              f"{ {tp: (v[-1][0] if v else None) for tp, v in got.items()} } of {offsets}; "
                              f"errors {dict(errors)}")
        finally:
            c.close()
        return got

    def _check_records(self, tp: tuple[str, int], o: dict[str, int], records: list[tuple[int, bytes]],
                       acked: dict[bytes, int]) -> tuple[int, int]:
        where = f"{self.where()} {tp[0]}-{tp[1]}"
        start, hw = o["start"], o["hw"]
        records = [r for r in records if r[0] < hw]
        got_offsets = [off for off, _ in records]
        if got_offsets != list(range(start, hw)):
            gaps = sorted(set(range(start, hw)) - set(got_offsets))[:10]
            dups = [k for k, n in Counter(got_offsets).items() if n > 1][:10]
            raise AssertionError(f"{where} offsets not dense from {start} to {hw}: {len(records)} records, "
                                 f"missing {gaps}, repeated {dups}")
        at = {}
        for off, value in records:
            assert value not in at, f"{where} value {value[:20]!r} at {at[value]} and {off}: a duplicate"
            at[value] = off
        lost = [(v[:16], off) for v, off in acked.items() if off >= start and at.get(v) != off]
        assert not lost, (f"{where} {len(lost)} acknowledged records not at their offsets: "
                          f"{[(v, off, at.get(v)) for v, off in lost[:5]]}")
        return len(records), sum(1 for off, _ in records if off < o["local_start"])


def _tp_of(name: str) -> tuple[str, int]:
    topic, _, p = name.rpartition("-")
    return topic, int(p)


def plan(rng: random.Random, cycles: int, points: list[str], random_share: float) -> list[str]:
    """``cycles`` kinds: every point of ``points`` at least once (while cycles allow), the rest random
    kills (``random_share`` of them, one in three of those killing the restart too) and points again,
    shuffled."""
    kinds = list(points)[:cycles]
    while len(kinds) < cycles:
        if rng.random() < random_share:
            kinds.append(RESTART if rng.random() < 1 / 3 else RANDOM)
        else:
            kinds.append(rng.choice(points))
    rng.shuffle(kinds)
    return kinds


def _size_or_none(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None
