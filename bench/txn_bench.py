"""Transactions (issue 15): transactional produce against idempotent produce, read_committed against
read_uncommitted consume (local log and remote tier), and where the broker's time goes.

    .venv/bin/python bench/txn_bench.py [--quick] [--only produce|consume|profile] [--produce-mib N]
                                        [--consume-mib N] [--profile-mib N] [--reps N]
                                        [--commit-interval-ms N] [--txn-records N] [--dir PATH] [--json PATH]

Every server is a broker process of its own on 127.0.0.1 (stopped by its pid); the clients are
confluent-kafka (librdkafka) in this process. Ratios are against a baseline measured in the same run
(bench/report.py): the median subject rate over the median baseline rate, (pairs) per repetition.

1. **Produce**: the same 1 KiB records (uncompressed, linger.ms=5, one partition, acks=all) from
   (a) an idempotent producer (the baseline) and (b) a transactional producer that begins a transaction,
   produces for ``--commit-interval-ms`` (100 ms), commits (which waits for every record of it and the
   EndTxn round trip), and begins the next. Timed from the first ``produce()`` to ``flush()`` / the last
   ``commit_transaction()`` returning; ``init_transactions`` and a warm-up transaction are untimed. Each
   repetition starts a fresh broker on an empty data directory (the previous one's files deleted first,
   as in broker_bench: page-cache pages are recycled, not first-touched) and runs both producers in
   alternating order. Reported: MB/s, broker and client CPU-seconds per GiB, commits/s, and what a commit
   costs the producer: each is an explicit ``flush()`` (the transaction's records acknowledged) and then
   ``commit_transaction()`` (the EndTxn, answered once the markers are written), timed apart.
2. **Consume**: one broker with tiering on (``local`` RSM), two topics with 8 MiB segments and the
   same records, written by one transactional producer (each transaction ``--txn-records`` records to
   both topics; every 10th transaction aborted, after its records were flushed into the log): one not
   tiered, one tiered with ``local.retention.bytes=1`` (read once every segment but the active one was
   uploaded and deleted locally). Each topic is read from offset 0 to its end by confluent-kafka with
   ``isolation.level`` read_uncommitted (the baseline: every record) and read_committed (the aborted
   records dropped by the client with the broker's AbortedTransactions list, from the local or the remote
   ``.txnindex``). MB/s counts the bytes of all the topic's records (committed and aborted) over the
   time to read it to its end, the same for both isolation levels. A first, untimed pass of each
   checks the records: read_committed gets no aborted one.
3. **Profile**: a broker started under cProfile (as ``bench/run.py --profile-broker`` does), profiling
   switched on and off by SIGUSR2 around each pass (one bench/out/txn_profile_<pass>.pstats each, so
   start-up is not in them): an idempotent then a transactional produce pass, and a local
   read_uncommitted then read_committed read of a topic built as in 2. Shown: each pass's time by code
   group (strata, strata's transaction code - files named *transaction*/*txn* -, kio, asyncio, other
   Python, C built-ins), the functions with the most own time in the transactional produce, and the
   functions whose time grew most from each baseline pass to its transactional counterpart. cProfile
   sees the event-loop thread only and slows it: shares, not absolute speeds.

MB/s = 10^6 bytes/s of record payload. ``os.sync()`` runs untimed before every timed run.
"""

from __future__ import annotations

import argparse
import os
import pstats
import re
import resource
import shutil
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import report as bench_report  # noqa: E402
from broker_bench import Server  # noqa: E402
from report import MiB, Result, run_and_save, summarize  # noqa: E402

READY = re.compile(r"strata broker ready on ([\d.]+):(\d+)")
PROFILE_ON = "txn-bench: profiling on"
PROFILE_WRITTEN = re.compile(r"txn-bench: profile written to (\S+)")
RUN_TIMEOUT_S = 300.0
GiB = 1024 * MiB
BROKER_PROPS = {
    "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5", "log.segment.delete.delay.ms": "0",
    "log.segment.bytes": str(256 * MiB),
}


@dataclass(frozen=True)
class BenchConfig:
    produce_mib: int = 256
    consume_mib: int = 256
    profile_mib: int = 256
    record_bytes: int = 1024
    linger_ms: int = 5
    commit_interval_ms: int = 100
    produce_reps: int = 5
    consume_reps: int = 5
    txn_records: int = 512  # consume topic: records per transaction (512 KiB)
    abort_every: int = 10  # consume topic: every 10th transaction aborted
    segment_mib: int = 8  # consume topics' segment.bytes

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(produce_mib=32, consume_mib=32, profile_mib=32, produce_reps=2, consume_reps=2)


def _log(msg: str) -> None:
    print(msg, flush=True)


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- brokers -------------------------------------------------------------------------------------


def start_broker(work: Path, props: dict[str, str], profile_prefix: Path | None = None) -> Server:
    """``strata serve`` (no -v: per-transaction INFO lines are not part of the cost) on a free port;
    with ``profile_prefix``, under this file's cProfile launcher (see :func:`profiled_serve`)."""
    work.mkdir(parents=True, exist_ok=True)
    all_props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(work / "logs"), **props}
    args = [sys.executable]
    args += [__file__, "--profiled-serve", str(profile_prefix)] if profile_prefix is not None else ["-m", "strata"]
    args.append("serve")
    for k, v in all_props.items():
        args += ["--set", f"{k}={v}"]
    return Server(args, work / "broker.log", READY)


def profiled_serve(prefix: str, argv: list[str]) -> int:
    """The broker's ``main`` with a cProfile of the event-loop thread switched on and off by SIGUSR2:
    each off writes ``<prefix>.<n>.pstats``. (SIGUSR1 arms the crash points; SIGQUIT dumps stacks.)"""
    import cProfile

    from strata.cli import main as strata_main

    state: dict[str, Any] = {"profiler": None, "n": 0}

    def toggle(_signum: int, _frame: Any) -> None:
        if state["profiler"] is None:
            state["profiler"] = cProfile.Profile()
            state["profiler"].enable()
            os.write(1, f"{PROFILE_ON}\n".encode())
            return
        profiler, state["profiler"] = state["profiler"], None
        profiler.disable()
        path = f"{prefix}.{state['n']}.pstats"
        state["n"] += 1
        profiler.dump_stats(path + ".tmp")
        os.replace(path + ".tmp", path)
        os.write(1, f"txn-bench: profile written to {path}\n".encode())

    signal.signal(signal.SIGUSR2, toggle)
    return strata_main(argv)


def _toggle_profile(server: Server, want: re.Pattern[str] | str, timeout_s: float = 60.0) -> str:
    before = server.log_path.read_bytes().decode(errors="replace")
    pattern = re.compile(re.escape(want)) if isinstance(want, str) else want
    seen = len(pattern.findall(before))
    server.proc.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = pattern.findall(server.log_path.read_bytes().decode(errors="replace"))
        if len(found) > seen:
            return found[-1]
        time.sleep(0.01)
    raise RuntimeError(f"the profiled broker did not answer SIGUSR2 ({pattern.pattern!r})")


def create_topics(bootstrap: str, topics: dict[str, dict[str, str]]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, 1, 1, config=c) for t, c in topics.items()], operation_timeout=10)
    for fut in futures.values():
        fut.result(timeout=30)


# -- producers -----------------------------------------------------------------------------------


def _producer_config(bootstrap: str, cfg: BenchConfig) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "linger.ms": cfg.linger_ms, "acks": "all", "compression.type": "none",
            "enable.idempotence": True, "log_level": 3, "queue.buffering.max.kbytes": 1024 * 1024}


def idempotent_producer(bootstrap: str, cfg: BenchConfig) -> Any:
    from confluent_kafka import Producer

    return Producer(_producer_config(bootstrap, cfg))


def transactional_producer(bootstrap: str, cfg: BenchConfig) -> Any:
    from confluent_kafka import Producer

    p = Producer({**_producer_config(bootstrap, cfg), "transactional.id": f"txn-bench-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    return p


def produce_idempotent(p: Any, topic: str, records: int, value: bytes) -> float:
    produce, poll = p.produce, p.poll
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                produce(topic, value, partition=0)
                break
            except BufferError:
                poll(0.001)
    left = p.flush(RUN_TIMEOUT_S)
    elapsed = time.perf_counter() - started
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return elapsed


@dataclass
class TxnRun:
    seconds: float = 0.0
    flush_s: list[float] = field(default_factory=list)  # per commit: flush(), the transaction's records acked
    end_txn_s: list[float] = field(default_factory=list)  # per commit: then commit_transaction(), the EndTxn

    @property
    def commits(self) -> int:
        return len(self.end_txn_s)


def produce_transactional(p: Any, topic: str, records: int, value: bytes, interval_s: float) -> TxnRun:
    """Begin, produce for ``interval_s``, commit, ... until ``records`` are committed. Each commit is an
    explicit flush() and then commit_transaction() (which flushes too: the same requests on the wire), so
    the time a commit costs the producer splits into draining the transaction's records and the EndTxn."""
    produce, poll = p.produce, p.poll
    run = TxnRun()

    def commit() -> None:
        t0 = time.perf_counter()
        if p.flush(RUN_TIMEOUT_S):
            raise RuntimeError("records of a transaction not delivered")
        t1 = time.perf_counter()
        p.commit_transaction(RUN_TIMEOUT_S)
        run.flush_s.append(t1 - t0)
        run.end_txn_s.append(time.perf_counter() - t1)

    started = time.perf_counter()
    p.begin_transaction()
    deadline = started + interval_s
    last = records - 1
    for i in range(records):
        while True:
            try:
                produce(topic, value, partition=0)
                break
            except BufferError:
                poll(0.001)
        if i & 63 == 63 and i != last and time.perf_counter() >= deadline:
            commit()
            p.begin_transaction()
            deadline = time.perf_counter() + interval_s
    commit()
    run.seconds = time.perf_counter() - started
    return run


# -- 1. produce ----------------------------------------------------------------------------------


def run_produce(work: Path, cfg: BenchConfig) -> dict:
    records = cfg.produce_mib * MiB // cfg.record_bytes
    nbytes = records * cfg.record_bytes
    value = os.urandom(cfg.record_bytes)
    interval_s = cfg.commit_interval_ms / 1e3
    base = Result("produce: idempotent", "baseline", nbytes=nbytes,
                  note=f"{cfg.record_bytes} B records, acks=all, linger.ms={cfg.linger_ms}, one partition")
    subj = Result(f"produce: txn, commit every {cfg.commit_interval_ms} ms", "subject", nbytes=nbytes,
                  baseline=base.name, informational=True,
                  note="begin, produce for the interval, commit_transaction, repeat")
    txn_runs: list[TxnRun] = []

    def timed(fn: Callable[[], float], result: Result, server: Server) -> None:
        os.sync()
        cpu, mine = server.cpu_seconds(), _own_cpu_s()
        result.samples_s.append(fn())
        result.server_cpu_s.append(server.cpu_seconds() - cpu)
        result.client_cpu_s.append(_own_cpu_s() - mine)

    def one_rep(rep: int, broker: Server) -> None:
        """Both producers against ``broker``; they are destroyed on return, before the broker stops."""
        bootstrap = f"127.0.0.1:{broker.port}"
        create_topics(bootstrap, {"idempotent": {}, "transactional": {}})
        idem = idempotent_producer(bootstrap, cfg)
        txn = transactional_producer(bootstrap, cfg)
        # warm-up, untimed: producer ids, connections, the transaction coordinator's partition
        warm = max(64, min(records, 4 * MiB // cfg.record_bytes))
        produce_idempotent(idem, "idempotent", warm, value)
        produce_transactional(txn, "transactional", warm, value, interval_s)

        def run_txn() -> float:
            run = produce_transactional(txn, "transactional", records, value, interval_s)
            txn_runs.append(run)
            return run.seconds

        order = [(lambda: produce_idempotent(idem, "idempotent", records, value), base), (run_txn, subj)]
        for fn, result in (order if rep % 2 == 0 else order[::-1]):
            timed(fn, result, broker)
        _log(f"  produce rep {rep + 1}: idempotent {base.rates[-1]:.0f} MB/s (broker CPU "
             f"{base.server_cpu_s[-1]:.2f} s), transactional {subj.rates[-1]:.0f} MB/s (broker CPU "
             f"{subj.server_cpu_s[-1]:.2f} s, {txn_runs[-1].commits} commits, in flush() before them "
             f"{sum(txn_runs[-1].flush_s):.2f} s, in commit_transaction() {sum(txn_runs[-1].end_txn_s):.2f} s)")

    broker: Server | None = None
    try:
        for rep in range(cfg.produce_reps):
            if broker is not None:
                broker.stop()
            shutil.rmtree(work, ignore_errors=True)  # the last rep's pages freed: this one's writes recycle them
            broker = start_broker(work, BROKER_PROPS)
            one_rep(rep, broker)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"records": records, "commits": [r.commits for r in txn_runs],
            "txn_runs": [{**asdict(r), "commits": r.commits} for r in txn_runs],
            "results": summarize([base, subj], 0.0)}


# -- 2. consume ----------------------------------------------------------------------------------


def consumer(bootstrap: str, isolation: str) -> Any:
    """tiered_bench's consumer (big fetches, no commits, quiet) at ``isolation``."""
    from confluent_kafka import Consumer

    from tiered_bench import FETCH_MAX_BYTES, PARTITION_FETCH_BYTES

    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-bench-{uuid.uuid4().hex[:8]}",
                     "isolation.level": isolation, "enable.auto.commit": False, "log_level": 3,
                     "fetch.queue.backoff.ms": 10, "fetch.max.bytes": FETCH_MAX_BYTES,
                     "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
                     "receive.message.max.bytes": FETCH_MAX_BYTES + 16 * MiB})


def consume_to_end(bootstrap: str, topic: str, isolation: str, expect: int, check: bool = False) -> tuple[float, int]:
    """Seconds from assign() to the ``expect``-th record, and how many aborted ones (value b'a...') came."""
    from confluent_kafka import TopicPartition

    c = consumer(bootstrap, isolation)
    aborted = 0
    try:
        c.list_topics(topic, timeout=10)
        started = time.perf_counter()
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while got < expect:
            msgs = c.consume(min(10_000, expect - got), 1.0)
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"consume {topic} {isolation}: {m.error()}")
                if check and m.value()[:1] == b"a":
                    aborted += 1
            got += len(msgs)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} {isolation}: {got} of {expect} records in {RUN_TIMEOUT_S}s")
        return time.perf_counter() - started, aborted
    finally:
        c.close()


def build_txn_topics(bootstrap: str, topics: list[str], cfg: BenchConfig) -> dict[str, Any]:
    """Transactions of ``txn_records`` records to every topic, every ``abort_every``-th aborted (its
    records flushed first, so they are in the log), the last one committed."""
    records = cfg.consume_mib * MiB // cfg.record_bytes
    committed_value = b"c" + os.urandom(cfg.record_bytes - 1)
    aborted_value = b"a" + os.urandom(cfg.record_bytes - 1)
    p = transactional_producer(bootstrap, cfg)
    n_txns = -(-records // cfg.txn_records)
    sent = committed = aborts = 0
    started = time.perf_counter()
    for t in range(n_txns):
        abort = t % cfg.abort_every == cfg.abort_every - 1 and t != n_txns - 1
        n = min(cfg.txn_records, records - sent)
        value = aborted_value if abort else committed_value
        p.begin_transaction()
        for _ in range(n):
            for topic in topics:
                while True:
                    try:
                        p.produce(topic, value, partition=0)
                        break
                    except BufferError:
                        p.poll(0.001)
        if abort:
            if p.flush(RUN_TIMEOUT_S):
                raise RuntimeError("records of an aborted transaction not delivered")
            p.abort_transaction(RUN_TIMEOUT_S)
            aborts += 1
        else:
            p.commit_transaction(RUN_TIMEOUT_S)
            committed += n
        sent += n
    return {"records": records, "committed_records": committed, "transactions": n_txns, "aborted_transactions": aborts,
            "build_s": time.perf_counter() - started}


def run_consume(work: Path, cfg: BenchConfig) -> dict:
    import tiered_bench
    from tiered_bench import REMOTE_FETCHES, _proc_cpu_s

    shutil.rmtree(work, ignore_errors=True)
    props = tiered_bench.tiered_props("local", work, None, **{
        "rlmm.config.remote.log.metadata.topic.num.partitions": "5", "transaction.state.log.num.partitions": "5"})
    broker = tiered_bench.Broker(work, props)
    broker.start()
    seg = str(cfg.segment_mib * MiB)
    topics = {"local": "txn-local", "remote": "txn-remote"}
    info: dict[str, Any] = {}
    try:
        create_topics(broker.bootstrap, {
            topics["local"]: {"segment.bytes": seg},
            topics["remote"]: {"segment.bytes": seg, "remote.storage.enable": "true", "local.retention.bytes": "1"}})
        info.update(build_txn_topics(broker.bootstrap, list(topics.values()), cfg))
        info["offload_wait_s"] = tiered_bench.wait_offloaded(broker, topics["remote"])
        info["local_segments"] = len(broker.partition_logs(topics["local"]))
        info["remote_segments"] = len(tiered_bench.COPIED.findall(broker.log_text()))
        info["remote_txn_indexes"] = len(list((work / "remote").rglob("*.txnindex")))
        records, committed = info["records"], info["committed_records"]
        nbytes = records * cfg.record_bytes
        _log(f"  consume topics: {records} records each in {info['transactions']} transactions "
             f"({info['aborted_transactions']} aborted), built in {info['build_s']:.1f} s; "
             f"{info['remote_segments']} segments uploaded ({info['remote_txn_indexes']} with a .txnindex), "
             f"offloaded {info['offload_wait_s']:.1f} s after the last commit")
        expect = {"read_uncommitted": records, "read_committed": committed}
        want_aborted = {"read_uncommitted": records - committed, "read_committed": 0}
        results: dict[tuple[str, str], Result] = {}
        for tier in ("local", "remote"):
            base = Result(f"consume {tier}: read_uncommitted", "baseline", nbytes=nbytes,
                          note=f"{info['local_segments'] if tier == 'local' else info['remote_segments']} "
                               f"{'local' if tier == 'local' else 'remote'} {cfg.segment_mib} MiB segments; "
                               "every record")
            subj = Result(f"consume {tier}: read_committed", "subject", nbytes=nbytes, baseline=base.name,
                          informational=True, note=f"{committed} of {records} records (aborted ones dropped)")
            results[(tier, "read_uncommitted")], results[(tier, "read_committed")] = base, subj
        remote_reads: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}

        def measured(tier: str, isolation: str, check: bool = False) -> float:
            m0 = broker.metrics()
            os.sync()
            cpu, mine = _proc_cpu_s(broker.pid), _own_cpu_s()
            seconds, aborted = consume_to_end(broker.bootstrap, topics[tier], isolation, expect[isolation], check)
            if check:
                if aborted != want_aborted[isolation]:
                    raise RuntimeError(f"{tier} {isolation}: {aborted} aborted records delivered, want "
                                       f"{want_aborted[isolation]}")
                return seconds
            result = results[(tier, isolation)]
            result.samples_s.append(seconds)
            result.server_cpu_s.append(_proc_cpu_s(broker.pid) - cpu)
            result.client_cpu_s.append(_own_cpu_s() - mine)
            if tier == "remote":
                remote_reads[isolation].append(broker.metrics().get(REMOTE_FETCHES, 0.0) - m0.get(REMOTE_FETCHES, 0.0))
            return seconds

        passes = [(tier, iso) for tier in ("local", "remote") for iso in ("read_uncommitted", "read_committed")]
        info["first_pass_s"] = {f"{t} {i}": measured(t, i, check=True) for t, i in passes}  # checks the records
        for rep in range(cfg.consume_reps):
            for tier, isolation in (passes if rep % 2 == 0 else passes[::-1]):
                measured(tier, isolation)
            _log(f"  consume rep {rep + 1}: " + ", ".join(
                f"{t} {i} {results[(t, i)].rates[-1]:.0f} MB/s" for t, i in passes))
        info["remote_reads_per_pass"] = remote_reads
        info["results"] = summarize([results[p] for p in passes], 0.0)
        info["warnings"] = [line for line in broker.log_text().splitlines()
                            if " WARNING " in line or " ERROR " in line][-10:]
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return info


# -- 3. profile ----------------------------------------------------------------------------------


def _group(func: tuple[str, int, str]) -> str:
    path = func[0]
    if path == "~":
        return "C built-ins"
    if "/strata/" in path:
        return "strata transactions" if "transaction" in path or "txn" in path else "strata"
    if "/kio/" in path:
        return "kio"
    if "/asyncio/" in path:
        return "asyncio"
    return "other Python"


def _label(func: tuple[str, int, str]) -> str:
    path, line, name = func
    if path == "~":
        return name
    for marker in ("/src/strata/", "/site-packages/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{line}({name})"


IDLE = "<method 'poll' of 'select.epoll' objects>"  # the event loop waiting: not work


def summarize_profile(path: str, top: int) -> dict:
    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    idle = sum(tt for f, (_cc, _nc, tt, _ct, _callers) in stats.items() if f[2] == IDLE)
    busy = sum(tt for _cc, _nc, tt, _ct, _callers in stats.values()) - idle
    groups: dict[str, float] = {}
    for f, (_cc, _nc, tt, _ct, _callers) in stats.items():
        if f[2] != IDLE:
            groups[_group(f)] = groups.get(_group(f), 0.0) + tt
    own = sorted(((tt, nc, ct, f) for f, (_cc, nc, tt, ct, _callers) in stats.items() if f[2] != IDLE),
                 reverse=True)[:top]
    cum = sorted(((ct, nc, tt, f) for f, (_cc, nc, tt, ct, _callers) in stats.items()
                  if _group(f).startswith("strata")), reverse=True)[:top]
    return {"busy_s": busy, "idle_s": idle, "groups_s": groups,
            "own": [{"func": _label(f), "ncalls": nc, "tottime_s": tt, "cumtime_s": ct} for tt, nc, ct, f in own],
            "cumulative_strata": [{"func": _label(f), "ncalls": nc, "tottime_s": tt, "cumtime_s": ct}
                                  for ct, nc, tt, f in cum],
            "tottime_by_func": {_label(f): tt for f, (_cc, _nc, tt, _ct, _callers) in stats.items() if f[2] != IDLE},
            "ncalls_by_func": {_label(f): nc for f, (_cc, nc, _tt, _ct, _callers) in stats.items()}}


def _compare(a: dict, b: dict, top: int) -> list[dict]:
    """The functions whose own time grew most from pass ``a`` to pass ``b``."""
    deltas = sorted(((tt - a["tottime_by_func"].get(f, 0.0), f) for f, tt in b["tottime_by_func"].items()),
                    reverse=True)[:top]
    return [{"func": f, "delta_s": d, "a_s": a["tottime_by_func"].get(f, 0.0), "b_s": b["tottime_by_func"][f],
             "a_ncalls": a["ncalls_by_func"].get(f, 0), "b_ncalls": b["ncalls_by_func"].get(f, 0)} for d, f in deltas]


def run_profile(work: Path, cfg: BenchConfig, top: int = 15) -> dict:
    """One broker under cProfile, four profiled windows: idempotent then transactional produce, and a local
    read_uncommitted then read_committed read of a topic with aborted transactions (8 MiB segments)."""
    shutil.rmtree(work, ignore_errors=True)
    records = cfg.profile_mib * MiB // cfg.record_bytes
    value = os.urandom(cfg.record_bytes)
    interval_s = cfg.commit_interval_ms / 1e3
    broker = start_broker(work, BROKER_PROPS, profile_prefix=work / "txn-profile")
    bootstrap = f"127.0.0.1:{broker.port}"
    passes: dict[str, dict[str, Any]] = {}
    paths: dict[str, str] = {}

    def profiled(name: str, fn: Callable[[], tuple[float, int]], nbytes: int) -> None:
        _toggle_profile(broker, PROFILE_ON)
        cpu = broker.cpu_seconds()
        seconds, commits = fn()
        cpu = broker.cpu_seconds() - cpu
        paths[name] = _toggle_profile(broker, PROFILE_WRITTEN)
        passes[name] = {"mb_per_s": nbytes / seconds / 1e6, "seconds": seconds, "broker_cpu_s": cpu,
                        "commits": commits}
        _log(f"  profiled {name} pass: {passes[name]['mb_per_s']:.0f} MB/s, broker CPU {cpu:.2f} s "
             "(cProfile slows the broker)")

    def produce_passes() -> None:  # a function: the producers are destroyed on return
        create_topics(bootstrap, {"idempotent": {}, "transactional": {}})
        idem = idempotent_producer(bootstrap, cfg)
        txn = transactional_producer(bootstrap, cfg)
        warm = max(64, min(records, 4 * MiB // cfg.record_bytes))
        produce_idempotent(idem, "idempotent", warm, value)
        produce_transactional(txn, "transactional", warm, value, interval_s)
        nbytes = records * cfg.record_bytes
        profiled("idempotent", lambda: (produce_idempotent(idem, "idempotent", records, value), 0), nbytes)

        def txn_pass() -> tuple[float, int]:
            run = produce_transactional(txn, "transactional", records, value, interval_s)
            return run.seconds, run.commits
        profiled("transactional", txn_pass, nbytes)

    try:
        produce_passes()
        create_topics(bootstrap, {"txn-read": {"segment.bytes": str(cfg.segment_mib * MiB)}})
        built = build_txn_topics(bootstrap, ["txn-read"], replace(cfg, consume_mib=cfg.profile_mib))
        consume_to_end(bootstrap, "txn-read", "read_uncommitted", built["records"])  # warm-up
        nbytes = built["records"] * cfg.record_bytes
        for iso, n in (("read_uncommitted", built["records"]), ("read_committed", built["committed_records"])):
            profiled(iso, lambda iso=iso, n=n: consume_to_end(bootstrap, "txn-read", iso, n), nbytes)
    finally:
        broker.stop()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, path in paths.items():
        kept = OUT / f"txn_profile_{name}.pstats"
        shutil.copyfile(path, kept)
        passes[name].update(pstats_file=str(kept), **summarize_profile(path, top))
    shutil.rmtree(work, ignore_errors=True)
    out = {"mib": cfg.profile_mib, "passes": passes,
           "grew_most": {"produce": _compare(passes["idempotent"], passes["transactional"], top),
                         "consume": _compare(passes["read_uncommitted"], passes["read_committed"], top)}}
    for side in passes.values():
        del side["tottime_by_func"], side["ncalls_by_func"]
    return out


# -- report --------------------------------------------------------------------------------------


def _cpu_per_gib(row: dict, key: str) -> float:
    return row[f"median_{key}_cpu_s"] / (row["bytes_per_run"] / GiB)


def format_cpu(rows: list[dict], commits: list[int] | None = None) -> str:
    lines = [f"  {'':<36} {'MB/s':>6} {'broker CPU-s/GiB':>17} {'client CPU-s/GiB':>17}"
             + (f" {'commits/s':>10} {'MiB/txn':>8}" if commits else "")]
    base_cpu: dict[str, float] = {}
    for row in rows:
        broker = _cpu_per_gib(row, "server")
        line = f"  {row['name']:<36} {row['median_mb_per_s']:6.0f} {broker:17.2f} {_cpu_per_gib(row, 'client'):17.2f}"
        if commits:
            if row["kind"] == "subject":
                per_s = [c / s for c, s in zip(commits, row["samples_s"], strict=True)]
                per_s.sort()
                rate = per_s[len(per_s) // 2]
                line += f" {rate:10.1f} {row['bytes_per_run'] / MiB / (sum(commits) / len(commits)):8.1f}"
            else:
                line += f" {'':>10} {'':>8}"
        if row["kind"] == "baseline":
            base_cpu[row["name"]] = broker
        elif row.get("baseline") in base_cpu:
            line += f"   broker CPU/GiB vs baseline {broker / base_cpu[row['baseline']]:.2f}x"
        lines.append(line)
    return "\n".join(lines)


def format_commits(runs: list[dict]) -> str:
    """What a commit costs the producer. The last commit of a run is left out: its flush() is the run's final
    drain, which the idempotent run has too (its flush())."""
    flush = [f for r in runs for f in r["flush_s"][:-1]]
    end = [e for r in runs for e in r["end_txn_s"]]
    share = statistics.median((sum(r["flush_s"][:-1]) + sum(r["end_txn_s"][:-1])) / r["seconds"] for r in runs)
    text = (f"  per commit (median of {len(end)}): commit_transaction() {statistics.median(end) * 1e3:.1f} ms "
            "(EndTxn; answered once PrepareCommit is durable, the markers follow)")
    if flush:
        text += (f"; before it, flush() {statistics.median(flush) * 1e3:.1f} ms (the transaction's last records "
                 f"acknowledged; median of {len(flush)} commits before a run's last); the commits before a run's "
                 f"last take {share * 100:.0f}% of its wall time")
    else:
        text += "; every run was one transaction (no commit before the last): increase --produce-mib"
    return text


def format_profile(p: dict) -> str:
    passes = p["passes"]
    lines = [f"3. where the broker's event-loop thread goes, {p['mib']} MiB per pass under cProfile "
             "(bench/out/txn_profile_<pass>.pstats; busy = profiled time less the idle epoll wait):"]
    for name, side in passes.items():
        total = sum(side["groups_s"].values()) or 1.0
        commits = f", {side['commits']} commits" if side["commits"] else ""
        lines.append(f"  {name:<16} {side['mb_per_s']:5.0f} MB/s{commits}, busy {side['busy_s']:.2f} s: " + ", ".join(
            f"{g} {100 * s / total:.0f}%" for g, s in sorted(side["groups_s"].items(), key=lambda kv: -kv[1])))
    b = passes["transactional"]
    lines.append("  transactional produce, top functions by own time (ncalls, own s, cumulative s):")
    for e in b["own"]:
        lines.append(f"    {e['ncalls']:>9} {e['tottime_s']:7.3f} {e['cumtime_s']:7.3f}  {e['func']}"[:170])
    lines.append("  transactional produce, strata functions by cumulative time:")
    for e in b["cumulative_strata"][:10]:
        lines.append(f"    {e['ncalls']:>9} {e['tottime_s']:7.3f} {e['cumtime_s']:7.3f}  {e['func']}"[:170])
    for key, (a_name, b_name) in (("produce", ("idempotent", "transactional")),
                                  ("consume", ("read_uncommitted", "read_committed"))):
        lines.append(f"  grew most from {a_name} to {b_name} (own ms, ncalls):")
        for e in p["grew_most"][key][:10]:
            lines.append(f"    {e['a_s'] * 1e3:7.2f} -> {e['b_s'] * 1e3:7.2f} ({e['a_ncalls']} -> "
                         f"{e['b_ncalls']})  {e['func']}"[:170])
    return "\n".join(lines)


NOTES = """\
notes: MB/s = 10^6 B/s of record payload (1 KiB records). CPU-s/GiB = CPU seconds of the broker process
       (and of this process: the librdkafka client, its threads included) per GiB of payload, medians;
       on 2 cores the client's CPU bounds what the broker can reach. produce: each rep a fresh broker, the
       two producers in alternating order, init_transactions untimed. consume: MB/s counts all records of
       the topic (committed and aborted) for both isolation levels, but read_committed hands the application
       10% fewer records: where the client bounds the rate, read_committed can come out faster. The remote
       topic's active segment is read locally; page cache warm, remote index cache warm after the checked
       first pass. Broker CPU is sampled in 10 ms ticks (0.01 s per 256 MiB pass = 0.04 CPU-s/GiB)."""


def print_report(report: dict) -> None:
    env = report["environment"]
    print()
    print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    if "produce" in report:
        p = report["produce"]
        print()
        print(f"1. produce: transactional (commit every {report['config']['commit_interval_ms']} ms) vs idempotent")
        print(bench_report.format_table(p["results"]))
        print(format_cpu(p["results"], p["commits"]))
        print(format_commits(p["txn_runs"]))
    if "consume" in report:
        c = report["consume"]
        print()
        print(f"2. consume from offset 0: read_committed vs read_uncommitted, {c['transactions']} transactions "
              f"of {report['config']['txn_records']} records, {c['aborted_transactions']} aborted "
              f"({c['records'] - c['committed_records']} of {c['records']} records)")
        print(bench_report.format_table(c["results"]))
        print(format_cpu(c["results"]))
        rows = {row["name"]: row for row in c["results"]}
        for iso in ("read_uncommitted", "read_committed"):
            remote, local = rows[f"consume remote: {iso}"], rows[f"consume local: {iso}"]
            print(f"  {iso}: remote tier / local tier {remote['median_mb_per_s'] / local['median_mb_per_s']:.2f}; "
                  f"remote reads per pass {sorted(c['remote_reads_per_pass'][iso])}")
        for w in c["warnings"]:
            print(f"  broker: {w[:200]}")
    if "profile" in report:
        print()
        print(format_profile(report["profile"]))
    print()
    print(NOTES)


def run(work: Path, cfg: BenchConfig, only: str | None) -> dict:
    report: dict[str, Any] = {"config": asdict(cfg), "environment": environment()}
    _log(f"txn bench: {cfg.produce_mib} MiB per produce run x {cfg.produce_reps} reps, {cfg.consume_mib} MiB "
         f"consume topics x {cfg.consume_reps} reps, {os.cpu_count()} CPUs, "
         f"load average {report['environment']['loadavg_at_start']}")
    if only in (None, "produce"):
        _log("[1/3] produce: transactional vs idempotent")
        report["produce"] = run_produce(work / "produce", cfg)
    if only in (None, "consume"):
        _log("[2/3] consume: read_committed vs read_uncommitted, local and remote")
        report["consume"] = run_consume(work / "consume", cfg)
    if only in (None, "profile"):
        _log("[3/3] profile: transactional produce, read_committed consume")
        report["profile"] = run_profile(work / "profile", cfg)
    shutil.rmtree(work, ignore_errors=True)
    return report


def environment() -> dict:
    import confluent_kafka

    return bench_report.environment(confluent_kafka=confluent_kafka.version()[0],
                                    librdkafka=confluent_kafka.libversion()[0],
                                    loadavg_at_start=" ".join(f"{x:.2f}" for x in os.getloadavg()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="32 MiB per run and profiled pass, 2 reps")
    parser.add_argument("--only", choices=["produce", "consume", "profile"], help="run one part")
    parser.add_argument("--produce-mib", type=int, help="payload MiB per produce run (default 256)")
    parser.add_argument("--consume-mib", type=int, help="payload MiB of each consume topic (default 256)")
    parser.add_argument("--profile-mib", type=int, help="payload MiB per profiled pass (default 256)")
    parser.add_argument("--reps", type=int, help="repetitions of the produce and of the consume runs")
    parser.add_argument("--commit-interval-ms", type=int, help="transactional producer: ms between commits")
    parser.add_argument("--txn-records", type=int, help="consume topics: records per transaction (default 512)")
    parser.add_argument("--dir", type=Path, default=OUT / "work" / "txn", help="scratch directory (deleted)")
    parser.add_argument("--json", type=Path, default=OUT / "txn_bench.json", help="where to write results")
    args = parser.parse_args(argv)
    cfg = BenchConfig.quick() if args.quick else BenchConfig()
    overrides: dict[str, Any] = {k: v for k, v in (
        ("produce_mib", args.produce_mib), ("consume_mib", args.consume_mib), ("profile_mib", args.profile_mib),
        ("produce_reps", args.reps), ("consume_reps", args.reps), ("commit_interval_ms", args.commit_interval_ms),
        ("txn_records", args.txn_records)) if v is not None}
    cfg = replace(cfg, **overrides)
    return run_and_save(lambda: run(args.dir, cfg, args.only), print_report, quick=args.quick, json_path=args.json)


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "--profiled-serve":
    sys.exit(profiled_serve(sys.argv[2], sys.argv[3:]))
if __name__ == "__main__":
    sys.exit(main())
