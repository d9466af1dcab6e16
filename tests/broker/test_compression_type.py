"""``compression.type`` applied over real sockets: what is on disk uses the topic's codec, what clients read is
what producers sent.

Kafka's ``LogValidator`` re-encodes a produced batch whose codec is not the target one (the topic's
``compression.type``, else the broker's, unless ``producer``), keeping producer id, epoch, sequence,
the transactional flag, keys, values, headers and timestamps; offsets are the log's; transaction markers keep
their bytes. Each case produces with confluent-kafka using another codec than the topic's, reads the
partition's ``.log`` files for the codec of every batch, and reads the records back with every client
installed: confluent-kafka, kafka-python, aiokafka and kcat (skipped only when its binary is missing).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from tests.broker.harness import BrokerProcess

from strata.protocol.records import BatchHeader, CompressionType, iter_batches

TIMEOUT_S = 30.0
KCAT = shutil.which("kcat") or shutil.which("kafkacat")
CODEC_IDS = {"none": CompressionType.NONE, "uncompressed": CompressionType.NONE, "gzip": CompressionType.GZIP,
             "snappy": CompressionType.SNAPPY, "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}
# target compression.type -> the codec the producer uses (always another one)
TARGETS = {"gzip": "lz4", "snappy": "none", "lz4": "zstd", "zstd": "gzip", "uncompressed": "snappy"}


@dataclass(frozen=True, slots=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    log_append_time: bool = False


def make_records(n: int, tag: str, first_offset: int = 0) -> list[Rec]:
    """Compressible values, null and empty keys, a tombstone, headers, timestamps out of order."""
    base = int(time.time() * 1000) - 60_000
    out = []
    for i in range(n):
        key = None if i % 9 == 0 else b"" if i % 9 == 1 else f"key-{i % 13}".encode()
        value = None if i % 37 == 36 else f"{tag} value {i} {'lorem ipsum dolor ' * (i % 25)}".encode()
        headers = (("i", str(i).encode()), ("tag", tag.encode())) + ((("empty", b""),) if i % 4 == 0 else ())
        out.append(Rec(first_offset + i, key, value, headers, base + (i * 7919) % 5000))
    return out


# -- producing ---------------------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, records: list[Rec], codec: str, chunks: int = 3, **config: Any) -> None:
    """``records`` to partition 0, in ``chunks`` flushes (so several batches), with the producer's ``codec``.

    One batch per chunk: ``flush`` sends at once whatever ``linger.ms`` says, and a long linger keeps a slow
    (loaded) producer from cutting a chunk into small batches, which librdkafka sends uncompressed when the
    codec would not shrink them (a batch of codec none among lz4 ones, seen under two test workers)."""
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5000, "log_level": 3,
                  "enable.idempotence": False, **config})
    size = max(1, -(-len(records) // chunks))
    for start in range(0, len(records), size):
        for r in records[start:start + size]:
            p.produce(topic, value=r.value, key=r.key, headers=list(r.headers), partition=0, timestamp=r.timestamp,
                      on_delivery=lambda err, _msg: errors.append(err) if err is not None else None)
        assert p.flush(TIMEOUT_S) == 0, "confluent-kafka: undelivered records"
    assert not errors, f"delivery errors: {errors[:3]}"


def create_topic(bootstrap: str, name: str, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, 1, 1, config=configs or {})])[name].result(TIMEOUT_S)


def alter(bootstrap: str, rtype: ResourceType, name: str, key: str, value: str | None) -> None:
    """IncrementalAlterConfigs: SET ``key`` to ``value``, or DELETE it when ``value`` is None."""
    op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    res = ConfigResource(rtype, name, incremental_configs=[ConfigEntry(key, value, incremental_operation=op)])
    admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)


# -- what is on disk ---------------------------------------------------------------------------------------


def stored(b: BrokerProcess, topic: str) -> list[BatchHeader]:
    """Every batch header in the partition's ``.log`` files (CRCs checked), in offset order."""
    headers = []
    for path in sorted((b.data_dir / "logs" / f"{topic}-0").glob("*.log")):
        data = path.read_bytes()
        headers += [h for _, h in iter_batches(data, verify_crc=True)]
    return headers


def data_codecs(b: BrokerProcess, topic: str) -> list[int]:
    return [h.compression for h in stored(b, topic) if not h.is_control]


# -- reading back, with every client -----------------------------------------------------------------------


def read_confluent(bootstrap: str, topic: str, isolation: str) -> list[Rec]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True, "log_level": 3})
    try:
        c.assign([CTopicPartition(topic, 0, 0)])
        got: list[Rec] = []
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            assert time.monotonic() < deadline, f"confluent-kafka: no end of {topic} after {TIMEOUT_S}s"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return got
                raise AssertionError(m.error())
            ts_type, ts = m.timestamp()
            got.append(Rec(m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts,
                           ts_type == TIMESTAMP_LOG_APPEND_TIME))
    finally:
        c.close()


def read_kafka_python(bootstrap: str, topic: str, isolation: str) -> list[Rec]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                      auto_offset_reset="earliest")
    try:
        tp = KTopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]  # the LSO for read_committed
        got: list[Rec] = []
        deadline = time.monotonic() + TIMEOUT_S
        while c.position(tp) < end:
            assert time.monotonic() < deadline, f"kafka-python: stuck before {end} in {topic}"
            for msgs in c.poll(timeout_ms=200).values():
                got += [Rec(m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp, m.timestamp_type == 1)
                        for m in msgs]
        return got
    finally:
        c.close()


def read_aiokafka(bootstrap: str, topic: str, isolation: str) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def run() -> list[Rec]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            tp = ATopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            end = (await c.end_offsets([tp]))[tp]
            got: list[Rec] = []
            async with asyncio.timeout(TIMEOUT_S):
                while await c.position(tp) < end:
                    for msgs in (await c.getmany(timeout_ms=200)).values():
                        got += [Rec(m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp,
                                    m.timestamp_type == 1) for m in msgs]
            return got
        finally:
            await c.stop()

    return asyncio.run(run())


def read_kcat(bootstrap: str, topic: str, isolation: str) -> list[Rec]:
    assert KCAT is not None
    done = subprocess.run([KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", "-J",
                           "-X", f"isolation.level={isolation}"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, f"kcat exited {done.returncode}:\n{done.stderr}"
    got = []
    for line in done.stdout.splitlines():
        m = json.loads(line)
        flat = m.get("headers") or []
        headers = tuple((flat[i], flat[i + 1].encode()) for i in range(0, len(flat), 2))
        key, value = m["key"], m["payload"]
        got.append(Rec(m["offset"], None if key is None else key.encode(), None if value is None else value.encode(),
                       headers, m["ts"], m["tstype"] == "logappend"))
    return got


READERS: dict[str, Callable[[str, str, str], list[Rec]]] = {
    "confluent-kafka": read_confluent, "kafka-python": read_kafka_python, "aiokafka": read_aiokafka}
if KCAT is not None:
    READERS["kcat"] = read_kcat


def assert_every_client_reads(bootstrap: str, topic: str, want: list[Rec], isolation: str = "read_uncommitted",
                              *, check: Callable[[list[Rec]], None] | None = None) -> None:
    """Each client reads exactly ``want`` (``check`` instead, for what a client sees beyond ``want``)."""
    for name, read in READERS.items():
        got = read(bootstrap, topic, isolation)
        if check is not None:
            check(got)
            continue
        assert len(got) == len(want), f"{name} read {len(got)} records of {topic}, {len(want)} were produced"
        diff = [(w, g) for w, g in zip(want, got, strict=True) if w != g]
        assert not diff, f"{name}: {len(diff)} records of {topic} differ, first: {diff[0]}"


def test_kcat_is_installed_or_skipped() -> None:
    """The other tests read with kcat too when it is there; this one says so when it is not."""
    if KCAT is None:
        pytest.skip("kcat binary not installed (make test installs it as root): read back by three clients only")


# -- the tests ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("compression-type")).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.mark.parametrize("target", list(TARGETS))
def test_topic_compression_type_is_applied(cbroker: BrokerProcess, target: str) -> None:
    topic, source = f"ct-{target}", TARGETS[target]
    create_topic(cbroker.bootstrap, topic, {"compression.type": target})
    records = make_records(300, f"{source}->{target}")
    produce(cbroker.bootstrap, topic, records, source)
    codecs = data_codecs(cbroker, topic)
    assert len(codecs) >= 3 and set(codecs) == {CODEC_IDS[target]}, f"stored codecs {codecs}, produced {source}"
    assert_every_client_reads(cbroker.bootstrap, topic, records)


def test_producer_keeps_each_batch_codec(cbroker: BrokerProcess) -> None:
    topic = "ct-producer"
    create_topic(cbroker.bootstrap, topic)  # compression.type=producer, the default
    lz4, zstd = make_records(40, "lz4"), make_records(40, "zstd", first_offset=40)
    produce(cbroker.bootstrap, topic, lz4, "lz4", chunks=2)
    lz4_batches = len(data_codecs(cbroker, topic))
    produce(cbroker.bootstrap, topic, zstd, "zstd", chunks=2)
    codecs = data_codecs(cbroker, topic)
    # librdkafka sends a batch uncompressed when its codec would not shrink it (a loaded producer can cut a
    # chunk into a batch of one or two records): NONE may sit beside a chunk's codec, never the other codec.
    first, second = set(codecs[:lz4_batches]), set(codecs[lz4_batches:])
    assert CompressionType.LZ4 in first and first <= {CompressionType.LZ4, CompressionType.NONE}, codecs
    assert CompressionType.ZSTD in second and second <= {CompressionType.ZSTD, CompressionType.NONE}, codecs
    assert_every_client_reads(cbroker.bootstrap, topic, lz4 + zstd)


def vars_of(r: Rec) -> tuple[Any, ...]:
    """A record's fields after its offset, to place it at another offset."""
    return r.key, r.value, r.headers, r.timestamp, r.log_append_time


def test_idempotent_and_transactional_producers(cbroker: BrokerProcess) -> None:
    topic = "ct-txn"
    create_topic(cbroker.bootstrap, topic, {"compression.type": "zstd"})
    committed = make_records(60, "committed")
    aborted = make_records(30, "aborted")
    txn = Producer({"bootstrap.servers": cbroker.bootstrap, "transactional.id": "ct-txn-1", "compression.type": "gzip",
                    "linger.ms": 20, "log_level": 3})
    txn.init_transactions(TIMEOUT_S)
    txn.begin_transaction()
    for i, r in enumerate(committed):
        txn.produce(topic, value=r.value, key=r.key, headers=list(r.headers), partition=0, timestamp=r.timestamp)
        if i % 20 == 19:
            assert txn.flush(TIMEOUT_S) == 0
    txn.commit_transaction(TIMEOUT_S)
    txn.begin_transaction()
    for r in aborted:
        txn.produce(topic, value=r.value, key=r.key, headers=list(r.headers), partition=0, timestamp=r.timestamp)
    assert txn.flush(TIMEOUT_S) == 0
    txn.abort_transaction(TIMEOUT_S)
    idempotent = make_records(45, "idempotent")
    produce(cbroker.bootstrap, topic, idempotent, "lz4", chunks=3, **{"enable.idempotence": True})

    batches = stored(cbroker, topic)
    markers = [h for h in batches if h.is_control]
    data = [h for h in batches if not h.is_control]
    assert len(markers) == 2 and all(h.compression == CompressionType.NONE and h.is_transactional for h in markers)
    assert {h.compression for h in data} == {CompressionType.ZSTD}
    txn_batches = [h for h in data if h.is_transactional]
    idem_batches = [h for h in data if not h.is_transactional]
    assert sum(h.records_count for h in txn_batches) == len(committed) + len(aborted)
    assert sum(h.records_count for h in idem_batches) == len(idempotent) and len(idem_batches) >= 3
    for group in (txn_batches, idem_batches):
        pids = {(h.producer_id, h.producer_epoch) for h in group}
        assert len(pids) == 1 and next(iter(pids))[0] >= 0, pids
        assert [h.base_sequence for h in group] == [sum(g.records_count for g in group[:i]) for i in range(len(group))]
        assert all(h.last_offset_delta == h.records_count - 1 for h in group)
    assert {h.producer_id for h in markers} == {txn_batches[0].producer_id}

    # offsets: the committed records, a marker, the aborted records, a marker, then the idempotent ones
    first_idem = len(committed) + 1 + len(aborted) + 1
    committed_at = [Rec(i, *vars_of(r)) for i, r in enumerate(committed)]
    aborted_at = [Rec(len(committed) + 1 + i, *vars_of(r)) for i, r in enumerate(aborted)]
    idempotent_at = [Rec(first_idem + i, *vars_of(r)) for i, r in enumerate(idempotent)]
    assert_every_client_reads(cbroker.bootstrap, topic, committed_at + idempotent_at, "read_committed")
    assert read_confluent(cbroker.bootstrap, topic, "read_uncommitted") == committed_at + aborted_at + idempotent_at


def test_log_append_time_topic(cbroker: BrokerProcess) -> None:
    topic = "ct-log-append-time"
    create_topic(cbroker.bootstrap, topic, {"compression.type": "lz4", "message.timestamp.type": "LogAppendTime"})
    records = make_records(120, "lat")
    before = int(time.time() * 1000)
    produce(cbroker.bootstrap, topic, records, "gzip")
    after = int(time.time() * 1000)
    batches = stored(cbroker, topic)
    assert {h.compression for h in batches} == {CompressionType.LZ4}
    assert all(h.attributes & 0x08 and before <= h.max_timestamp <= after for h in batches)
    stamp = {}
    for h in batches:
        stamp.update(dict.fromkeys(range(h.base_offset, h.last_offset + 1), h.max_timestamp))
    want = [Rec(r.offset, r.key, r.value, r.headers, stamp[r.offset], True) for r in records]
    assert_every_client_reads(cbroker.bootstrap, topic, want)


def test_recompressed_batch_over_max_message_bytes_is_refused(cbroker: BrokerProcess) -> None:
    topic = "ct-too-large"
    create_topic(cbroker.bootstrap, topic, {"compression.type": "uncompressed", "max.message.bytes": "20000"})
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": cbroker.bootstrap, "compression.type": "zstd", "linger.ms": 50,
                  "log_level": 3, "retries": 0, "message.timeout.ms": int(TIMEOUT_S * 1000)})
    for i in range(10):  # each record alone is over 20 KB uncompressed; all of them are well under it as zstd
        p.produce(topic, value=b"a" * 25_000, key=b"k%d" % i, partition=0,
                  on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(TIMEOUT_S) == 0
    assert len(errors) == 10 and all(e is not None and e.code() == KafkaError.MSG_SIZE_TOO_LARGE for e in errors)
    assert stored(cbroker, topic) == []


def test_broker_default_compression_type(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "zstd-default", props={"compression.type": "zstd"}).start()
    try:
        records = make_records(90, "default")
        produce(b.bootstrap, "auto-created", records, "gzip")  # the topic's first Metadata creates it
        assert set(data_codecs(b, "auto-created")) == {CompressionType.ZSTD}
        assert_every_client_reads(b.bootstrap, "auto-created", records)
        create_topic(b.bootstrap, "own-codec", {"compression.type": "producer"})  # a topic override wins
        produce(b.bootstrap, "own-codec", records, "gzip")
        # stored as the producer sent them: gzip, and NONE for a batch librdkafka found gzip would not shrink
        # (a loaded machine's linger cut one small); never the broker's zstd
        own = set(data_codecs(b, "own-codec"))
        assert CompressionType.GZIP in own and own <= {CompressionType.GZIP, CompressionType.NONE}, own
    finally:
        b.stop()


def test_dynamic_changes_apply_to_the_next_appends(broker: BrokerProcess) -> None:
    topic = "ct-dynamic"
    create_topic(broker.bootstrap, topic)
    steps: list[tuple[Callable[[], None] | None, int]] = [
        (None, CompressionType.SNAPPY),  # producer: stored as sent
        (lambda: alter(broker.bootstrap, ResourceType.BROKER, "1", "compression.type", "lz4"), CompressionType.LZ4),
        (lambda: alter(broker.bootstrap, ResourceType.TOPIC, topic, "compression.type", "gzip"), CompressionType.GZIP),
        (lambda: alter(broker.bootstrap, ResourceType.TOPIC, topic, "compression.gzip.level", "1"),
         CompressionType.GZIP),
        (lambda: alter(broker.bootstrap, ResourceType.TOPIC, topic, "compression.type", None), CompressionType.LZ4),
        (lambda: alter(broker.bootstrap, ResourceType.BROKER, "1", "compression.type", "uncompressed"),
         CompressionType.NONE),
        (lambda: alter(broker.bootstrap, ResourceType.BROKER, "1", "compression.type", None), CompressionType.SNAPPY),
    ]
    produced: list[Rec] = []
    for n, (change, codec) in enumerate(steps):
        if change is not None:
            change()  # answered once the new config is in the open logs: the next append uses it
        before = len(data_codecs(broker, topic))
        records = make_records(25, f"step{n}", first_offset=len(produced))
        produce(broker.bootstrap, topic, records, "snappy", chunks=1)
        produced += records
        stored_now = set(data_codecs(broker, topic)[before:])
        if codec == CompressionType.SNAPPY:  # as the producer sent it: NONE too when snappy would not shrink a batch
            assert codec in stored_now and stored_now <= {codec, CompressionType.NONE}, f"step {n}: {stored_now}"
        else:
            assert stored_now == {codec}, f"step {n}: stored {data_codecs(broker, topic)}"
    assert_every_client_reads(broker.bootstrap, topic, produced)


def test_fetch_before_v10_on_a_zstd_topic_is_refused(cbroker: BrokerProcess) -> None:
    """Kafka's ``maybeConvertFetchedData``: Fetch < v10 predates zstd (KIP-110), so a client fetching a topic whose
    ``compression.type`` is zstd at such a version gets UNSUPPORTED_COMPRESSION_TYPE, not batches it cannot read."""
    from tests.broker.kafka_wire import WireClient

    create_topic(cbroker.bootstrap, "zstd-old-fetch", {"compression.type": "zstd"})
    produce(cbroker.bootstrap, "zstd-old-fetch", make_records(5, "old"), "none", chunks=1)
    with WireClient(cbroker.bootstrap) as wire:
        codes = {}
        for version in (4, 9, 10, 12):
            r = wire.call(1, version, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                          session_epoch=-1, replica_id=-1, rack_id="", forgotten_topics_data=[],
                          topics=[{"topic": "zstd-old-fetch", "partitions": [
                              {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                               "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}])
            codes[version] = int(r.responses[0].partitions[0].error_code)
    assert codes == {4: 76, 9: 76, 10: 0, 12: 0}, codes
