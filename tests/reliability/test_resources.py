"""Resource limits: a full disk, a thousand idle connections, clients that are slow on purpose.

Full disk (needs root to mount a tmpfs; skipped otherwise, saying so): the broker's ``log.dirs`` is a
small tmpfs. Produce with acks=all until the disk is full: every refusal is KAFKA_STORAGE_ERROR (56),
never a crash, a hang or UNKNOWN_SERVER_ERROR; every ``.log`` ends at a batch boundary with valid CRCs
(nothing of a refused batch stays); every acknowledged record can be fetched and nothing else. When
space returns (the tmpfs is remounted bigger) produce works again without a restart; a SIGTERM while
the disk is full still stops the broker; after a restart recovery truncates nothing and a real
consumer reads exactly the acknowledged records. A second test keeps the disk full to the last page
while small batches go in one at a time (an index entry per batch, a segment roll every 64 KiB): the
first store into a new page of a memory-mapped index used to kill the broker with SIGBUS.

Connections: >= 1,000 idle TCP connections (and some that completed ApiVersions) cost little memory,
do not change a real client's produce and end-to-end latency beyond a sane bound, and are closed by
``connections.max.idle.ms``. Slow clients: connections that announce 100 MiB frames and trickle, that
send a produce request one byte at a time, or that pipeline large fetches and never read the answers
neither grow the broker's RSS nor slow a real client, and the broker closes the stalled ones once
``connections.max.idle.ms`` passes without progress.

Soak knobs (``make soak``): ``STRATA_SOAK_IDLE_CONNECTIONS`` (default 5,000) and
``STRATA_SOAK_DISK_BATCHES`` (default 20,000 batches produced against a full disk).
"""

from __future__ import annotations

import os
import select
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, encode_request, ensure_topic, produce

from strata.log.file_records import FileRecords
from strata.protocol.records import BatchBuilder, decode_batch

SOAK_IDLE_CONNECTIONS = int(os.environ.get("STRATA_SOAK_IDLE_CONNECTIONS", "5000"))
SOAK_DISK_BATCHES = int(os.environ.get("STRATA_SOAK_DISK_BATCHES", "20000"))
MIB = 1024 * 1024
STORAGE_ERROR = 56


# -- helpers ---------------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def open_sockets(pid: int) -> int:
    count = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:")
        except OSError:
            pass
    return count


def wait_for(what: str, predicate: Any, timeout_s: float, interval_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def client_latencies(bootstrap: str, topic: str, n: int = 150) -> tuple[float, float]:
    """(p99 produce acks=all, p99 produce-to-consume) of a confluent-kafka producer and consumer, in seconds."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 3})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{time.monotonic_ns()}", "log_level": 3,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        warm: list[int] = []
        producer.produce(topic, b"warm-up", on_delivery=lambda err, msg: warm.append(msg.offset()))
        assert producer.flush(15) == 0 and warm
        consumer.assign([TopicPartition(topic, 0, warm[0] + 1)])
        produce_s, e2e_s = [], []
        for i in range(n):
            value = b"lat-%d-%d" % (time.monotonic_ns(), i)
            start = time.perf_counter()
            producer.produce(topic, value)
            assert producer.flush(15) == 0
            produce_s.append(time.perf_counter() - start)
            deadline = start + 15
            while True:
                m = consumer.poll(0.05)
                if m is not None and m.error() is None and m.value() == value:
                    break
                assert time.perf_counter() < deadline, "a produced record did not arrive"
            e2e_s.append(time.perf_counter() - start)
        return p99(produce_s), p99(e2e_s)
    finally:
        consumer.close()


def assert_latency_sane(base: tuple[float, float], during: tuple[float, float], what: str) -> None:
    for name, b, d in (("produce", base[0], during[0]), ("produce-to-consume", base[1], during[1])):
        bound = max(5 * b, b + 0.15)
        print(f"{what}: p99 {name} {b * 1000:.1f} ms -> {d * 1000:.1f} ms (bound {bound * 1000:.0f} ms)")
        assert d <= bound, f"{what}: p99 {name} went from {b * 1000:.1f} to {d * 1000:.1f} ms"


def no_traceback(broker: BrokerProcess) -> None:
    text = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in text, text[text.index("Traceback") - 1000:][:5000]


# -- full disk ---------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[tuple[Path, Any]]:
    """``tmp_path/b/logs`` as an 8 MiB tmpfs; yields (data dir, resize(mib)); unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("the full-disk tests mount a tmpfs, which needs root (not available: uid "
                    f"{os.geteuid()})")
    data = tmp_path / "b"
    logs = data / "logs"
    logs.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "strata-full-disk", str(logs)], check=True)

    def resize(mib: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={mib}m", str(logs)], check=True)

    try:
        yield data, resize
    finally:
        subprocess.run(["umount", "-l", str(logs)], check=False)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def assert_logs_whole(partition_dir: Path) -> int:
    """Every ``.log`` is whole batches with valid CRCs, offsets increasing across files; returns the next offset."""
    next_offset = None
    for path in sorted(partition_dir.glob("*.log")):
        records = FileRecords(path)
        end = 0
        try:
            for position, header, _ in records.iter_batches(0, verify_crc=True):
                assert position == end
                assert next_offset is None or header.base_offset == next_offset, (path, header.base_offset)
                next_offset = header.last_offset + 1
                end = position + header.size
        finally:
            records.close()
        assert end == path.stat().st_size, f"{path} has {path.stat().st_size - end} bytes after its last batch"
    return next_offset or 0


def fetch_values(c: WireClient, topic: str, start: int = 0) -> list[bytes]:
    """Every record value from ``start`` to the high watermark (raw fetches, whole batches decoded)."""
    out: list[bytes] = []
    offset = start
    while True:
        r = c.call(1, 12, max_wait=0, min_bytes=0, max_bytes=8 * MIB, isolation_level=0, session_id=0,
                   session_epoch=-1, replica_id=-1, rack_id="", forgotten_topics_data=[], topics=[
                       {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                        "partition_max_bytes": 8 * MIB, "current_leader_epoch": -1,
                                                        "log_start_offset": -1, "last_fetched_epoch": -1}]}])
        part = r.responses[0].partitions[0]
        assert int(part.error_code) == 0, part
        data = memoryview(part.records or b"")
        if not data:
            assert offset == part.high_watermark
            return out
        pos = 0
        while pos < len(data):
            batch = decode_batch(data, pos)
            out += [bytes(rec.value or b"") for rec in batch.records if rec.offset >= offset]
            offset = batch.header.last_offset + 1
            pos += batch.header.size


def _value(i: int, size: int) -> bytes:
    head = b"%08d:" % i
    return head + bytes((i + j) % 251 for j in range(size - len(head)))


def _batch(i: int, size: int) -> bytes:
    b = BatchBuilder()
    b.append(_value(i, size), key=b"%d" % i)
    return b.build()


def fill_to_zero(path: Path) -> int:
    """Write ``path`` until the filesystem has no free block left; returns its size."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        chunk = b"\0" * 4096
        while True:
            try:
                os.write(fd, chunk)
            except OSError:
                break
    finally:
        os.close(fd)
    assert free_bytes(path.parent) == 0
    return path.stat().st_size


def _commit(c: WireClient, offset: int) -> int:
    r = c.call(8, 8, group_id="disk-group", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
               retention_time_ms=-1, topics=[{"name": "disk", "partitions": [
                   {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                    "committed_metadata": ""}]}])
    return int(r.topics[0].partitions[0].error_code)


def _committed(c: WireClient) -> int:
    r = c.call(9, 7, group_id="disk-group", require_stable=False, topics=[{"name": "disk", "partition_indexes": [0]}])
    return r.topics[0].partitions[0].committed_offset


def test_full_disk_refuses_produce_with_storage_error_loses_nothing_and_recovers(
        small_disk: tuple[Path, Any]) -> None:
    data, resize = small_disk
    logs = data / "logs"
    placeholder = logs / "placeholder"  # deleted later: "space returns" without a remount
    placeholder.write_bytes(b"\0" * MIB)
    # Checkpoints every 100 ms: they keep failing while the disk is full, and must never be torn.
    broker = BrokerProcess(data, {"log.segment.bytes": str(512 * 1024),
                                  "log.flush.offset.checkpoint.interval.ms": "100"}).start()
    acked: list[int] = []
    codes: dict[int, int] = {}
    try:
        with WireClient(broker.bootstrap) as c:
            ensure_topic(c, "disk")
            assert _commit(c, 0) == 0  # the group's offsets partition has its first blocks
            i = 0
            started = time.monotonic()
            while codes.get(STORAGE_ERROR, 0) < 5:  # a full disk answers 56, again and again
                assert time.monotonic() - started < 60 and i < 2000, (i, codes)
                t = time.monotonic()
                r = produce(c, "disk", 0, _batch(i, 10_000))
                assert time.monotonic() - t < 5, "a produce on a full disk hung"
                code = int(r.error_code)
                codes[code] = codes.get(code, 0) + 1
                if code == 0:
                    assert r.base_offset == len(acked)
                    acked.append(i)
                i += 1
            assert set(codes) == {0, STORAGE_ERROR}, codes
            print(f"full disk after {len(acked)} acked batches of 10 kB; answers {codes}")
            # Not one block left: offset commits fail the way Kafka's coordinator reports a storage
            # error (NOT_COORDINATOR, the client retries), and the last one that worked is kept.
            ballast = logs / "ballast"
            fill_to_zero(ballast)
            commit_codes = [_commit(c, n) for n in range(1, 200)]
            assert set(commit_codes) == {0, 16} and commit_codes[0] == 0, commit_codes
            last_commit = commit_codes.index(16)
            assert _committed(c) == last_commit
            time.sleep(0.3)  # a few checkpoint rounds fail meanwhile
            assert assert_logs_whole(logs / "disk-0") == len(acked)  # no refused bytes stayed
            assert fetch_values(c, "disk") == [_value(n, 10_000) for n in acked]
            assert not list(logs.glob("*.tmp")) and not list(logs.glob("*/*.tmp"))

            ballast.unlink()  # space returns: produce and commit work again, no restart
            placeholder.unlink()
            for _ in range(20):
                r = produce(c, "disk", 0, _batch(i, 10_000))
                assert (int(r.error_code), r.base_offset) == (0, len(acked))
                acked.append(i)
                i += 1
            assert _commit(c, 500) == 0 and _committed(c) == 500
            while int(produce(c, "disk", 0, _batch(i, 10_000)).error_code) == 0:  # full again
                acked.append(i)
                i += 1
                assert i < 4000
        # SIGTERM on a full disk: the checkpoints cannot be written, the broker must still exit.
        assert broker.stop() == 0
        assert_logs_whole(logs / "disk-0")
        resize(32)
        offset = broker.log_path.stat().st_size
        broker.start()
        restart_log = broker.log_path.read_bytes()[offset:].decode(errors="replace")
        assert "truncated" not in restart_log and "invalid data" not in restart_log, restart_log
        with WireClient(broker.bootstrap) as c:
            assert _committed(c) == 500
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "disk-check", "log_level": 3,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            consumer.assign([TopicPartition("disk", 0, 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < len(acked) and time.monotonic() < deadline:
                got += [m.value() for m in consumer.consume(500, 0.2) if m.error() is None]
            assert got == [_value(n, 10_000) for n in acked]
        finally:
            consumer.close()
        no_traceback(broker)
    finally:
        broker.stop()


def _full_disk_small_batches(data: Path, batches: int) -> None:
    logs = data / "logs"
    broker = BrokerProcess(data, {"log.segment.bytes": str(64 * 1024), "log.index.interval.bytes": "1"}).start()
    ballast = logs / "ballast"
    acked: list[int] = []
    refused = 0
    try:
        with WireClient(broker.bootstrap) as c:
            ensure_topic(c, "edge")
            assert int(produce(c, "edge", 0, _batch(-1, 50)).error_code) == 0
            acked.append(-1)
            ballast_size = fill_to_zero(ballast)  # take every free block
            for i in range(batches):
                r = produce(c, "edge", 0, _batch(i, 50))
                code = int(r.error_code)
                if code == 0:
                    assert r.base_offset == len(acked)
                    acked.append(i)
                    continue
                assert code == STORAGE_ERROR, (i, code, r.error_message)
                refused += 1
                ballast_size = max(0, ballast_size - 4096)  # free one page; the next append may take it
                os.truncate(ballast, ballast_size)
            assert broker.proc is not None and broker.proc.poll() is None, broker.tail()
            segments = len(list((logs / "edge-0").glob("*.log")))
            print(f"small batches on a full disk: {len(acked)} acked, {refused} refused with 56, {segments} segments")
            assert refused > batches // 100 and segments > 1
            assert assert_logs_whole(logs / "edge-0") == len(acked)
            assert fetch_values(c, "edge") == [_value(n, 50) for n in acked]
        no_traceback(broker)
    finally:
        broker.stop()


def test_full_disk_at_index_pages_and_segment_rolls_never_crashes(small_disk: tuple[Path, Any]) -> None:
    _full_disk_small_batches(small_disk[0], 2500)


@pytest.mark.slow
@pytest.mark.timeout(300 + SOAK_DISK_BATCHES // 20)
def test_soak_full_disk_small_batches(small_disk: tuple[Path, Any]) -> None:
    _full_disk_small_batches(small_disk[0], SOAK_DISK_BATCHES)


# -- many connections -------------------------------------------------------------------------------


def _open_idle(bootstrap: str, n: int, handshaken: int) -> list[socket.socket]:
    host, port = bootstrap.rsplit(":", 1)
    socks: list[socket.socket] = []
    try:
        for i in range(n):
            s = socket.create_connection((host, int(port)), timeout=10)
            socks.append(s)
            if i % 10 == 0 and i // 10 < handshaken:  # these completed ApiVersions, then went quiet
                s.sendall(encode_request(18, 3, 1, client_software_name="idle", client_software_version="1"))
                (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
                assert len(s.recv(size, socket.MSG_WAITALL)) == size
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def _all_closed_by_broker(socks: list[socket.socket], timeout_s: float) -> int:
    """Wait until every socket reads EOF; returns how many did."""
    pending = {s.fileno(): s for s in socks}
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout_s
    closed = 0
    while pending and time.monotonic() < deadline:
        for fd, _ in poller.poll(200):
            s = pending.pop(fd)
            poller.unregister(fd)
            try:
                closed += s.recv(1) == b""
            except ConnectionError:
                closed += 1
    return closed


def _idle_connections(tmp: Path, n: int) -> None:
    idle_ms = max(4000, 2 * n)  # the last connection opens a few seconds after the first
    broker = BrokerProcess(tmp, {"connections.max.idle.ms": str(idle_ms)}).start()
    socks: list[socket.socket] = []
    try:
        assert broker.proc is not None
        pid = broker.proc.pid
        quiet = open_sockets(pid)  # the listener and what a broker holds with no client
        with WireClient(broker.bootstrap) as c:
            ensure_topic(c, "lat")
        wait_for("the broker to close the admin connection", lambda: open_sockets(pid) <= quiet, 5)
        sockets_before = open_sockets(pid)
        base = client_latencies(broker.bootstrap, "lat")
        rss_before = rss_mib(pid)
        started = time.monotonic()
        socks = _open_idle(broker.bootstrap, n, handshaken=n // 10)
        opened_s = time.monotonic() - started
        wait_for("the broker to accept every connection", lambda: open_sockets(pid) >= sockets_before + n, 10)
        rss_during = rss_mib(pid)
        during = client_latencies(broker.bootstrap, "lat")
        print(f"{n} idle connections opened in {opened_s:.2f}s; broker RSS {rss_before:.0f} -> {rss_during:.0f} MiB")
        assert rss_during - rss_before < 16 + n * 16 / 1024, "more than 16 KiB of RSS per idle connection"
        assert_latency_sane(base, during, f"{n} idle connections")
        # connections.max.idle.ms closes every one of them (the last of them opened seconds after the first).
        closed = _all_closed_by_broker(socks, idle_ms / 1000 + opened_s + 10)
        assert closed == n, f"{n - closed} idle connections still open"
        wait_for("the broker to release the sockets", lambda: open_sockets(pid) <= sockets_before + 2, 10)
        no_traceback(broker)
    finally:
        for s in socks:
            s.close()
        broker.stop()


def test_a_thousand_idle_connections_cost_little_starve_nobody_and_expire(tmp_path: Path) -> None:
    _idle_connections(tmp_path / "b", 1000)


@pytest.mark.slow
@pytest.mark.timeout(300 + SOAK_IDLE_CONNECTIONS // 50)
def test_soak_many_idle_connections(tmp_path: Path) -> None:
    _idle_connections(tmp_path / "b", SOAK_IDLE_CONNECTIONS)


# -- slow clients -------------------------------------------------------------------------------------


def _fill(bootstrap: str, topic: str, mib: int) -> None:
    with WireClient(bootstrap) as c:
        ensure_topic(c, topic)
        for i in range(mib * 10):
            b = BatchBuilder()
            b.append(os.urandom(100_000), key=b"%d" % i)
            assert int(produce(c, topic, 0, b.build()).error_code) == 0


def _big_fetch(correlation: int, topic: str) -> bytes:
    part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 16 * MIB, "current_leader_epoch": -1,
            "log_start_offset": -1, "last_fetched_epoch": -1}
    return encode_request(1, 12, correlation, max_wait=0, min_bytes=0, max_bytes=16 * MIB, isolation_level=0,
                          session_id=0, session_epoch=-1, replica_id=-1, rack_id="", forgotten_topics_data=[],
                          topics=[{"topic": topic, "partitions": [part]}])


def test_slow_clients_hold_no_memory_starve_nobody_and_stalled_ones_are_closed(tmp_path: Path) -> None:
    idle_ms = 3000
    broker = BrokerProcess(tmp_path / "b", {"connections.max.idle.ms": str(idle_ms)}).start()  # 100 MiB requests
    host, port = broker.bootstrap.rsplit(":", 1)
    addr = (host, int(port))
    clients: list[socket.socket] = []
    stop = threading.Event()
    try:
        assert broker.proc is not None
        pid = broker.proc.pid
        quiet = open_sockets(pid)  # the listener and what a broker holds with no client
        _fill(broker.bootstrap, "big", 8)
        with WireClient(broker.bootstrap) as c:
            ensure_topic(c, "lat")
        wait_for("the broker to close the admin connections", lambda: open_sockets(pid) <= quiet, 5)
        sockets_before = open_sockets(pid)
        base = client_latencies(broker.bootstrap, "lat")
        rss_before = rss_mib(pid)

        # 20 connections announce a 100 MiB request and trickle a byte now and then.
        announcers = [socket.create_connection(addr) for _ in range(20)]
        for s in announcers:
            s.sendall(struct.pack(">i", 104_857_600 - 1) + b"\x00\x00")
        # 5 connections pipeline 20 fetches of 8 MiB each and never read a byte of the answers.
        non_readers = [socket.create_connection(addr) for _ in range(5)]
        for s in non_readers:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            s.sendall(b"".join(_big_fetch(n, "big") for n in range(20)))
        clients += announcers + non_readers
        # 5 connections send a real produce request one byte at a time, 5 ms apart.
        trickled: list[int] = []

        def trickle(k: int) -> None:
            b = BatchBuilder()
            b.append(b"trickled %d" % k)
            frame = encode_request(0, 9, 7, acks=-1, timeout=10_000, transactional_id=None, topic_data=[
                {"name": "lat", "partition_data": [{"index": 0, "records": b.build()}]}])
            with socket.create_connection(addr) as s:
                for byte in frame:
                    if stop.is_set():
                        return
                    s.sendall(bytes([byte]))
                    time.sleep(0.005)
                s.settimeout(10)
                (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
                trickled.append(len(s.recv(size, socket.MSG_WAITALL)))

        tricklers = [threading.Thread(target=trickle, args=(k,)) for k in range(5)]
        for t in tricklers:
            t.start()

        def keep_trickling() -> None:
            while not stop.wait(0.2):
                for s in announcers:
                    s.sendall(b"\x00")

        announcing = threading.Thread(target=keep_trickling)
        announcing.start()
        during = client_latencies(broker.bootstrap, "lat")
        rss_during = rss_mib(pid)
        for t in tricklers:
            t.join(30)
        assert len(trickled) == 5, "a request trickled one byte at a time was not answered"
        print(f"slow clients: broker RSS {rss_before:.0f} -> {rss_during:.0f} MiB")
        assert rss_during - rss_before < 64, "slow clients made the broker hold memory they never sent"
        assert_latency_sane(base, during, "20 announcers, 5 non-readers, 5 byte-at-a-time producers")

        # Quiet now: every stalled connection (no request progress, or no response read) is closed.
        stop.set()
        announcing.join(10)
        wait_for("the broker to close every stalled connection", lambda: open_sockets(pid) <= sockets_before + 2,
                 idle_ms / 1000 + 10)
        assert rss_mib(pid) - rss_before < 64
        no_traceback(broker)
    finally:
        stop.set()
        for s in clients:
            s.close()
        broker.stop()


def test_running_out_of_file_descriptors_mid_create_topics_rolls_the_topic_back(tmp_path: Path) -> None:
    """Each partition holds a few descriptors (the .log, two mapped indexes): a CreateTopics that runs out
    of them part-way must not leave a half-made topic (served, and reloaded so after a restart). It gets
    KAFKA_STORAGE_ERROR naming the cause, the topic does not exist, and once descriptors are available the
    same name is created whole - also across a restart."""
    import resource

    from confluent_kafka.admin import AdminClient, NewTopic

    broker = BrokerProcess(tmp_path / "fds").start()
    try:
        assert broker.proc is not None
        pid = broker.proc.pid
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.list_topics(timeout=10).topics is not None  # the admin connection is open
        in_use = len(os.listdir(f"/proc/{pid}/fd"))
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        limit = in_use + 60  # room for ~20 partitions, not 200 (the soft limit: no privilege needed)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
        future = admin.create_topics([NewTopic("wide", 200, 1)], operation_timeout=10)["wide"]
        with pytest.raises(Exception) as info:
            future.result(timeout=30)
        error = info.value.args[0]
        assert error.code() == STORAGE_ERROR and "Too many open files" in error.str(), error
        assert "wide" not in admin.list_topics(timeout=10).topics

        # descriptors back: the same name is created whole, and serves
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        admin.create_topics([NewTopic("wide", 200, 1)], operation_timeout=10)["wide"].result(timeout=30)
        assert len(admin.list_topics(timeout=10).topics["wide"].partitions) == 200
        with WireClient(broker.bootstrap) as c:
            batch = BatchBuilder()
            batch.append(b"last partition")
            assert int(produce(c, "wide", 199, batch.build()).error_code) == 0
        broker.stop()
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert len(admin.list_topics(timeout=10).topics["wide"].partitions) == 200
        assert "Traceback" not in broker.tail()
    finally:
        broker.stop()
