"""Hostile frames for a live broker: seeds, mutations, a sender that learns what the broker did.

Shared by the fast fuzz test in ``make test`` (``tests/broker/test_fuzz.py``, >= 10k frames) and the
soak (``tests/reliability/test_fuzz_soak.py``, >= 100k frames). Three kinds of seed frames:

- synthetic: valid requests of every served API across versions, built with kio, the transaction
  APIs included (:func:`transaction_seed_frames`: built around a transactional id the target really
  initialised, so their valid replays reach the coordinator's and the log's success paths, not only
  their error checks);
- real client frames: what confluent-kafka, kafka-python and aiokafka actually sent during a
  produce / consume-in-a-group / admin session (confluent-kafka's also commits and aborts a
  transaction with its consumer's offsets), recorded by :class:`CaptureProxy`, a small asyncio
  TCP proxy the broker advertises as its address (so the clients keep talking through it after
  bootstrap);
- the golden client batches (``tests/golden/client-batches``: compressed batches from the same three
  clients) wrapped in Produce requests.

Captured frames are replayed with two normalisations so that they are answered at once rather than
parked: Fetch's ``max_wait`` becomes 0, and the group ids (all ``fuzz-grp-XXNN``, 13 bytes) are
replaced by a fresh id of the same length per frame, so a replayed JoinGroup does not wait for the
members of the captured group to rejoin. Everything else is the client's bytes.

The broker's RSS is sampled from ``/proc/<pid>/status`` while frames go in: size prefixes up to
2**31-1 must not turn into allocations, and the ``announce`` frames (a size prefix up to
``socket.request.max.bytes`` and a few bytes, on connections held open) must not either.
"""

from __future__ import annotations

import asyncio
import collections
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, decode_response, encode_request

from strata.client.wire import ADMIN_CLIENT_ID
from strata.protocol.frame import decode_request, request_class
from strata.protocol.records import BatchBuilder

MAX_REQUEST = 256 * 1024
TOPIC = "fuzz-topic"
REAL_TOPIC = "fuzz-real"
TXN_ID = "fuzz-txn"  # the transaction the seeds add partitions to, produce in, commit and abort
INIT_ID = "fuzz-txn-init"  # the id the InitProducerId seeds bump (each bump fences the older epochs)
TXN_GROUP = "fuzz-grp-tx01"
PING_TIMEOUT_S = 1.0
PING_BASE = 0x40000000  # correlation ids of pings; seeds use small ones
SIZE = struct.Struct(">i")
GROUP_ID = re.compile(rb"fuzz-grp-[a-z]{2}[0-9]{2}")
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "client-batches"
FRAMES_PER_EXAMPLE = (100, 130)
RSS_SAMPLE_EVERY = 500
HELD_CONNECTIONS = 16


def _batch(*values: bytes, pid: int = -1, seq: int = -1) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)
    for v in values:
        b.append(v, key=b"k", headers=[("h", b"v")])
    return b.build()


def _fetch_topics(topic: str) -> list[dict[str, object]]:
    part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 65536, "current_leader_epoch": -1,
            "log_start_offset": -1, "last_fetched_epoch": -1}
    return [{"topic": topic, "topic_id": None, "partitions": [part]}]


def seed_frames() -> list[bytes]:
    """Valid requests (size prefix included) for the served APIs across versions, and a few others."""
    out = []
    corr = 1

    def add(key: int, version: int, **fields: object) -> None:
        nonlocal corr
        out.append(encode_request(key, version, corr, **fields))
        corr += 1

    for v in (0, 1, 2, 3, 4):
        add(18, v, client_software_name="fuzz", client_software_version="1.0")
    for v in (0, 1, 4, 9, 12, 13):
        add(3, v, topics=[{"name": TOPIC, "topic_id": None}], allow_auto_topic_creation=False,
            include_topic_authorized_operations=True, include_cluster_authorized_operations=True)
    add(3, 12, topics=None)
    for v in (3, 7, 9, 11):
        for acks in (-1, 0):
            add(0, v, acks=acks, timeout=1000, transactional_id=None, topic_data=[
                {"name": TOPIC, "partition_data": [{"index": 0, "records": _batch(b"fuzz", b"value")}]}])
    add(0, 9, acks=1, timeout=1000, transactional_id=None, topic_data=[
        {"name": TOPIC, "partition_data": [{"index": 0, "records": _batch(b"idem", pid=0, seq=0)}]}])
    for v in (4, 7, 11, 12, 13, 16, 17):
        add(1, v, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=v % 2, session_id=0,
            session_epoch=-1, replica_id=-1, rack_id="", forgotten_topics_data=[], topics=_fetch_topics(TOPIC))
    for v in (1, 2, 5, 7, 9):
        add(2, v, replica_id=-1, isolation_level=0, topics=[{"name": TOPIC, "partitions": [
            {"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1} for ts in (-1, -2, -3, 0)]}])
    for v in (0, 2, 4):
        add(22, v, transactional_id=None, transaction_timeout=1000, producer_id=-1, producer_epoch=-1)
    for v in (2, 3, 4):
        add(23, v, replica_id=-1, topics=[{"topic": TOPIC, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}])
    for v in (0, 1):
        add(60, v, include_cluster_authorized_operations=True, endpoint_type=1)
    # APIs this broker may not serve: answered with an error or served by a later handler, never a crash.
    add(19, 5, timeout=1000, validate_only=True, topics=[
        {"name": "fuzz-created", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}])
    add(10, 4, key_type=0, coordinator_keys=["fuzz-grp-sy01"])
    add(32, 4, include_synonyms=False, include_documentation=False, resources=[
        {"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}])
    return out


def _txn_batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    for v in values:
        b.append(v, key=b"k")
    return b.build()


def transaction_seed_frames(txn: tuple[int, int] = (0, 0), init: tuple[int, int] = (1, 0)) -> list[bytes]:
    """Valid requests of the transaction APIs. ``txn`` is the (producer id, epoch) of ``TXN_ID``, ``init`` that
    of ``INIT_ID`` (:func:`prepare_transaction` gets them from the target). The InitProducerId seeds (a
    transactional id at each version, and KIP-360's re-initialisation) bump ``INIT_ID``, so that replaying
    them does not fence the others, which work on ``TXN_ID``: AddPartitionsToTxn v3 and v4 (``verify_only``,
    the broker-to-broker form, and without it), a transactional Produce, AddOffsetsToTxn, TxnOffsetCommit,
    EndTxn (commit and abort), WriteTxnMarkers (accepted from anyone without an authorizer, as in Kafka),
    DescribeTransactions, ListTransactions and DescribeProducers."""
    pid, epoch = txn
    out = []
    corr = 1000

    def add(key: int, version: int, client_id: str = "strata-test", **fields: object) -> None:
        nonlocal corr
        out.append(encode_request(key, version, corr, client_id=client_id, **fields))
        corr += 1

    for v in (0, 2, 3, 4, 5):
        add(22, v, transactional_id=INIT_ID, transaction_timeout=60_000, producer_id=-1, producer_epoch=-1)
    add(22, 4, transactional_id=INIT_ID, transaction_timeout=60_000, producer_id=init[0], producer_epoch=init[1])
    for v in (0, 3):
        add(24, v, v3_and_below_transactional_id=TXN_ID, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=[{"name": TOPIC, "partitions": [0]}])
    for verify_only in (True, False):
        add(24, 4, transactions=[{"transactional_id": TXN_ID, "producer_id": pid, "producer_epoch": epoch,
                                  "verify_only": verify_only, "topics": [{"name": TOPIC, "partitions": [0]}]}])
    for seq in (1, 2):  # the prepared transaction wrote sequence 0
        add(0, 9, acks=-1, timeout=1000, transactional_id=TXN_ID, topic_data=[
            {"name": TOPIC, "partition_data": [{"index": 0, "records": _txn_batch(pid, epoch, seq, b"txn")}]}])
    add(25, 3, transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, group_id=TXN_GROUP)
    for v in (0, 3):
        add(28, v, transactional_id=TXN_ID, group_id=TXN_GROUP, producer_id=pid, producer_epoch=epoch,
            generation_id=-1, member_id="", group_instance_id=None, topics=[
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                "committed_leader_epoch": -1, "committed_metadata": ""}]}])
    for commit in (True, False):
        add(26, 3, transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, committed=commit)
    for client_id in ("strata-test", ADMIN_CLIENT_ID):
        add(27, 1, client_id=client_id, markers=[
            {"producer_id": pid, "producer_epoch": epoch, "transaction_result": False, "coordinator_epoch": 0,
             "topics": [{"name": TOPIC, "partition_indexes": [0]}]}])
    add(65, 0, transactional_ids=[TXN_ID, INIT_ID, "fuzz-unknown"])
    add(66, 0, state_filters=[], producer_id_filters=[])
    add(66, 1, state_filters=["Ongoing"], producer_id_filters=[pid], duration_filter=0)
    add(61, 0, topics=[{"name": TOPIC, "partition_indexes": [0, 1]},
                       {"name": "fuzz-missing", "partition_indexes": [0]}])
    return out


def prepare_transaction(bootstrap: str, timeout_s: float = 30.0) -> tuple[tuple[int, int], tuple[int, int]]:
    """Initialise ``TXN_ID`` and ``INIT_ID`` on the target (creating ``__transaction_state``) and commit one
    transaction of each, so the fuzzed transaction frames meet a coordinator that knows them; their
    (producer id, epoch)."""
    out = []
    with WireClient(bootstrap, timeout_s) as wire:
        for tid in (TXN_ID, INIT_ID):
            deadline = time.monotonic() + timeout_s
            while True:  # FindCoordinator creates __transaction_state on first use; its partitions then load
                wire.call(10, 3, key=tid, key_type=1)
                r = wire.call(22, 4, transactional_id=tid, transaction_timeout=60_000, producer_id=-1,
                              producer_epoch=-1)
                if int(r.error_code) == 0:
                    pid, epoch = int(r.producer_id), int(r.producer_epoch)
                    break
                assert time.monotonic() < deadline, f"InitProducerId for {tid}: error {int(r.error_code)}"
                time.sleep(0.1)
            r = wire.call(24, 3, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                          v3_and_below_producer_epoch=epoch,
                          v3_and_below_topics=[{"name": TOPIC, "partitions": [0]}])
            assert [int(p.partition_error_code) for t in r.results_by_topic_v3_and_below
                    for p in t.results_by_partition] == [0], r
            r = wire.call(0, 9, acks=-1, timeout=10_000, transactional_id=tid, topic_data=[
                {"name": TOPIC, "partition_data": [{"index": 0, "records": _txn_batch(pid, epoch, 0, b"prepared")}]}])
            assert int(r.responses[0].partition_responses[0].error_code) == 0, r
            assert int(wire.call(26, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                 committed=True).error_code) == 0
            out.append((pid, epoch))
    return out[0], out[1]


def golden_produce_frames() -> list[bytes]:
    """The captured client batches (every codec of three clients), each in a Produce v9 request."""
    out = []
    for i, path in enumerate(sorted(GOLDEN.glob("*.batch"))):
        out.append(encode_request(0, 9, 500 + i, acks=-1, timeout=1000, transactional_id=None, topic_data=[
            {"name": TOPIC, "partition_data": [{"index": 0, "records": path.read_bytes()}]}]))
    assert out, f"no golden batches in {GOLDEN}"
    return out


# -- real client frames --------------------------------------------------------------------------


class CaptureProxy:
    """127.0.0.1:port -> the broker; records every request frame clients send through it.

    An asyncio server on its own thread. ``label`` names the client session whose connections are
    being opened, so each frame is tagged with the client library that sent it.
    """

    def __init__(self) -> None:
        self.frames: list[tuple[str, bytes]] = []
        self.label = "?"
        self.target: tuple[str, int] | None = None
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="capture-proxy", daemon=True)

    def start(self) -> CaptureProxy:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop)
        self._server = fut.result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        label = self.label
        assert self.target is not None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return

        async def client_to_broker() -> None:
            pending = bytearray()
            try:
                while data := await reader.read(65536):
                    up_writer.write(data)
                    pending += data
                    while len(pending) >= 4:
                        (size,) = SIZE.unpack_from(pending)
                        if len(pending) < 4 + size:
                            break
                        self.frames.append((label, bytes(pending[: 4 + size])))
                        del pending[: 4 + size]
                    await up_writer.drain()
            finally:
                up_writer.close()

        async def broker_to_client() -> None:
            try:
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            finally:
                writer.close()

        await asyncio.gather(client_to_broker(), broker_to_client(), return_exceptions=True)


def _confluent_session(bootstrap: str, records: int) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        OffsetSpec,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(REAL_TOPIC, 2, 1, config={"retention.ms": "3600000"}),
                         NewTopic("fuzz-real-tmp", 1, 1)], operation_timeout=10)[REAL_TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "lz4",
                         "linger.ms": 5, "log_level": 3})
    for i in range(records):
        producer.produce(REAL_TOPIC, key=b"k%d" % i, value=b"confluent %d " % i * 8, headers=[("h", b"%d" % i)])
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-grp-ck01", "log_level": 3,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([REAL_TOPIC])
        got = 0
        deadline = time.monotonic() + 30
        while got < records and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(500, 0.2) if m.error() is None)
        assert got >= records, got
        consumer.commit(asynchronous=False)
        _confluent_transactions(bootstrap, consumer)
    finally:
        consumer.close()
    res = ConfigResource(ResourceType.TOPIC, REAL_TOPIC)
    admin.describe_configs([res], request_timeout=10)[res].result(30)
    res = ConfigResource(ResourceType.TOPIC, REAL_TOPIC, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=10)[res].result(30)
    tp = TopicPartition(REAL_TOPIC, 0)
    admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=10)[tp].result(30)
    admin.delete_records([TopicPartition(REAL_TOPIC, 1, 1)], operation_timeout=10)
    admin.create_partitions([NewPartitions("fuzz-real-tmp", 2)], operation_timeout=10)["fuzz-real-tmp"].result(30)
    admin.list_consumer_groups(request_timeout=10).result(30)
    admin.describe_consumer_groups(["fuzz-grp-ck01"], request_timeout=10)["fuzz-grp-ck01"].result(30)
    admin.describe_cluster(request_timeout=10).result(30)
    admin.delete_topics(["fuzz-real-tmp"], operation_timeout=10)["fuzz-real-tmp"].result(30)


def _confluent_transactions(bootstrap: str, consumer: Any) -> None:
    """A transaction committed with the consumer's offsets (consume-transform-produce), then one aborted."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fuzz-real-txn", "linger.ms": 5,
                         "log_level": 3})
    producer.init_transactions(30)
    for commit in (True, False):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(REAL_TOPIC, key=b"t%d" % i, value=b"transactional %d" % i)
        assert producer.flush(30) == 0
        if commit:
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def _kafka_python_session(bootstrap: str, records: int) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip", linger_ms=5)
    for i in range(records):
        producer.send(REAL_TOPIC, key=b"k%d" % i, value=b"kafka-python %d " % i * 8, headers=[("h", b"1")])
    producer.flush(30)
    producer.close(10)
    consumer = KafkaConsumer(REAL_TOPIC, bootstrap_servers=bootstrap, group_id="fuzz-grp-kp01",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             # kafka-python may lead a join before its first Metadata answer, assign nothing and
                             # rejoin only on its next refresh (5 min by default): the broker has no join delay here
                             metadata_max_age_ms=1000)
    try:
        got = 0
        deadline = time.monotonic() + 30
        while got < records and time.monotonic() < deadline:
            got += sum(len(v) for v in consumer.poll(timeout_ms=200).values())
        assert got >= records, got
        consumer.commit()
    finally:
        consumer.close()


def _aiokafka_session(bootstrap: str, records: int) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def session() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="snappy",
                                    enable_idempotence=True, linger_ms=5)
        await producer.start()
        try:
            for i in range(records):
                await producer.send(REAL_TOPIC, key=b"k%d" % i, value=b"aiokafka %d " % i * 8)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(REAL_TOPIC, bootstrap_servers=bootstrap, group_id="fuzz-grp-ai01",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            got = 0
            deadline = time.monotonic() + 30
            while got < records and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=200)
                got += sum(len(v) for v in batches.values())
            assert got >= records, got
            await consumer.commit()
        finally:
            await consumer.stop()

    asyncio.run(session())


SESSIONS: dict[str, Callable[[str, int], None]] = {
    "confluent-kafka": _confluent_session, "kafka-python": _kafka_python_session, "aiokafka": _aiokafka_session,
}


def _zero_fetch_wait(frame: bytes) -> bytes:
    """A Fetch frame with ``max_wait`` 0 (the client's 500 ms long poll would park every replay)."""
    payload = frame[4:]
    request = decode_request(payload)
    cls = request_class(request.api_key, request.api_version)
    assert cls is not None
    _, header_len = entity_reader(cls.__header_schema__)(payload, 0)
    at = header_len + (4 if request.api_version < 15 else 0)  # replica_id comes first before v15
    patched = payload[:at] + b"\0\0\0\0" + payload[at + 4:]
    assert not decode_request(patched).body.max_wait  # type: ignore[union-attr] (a timedelta)
    return frame[:4] + patched


@dataclass
class Capture:
    frames: list[tuple[str, bytes]]  # (client library, frame), normalised, deduplicated by shape

    def by_client(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for label, _ in self.frames:
            out[label] = out.get(label, 0) + 1
        return out

    def apis(self) -> set[int]:
        return {struct.unpack_from(">h", f, 4)[0] for _, f in self.frames}


def capture_real_frames(proxy: CaptureProxy, clients: tuple[str, ...], records: int = 200,
                        per_shape: int = 3) -> Capture:
    """Run each client's session through ``proxy``; keep up to ``per_shape`` frames per (client, API, version).

    Frames are kept in the order they were sent, so the seed list (and hypothesis' choices over it)
    is the same from run to run.
    """
    bootstrap = f"127.0.0.1:{proxy.port}"
    for name in clients:
        proxy.label = name
        start = len(proxy.frames)
        SESSIONS[name](bootstrap, records)
        assert len(proxy.frames) > start, f"{name} sent nothing through the proxy"
    kept: list[tuple[str, bytes]] = []
    shapes: dict[tuple[str, int, int], int] = {}
    for label, frame in list(proxy.frames):
        key, version = struct.unpack_from(">hh", frame, 4)
        shape = (label, key, version)
        if shapes.get(shape, 0) >= per_shape:
            continue
        shapes[shape] = shapes.get(shape, 0) + 1
        if key == 1:
            frame = _zero_fetch_wait(frame)
        kept.append((label, frame))
    return Capture(kept)


# -- mutations ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    data: bytes
    kind: str
    final: bool = False  # leaves the connection mid-frame or is refused outright: send, then close


def _reframe(payload: bytes, kind: str) -> Frame:
    return Frame(SIZE.pack(len(payload)) + payload, kind)


KINDS = ["valid", "flip", "flip", "flip", "truncate", "extend", "garbage-body", "unknown-version", "unknown-key",
         "random-framed", "oversize", "negative-size", "raw-random", "partial", "zero-size", "short-header",
         "announce"]
LARGE_FRAME = 32 * 1024  # the broker gives frames from this size on a buffer of their own


def frames(seeds: list[bytes], max_request: int = MAX_REQUEST) -> st.SearchStrategy[Frame]:
    """Hostile frames derived from ``seeds`` (each a whole frame, size prefix included).

    ``announce``: a size prefix up to ``max_request`` (the broker's ``socket.request.max.bytes``)
    followed by a few bytes of a real frame, on a connection that then stays open: the sender holds
    the last :data:`HELD_CONNECTIONS` of them, each claiming a frame buffer the peer never fills.
    """

    @st.composite
    def one(draw: st.DrawFn) -> Frame:
        seed = draw(st.sampled_from(seeds))
        if GROUP_ID.search(seed):  # a fresh group per frame: a replayed JoinGroup never waits for others
            fresh = b"fuzz-grp-" + draw(st.binary(min_size=4, max_size=4)).hex()[:4].encode()
            seed = GROUP_ID.sub(fresh, seed)
        payload = seed[4:]
        kind = draw(st.sampled_from(KINDS))
        if kind == "valid":
            return Frame(seed, kind)
        if kind == "flip":
            body = bytearray(payload)
            for _ in range(draw(st.integers(1, 4))):
                body[draw(st.integers(0, len(body) - 1))] = draw(st.integers(0, 255))
            return _reframe(bytes(body), kind)
        if kind == "truncate":
            return _reframe(payload[: draw(st.integers(0, len(payload) - 1))], kind)
        if kind == "extend":
            return _reframe(payload + draw(st.binary(min_size=1, max_size=32)), kind)
        if kind == "garbage-body":  # header from a real request (key, version, correlation id, client id)
            cut = draw(st.integers(8, min(len(payload), 40)))
            return _reframe(payload[:cut] + draw(st.binary(max_size=200)), kind)
        if kind == "unknown-version":
            version = draw(st.one_of(st.integers(-32768, -1), st.integers(19, 32767), st.integers(0, 20)))
            return _reframe(payload[:2] + struct.pack(">h", version) + payload[4:], kind)
        if kind == "unknown-key":
            key = draw(st.one_of(st.integers(-32768, -1), st.integers(93, 32767)))
            return _reframe(struct.pack(">h", key) + payload[2:], kind)
        if kind == "random-framed":
            return _reframe(draw(st.binary(max_size=300)), kind)
        if kind == "zero-size":
            return Frame(SIZE.pack(0), kind)
        if kind == "short-header":
            return _reframe(payload[: draw(st.integers(1, 7))], kind)
        if kind == "announce":
            size = draw(st.integers(LARGE_FRAME, max_request))
            return Frame(SIZE.pack(size) + payload[: draw(st.integers(0, min(len(payload), 64)))], kind, final=True)
        if kind == "oversize":
            size = draw(st.integers(max_request + 1, 2**31 - 1))
            return Frame(SIZE.pack(size) + payload, kind, final=True)
        if kind == "negative-size":
            return Frame(SIZE.pack(draw(st.integers(-(2**31), -1))) + payload, kind, final=True)
        if kind == "raw-random":
            return Frame(draw(st.binary(min_size=1, max_size=300)), kind, final=True)
        assert kind == "partial"  # the original size prefix, then the connection ends mid-frame
        return Frame(seed[: draw(st.integers(1, len(seed) - 1))], kind, final=True)

    return one()


# -- sending -----------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


@dataclass
class Stats:
    sent: int = 0
    answered: int = 0
    closed_by_broker: int = 0
    stalled: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    rss_samples_kib: list[int] = field(default_factory=list)

    def summary(self, elapsed: float) -> str:
        rss = self.rss_samples_kib
        return (f"{self.sent} frames in {elapsed:.1f}s, {self.answered} answered, {self.closed_by_broker} closed by "
                f"the broker, {self.stalled} stalled; RSS {rss[0] // 1024}..{max(rss) // 1024} MiB over "
                f"{len(rss)} samples; kinds {sorted(self.kinds.items())}")


class FrameSender:
    """A pool of connections; each framed frame is followed by a ping to learn what the broker did."""

    def __init__(self, bootstrap: str, pid: int, pool: int = 4) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.addr = (host, int(port))
        self.pid = pid
        self.conns: list[socket.socket | None] = [None] * pool
        self.held: collections.deque[socket.socket] = collections.deque()
        self.turn = 0
        self.pings = 0
        self.stats = Stats()
        self.stats.rss_samples_kib.append(rss_kib(pid))

    def _conn(self, i: int) -> socket.socket:
        sock = self.conns[i]
        if sock is None:
            sock = socket.create_connection(self.addr, timeout=5)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conns[i] = sock
        return sock

    def _drop(self, i: int) -> None:
        sock = self.conns[i]
        self.conns[i] = None
        if sock is not None:
            sock.close()

    def close(self) -> None:
        for i in range(len(self.conns)):
            self._drop(i)
        while self.held:
            self.held.popleft().close()

    def _announce(self, frame: Frame) -> None:
        """A fresh connection that announces a large frame and stays open, never finishing it."""
        sock = socket.create_connection(self.addr, timeout=5)
        self.held.append(sock)
        if len(self.held) > HELD_CONNECTIONS:
            self.held.popleft().close()
        try:
            sock.sendall(frame.data)
        except ConnectionError:
            self.stats.closed_by_broker += 1

    def send(self, frame: Frame) -> None:
        i = self.turn = (self.turn + 1) % len(self.conns)
        sock = self._conn(i)
        self.stats.sent += 1
        self.stats.kinds[frame.kind] = self.stats.kinds.get(frame.kind, 0) + 1
        if self.stats.sent % RSS_SAMPLE_EVERY == 0:
            self.stats.rss_samples_kib.append(rss_kib(self.pid))
        if frame.kind == "announce":
            return self._announce(frame)
        try:
            sock.sendall(frame.data)
            if frame.final:
                if frame.kind in ("oversize", "negative-size"):
                    self._expect_close(sock)
                return self._drop(i)
            self.pings += 1
            ping = PING_BASE + self.pings
            sock.sendall(encode_request(18, 0, ping))
            self._await(sock, ping)
            self.stats.answered += 1
        except (ConnectionError, EOFError):
            self.stats.closed_by_broker += 1
            self._drop(i)
        except TimeoutError:  # e.g. a mutated Fetch long-polling for max_wait: leave it to the broker
            self.stats.stalled += 1
            self._drop(i)

    def _expect_close(self, sock: socket.socket) -> None:
        """A size prefix outside [0, socket.request.max.bytes] must close the connection at once."""
        sock.settimeout(5)
        try:
            while sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        self.stats.closed_by_broker += 1

    def _await(self, sock: socket.socket, ping: int) -> None:
        deadline = time.monotonic() + PING_TIMEOUT_S
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            (size,) = SIZE.unpack(_recv_exact(sock, 4))
            frame = _recv_exact(sock, size)
            if size >= 4 and SIZE.unpack_from(frame)[0] == ping:
                _, body = decode_response(18, 0, frame)
                assert int(body.error_code) == 0
                return


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def fuzz(broker: BrokerProcess, seeds: list[bytes], examples: int, max_request: int = MAX_REQUEST) -> Stats:
    """``examples`` hypothesis examples of 100-130 frames each, derandomized (the same frames every run)."""
    assert broker.proc is not None
    sender = FrameSender(broker.bootstrap, broker.proc.pid)
    started = time.monotonic()

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.lists(frames(seeds, max_request), min_size=FRAMES_PER_EXAMPLE[0], max_size=FRAMES_PER_EXAMPLE[1]))
    def send_batch(batch: list[Frame]) -> None:
        if failures:
            return
        for frame in batch:
            try:
                sender.send(frame)
            except Exception as e:  # reported below: hypothesis' own report of 100+ frames is unreadable
                failures.append((frame, e))
                return

    failures: list[tuple[Frame, Exception]] = []
    try:
        send_batch()
    finally:
        sender.close()
    if failures:
        frame, error = failures[0]
        raise AssertionError(f"frame #{sender.stats.sent} ({frame.kind}, {len(frame.data)} bytes: "
                             f"{frame.data[:120].hex()}) failed: {error!r}\n{broker.tail()}") from error
    sender.stats.rss_samples_kib.append(rss_kib(broker.proc.pid))
    print("fuzz:", sender.stats.summary(time.monotonic() - started))
    return sender.stats


def ensure_topics(bootstrap: str, *topics: str) -> None:
    """Create the topics the seeds name (through Metadata auto-creation), so their frames reach the log."""
    with WireClient(bootstrap) as wire:
        wire.call(3, 12, topics=[{"name": t, "topic_id": None} for t in topics], allow_auto_topic_creation=True,
                  include_topic_authorized_operations=False)


def assert_broker_survived(broker: BrokerProcess) -> None:
    assert broker.proc is not None and broker.proc.poll() is None, "broker died:\n" + broker.tail()
    log_text = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in log_text, log_text[log_text.index("Traceback") - 2000:][:6000]


def real_client_still_works(bootstrap: str, topic: str = "after-fuzz") -> None:
    """confluent-kafka still produces and consumes, and still runs transactions: one committed and one
    aborted, read back with ``read_committed`` (only the committed records) and ``read_uncommitted`` (both)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "log_level": 3})
    for i in range(100):
        p.produce(topic, key=b"%d" % i, value=b"v%d" % i)
    assert p.flush(15) == 0
    assert _read(bootstrap, topic, 100, "read_uncommitted") == [b"v%d" % i for i in range(100)]

    txn_topic = f"{topic}-txn"
    t = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "log_level": 3})
    t.init_transactions(30)
    for commit in (False, True):
        t.begin_transaction()
        for i in range(10):
            t.produce(txn_topic, key=b"%d" % i, value=(b"committed-%d" if commit else b"aborted-%d") % i)
        assert t.flush(30) == 0  # in the log before the abort (librdkafka drops what it has not sent yet)
        if commit:
            t.commit_transaction(30)
        else:
            t.abort_transaction(30)
    committed = [b"committed-%d" % i for i in range(10)]
    assert _read(bootstrap, txn_topic, 10, "read_committed") == committed
    assert _read(bootstrap, txn_topic, 20, "read_uncommitted") == [b"aborted-%d" % i for i in range(10)] + committed


def _read(bootstrap: str, topic: str, count: int, isolation: str, timeout_s: float = 30.0) -> list[bytes]:
    """The first ``count`` values of partition 0 at ``isolation``, and nothing after them for a moment."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{isolation}", "log_level": 3,
                  "enable.auto.commit": False, "isolation.level": isolation})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(100, 0.2) if m.error() is None]
        got += [m.value() for m in c.consume(100, 0.5) if m.error() is None]  # none beyond them
        return got
    finally:
        c.close()


class FuzzTarget:
    """A broker behind a :class:`CaptureProxy` it advertises, with the seeds of every kind captured."""

    def __init__(self, data_dir: Path, clients: tuple[str, ...], max_request: int = MAX_REQUEST) -> None:
        self.proxy = CaptureProxy().start()
        self.max_request = max_request
        self.broker = BrokerProcess(data_dir, {"socket.request.max.bytes": str(max_request),
                                               "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.proxy.port}"})
        self.clients = clients
        self.capture: Capture | None = None
        self.txn: tuple[tuple[int, int], tuple[int, int]] | None = None  # (producer id, epoch) of TXN_ID, INIT_ID

    def start(self) -> FuzzTarget:
        self.broker.start()
        self.proxy.target = ("127.0.0.1", self.broker.port or 0)
        ensure_topics(self.broker.bootstrap, TOPIC)
        self.txn = prepare_transaction(self.broker.bootstrap)
        started = time.monotonic()
        self.capture = capture_real_frames(self.proxy, self.clients)
        print(f"captured {len(self.capture.frames)} real frames in {time.monotonic() - started:.1f}s: "
              f"{self.capture.by_client()}, APIs {sorted(self.capture.apis())}")
        return self

    def seeds(self) -> list[bytes]:
        assert self.capture is not None and self.txn is not None
        return (seed_frames() + transaction_seed_frames(*self.txn) + golden_produce_frames()
                + [f for _, f in self.capture.frames])

    def stop(self) -> None:
        try:
            self.broker.stop()
        finally:
            self.proxy.stop()


def fuzz_target(tmp: Path, clients: tuple[str, ...], max_request: int = MAX_REQUEST) -> Iterator[FuzzTarget]:
    target = FuzzTarget(tmp, clients, max_request)
    try:
        yield target.start()
    finally:
        target.stop()

