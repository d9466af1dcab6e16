"""Topic administration over real sockets: confluent-kafka's AdminClient (librdkafka speaks the older
versions of these APIs) and the raw wire client for the newest versions kio knows.

One broker serves the module (its ``server.properties`` sets ``log.retention.hours`` so config
sources other than the default show up); each test uses its own topic names.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient

TIMEOUT_S = 15
HOUR_MS = 3_600_000
STATIC = {"log.retention.hours": "48", "log.retention.check.interval.ms": "200", "log.initial.task.delay.ms": "200"}


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("admin-broker"), STATIC).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def admin(admin_broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": admin_broker.bootstrap, "log_level": 3})


def _result(fut: Future[Any]) -> Any:
    return fut.result(TIMEOUT_S)


def _error(fut: Future[Any]) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        fut.result(TIMEOUT_S)
    err = e.value.args[0]
    assert isinstance(err, KafkaError)
    return err


def _create(admin: AdminClient, *topics: NewTopic, **kwargs: Any) -> dict[str, Future[Any]]:
    return admin.create_topics(list(topics), operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S, **kwargs)


def _describe(admin: AdminClient, topic: str) -> dict[str, Any]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return _result(admin.describe_configs([res], request_timeout=TIMEOUT_S)[res])


def _incremental(admin: AdminClient, topic: str, *entries: tuple[str, str | None, AlterConfigOpType],
                 **kwargs: Any) -> Future[Any]:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in entries])
    return admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S, **kwargs)[res]


def _partitions(admin: AdminClient, topic: str) -> int | None:
    """The topic's partition count, None when it does not exist (``describe_topics`` never auto-creates)."""
    fut = admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S)[topic]
    try:
        return len(fut.result(TIMEOUT_S).partitions)
    except KafkaException as e:
        assert e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, e
        return None


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0,
             timestamps: list[int] | None = None, one_batch_each: bool = False) -> list[KafkaError | None]:
    """Produce and wait; returns each message's delivery error (None when delivered)."""
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 0,
                         "message.max.bytes": 10_000_000})
    errors: list[KafkaError | None] = [None] * len(values)

    def report(i: int) -> Any:
        return lambda err, _msg: errors.__setitem__(i, err)

    for i, v in enumerate(values):
        kwargs = {"timestamp": timestamps[i]} if timestamps else {}
        producer.produce(topic, value=v, partition=partition, on_delivery=report(i), **kwargs)
        if one_batch_each:
            assert producer.flush(TIMEOUT_S) == 0
    assert producer.flush(TIMEOUT_S) == 0
    return errors


def _offsets(admin: AdminClient, topic: str, spec: OffsetSpec, partition: int = 0) -> Any:
    tp = TopicPartition(topic, partition)
    return _result(admin.list_offsets({tp: spec}, request_timeout=TIMEOUT_S)[tp])


# -- create, describe, delete --------------------------------------------------------------------


def test_create_describe_and_delete_a_topic(admin: AdminClient, admin_broker: BrokerProcess) -> None:
    assert _result(_create(admin, NewTopic("adm-life", 3, 1, config={"retention.ms": "600000"}))["adm-life"]) is None
    assert _partitions(admin, "adm-life") == 3
    configs = _describe(admin, "adm-life")
    assert configs["retention.ms"].value == "600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert _result(admin.delete_topics(["adm-life"], operation_timeout=TIMEOUT_S)["adm-life"]) is None
    assert _partitions(admin, "adm-life") is None
    err = _error(admin.delete_topics(["adm-life"], operation_timeout=TIMEOUT_S)["adm-life"])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # the name is free again, and the new topic (a new id) starts empty
    assert _result(_create(admin, NewTopic("adm-life", 1, 1))["adm-life"]) is None
    with WireClient(admin_broker.bootstrap) as c:
        resp = c.call(2, 7, replica_id=-1, isolation_level=0, topics=[
            {"name": "adm-life", "partitions": [{"partition_index": 0, "timestamp": -1}]}])
        assert (int(resp.topics[0].partitions[0].error_code), resp.topics[0].partitions[0].offset) == (0, 0)


def test_create_topic_defaults_and_bad_inputs(admin: AdminClient) -> None:
    futs = _create(admin,
                   NewTopic("adm-default"),  # -1 partitions, -1 replication factor: broker defaults
                   NewTopic("adm-rf3", 1, 3),
                   NewTopic("adm-unknown-key", 1, 1, config={"retention.msx": "1"}),
                   NewTopic("adm-bad-value", 1, 1, config={"segment.bytes": "big"}),
                   NewTopic("adm bad name", 1, 1),
                   NewTopic("__consumer_offsets", 1, 1),
                   NewTopic("adm-assigned", 2, replica_assignment=[[1], [1]]),
                   NewTopic("adm-assigned-elsewhere", 1, replica_assignment=[[2]]))
    assert _result(futs["adm-default"]) is None
    assert _partitions(admin, "adm-default") == 1
    err = _error(futs["adm-rf3"])
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "only 1 broker" in err.str()
    err = _error(futs["adm-unknown-key"])
    assert err.code() == KafkaError.INVALID_CONFIG and "retention.msx" in err.str()
    err = _error(futs["adm-bad-value"])
    assert err.code() == KafkaError.INVALID_CONFIG and "segment.bytes" in err.str()
    assert _error(futs["adm bad name"]).code() == KafkaError.TOPIC_EXCEPTION
    err = _error(futs["__consumer_offsets"])
    assert err.code() == KafkaError.INVALID_REQUEST and "internal" in err.str()
    assert _result(futs["adm-assigned"]) is None
    assert _partitions(admin, "adm-assigned") == 2
    assert _error(futs["adm-assigned-elsewhere"]).code() == KafkaError.INVALID_REPLICA_ASSIGNMENT

    err = _error(_create(admin, NewTopic("adm-default", 1, 1))["adm-default"])
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert _result(_create(admin, NewTopic("adm.dotted", 1, 1))["adm.dotted"]) is None
    err = _error(_create(admin, NewTopic("adm_dotted", 1, 1))["adm_dotted"])  # same metric names as adm.dotted
    assert err.code() == KafkaError.TOPIC_EXCEPTION and "collides with existing topic: adm.dotted" in err.str()

    assert _result(_create(admin, NewTopic("adm-validate", 4, 1), validate_only=True)["adm-validate"]) is None
    assert _partitions(admin, "adm-validate") is None


def test_describe_configs_sources_and_synonyms(admin: AdminClient, admin_broker: BrokerProcess) -> None:
    _result(_create(admin, NewTopic("adm-describe", 1, 1, config={"max.message.bytes": "2000"}))["adm-describe"])
    configs = _describe(admin, "adm-describe")
    mmb = configs["max.message.bytes"]
    assert (mmb.value, mmb.source, mmb.is_default, mmb.is_read_only) == (
        "2000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False, False)
    assert mmb.synonyms["message.max.bytes"].value == "1048588"
    # log.retention.hours=48 in server.properties gives the value, but Kafka looks up log.retention.ms
    # only, so the source is DEFAULT_CONFIG with no synonyms (tests/broker/test_config_synonyms.py)
    retention = configs["retention.ms"]
    assert (retention.value, retention.source) == (str(48 * HOUR_MS), ConfigSource.DEFAULT_CONFIG.value)
    assert retention.synonyms == {}
    seg = configs["segment.bytes"]
    assert (seg.value, seg.source) == ("1073741824", ConfigSource.DEFAULT_CONFIG.value)
    assert seg.synonyms["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    res = ConfigResource(ResourceType.BROKER, "1")
    broker_configs = _result(admin.describe_configs([res], request_timeout=TIMEOUT_S)[res])
    hours = broker_configs["log.retention.hours"]
    assert (hours.value, hours.source, hours.is_read_only) == ("48", ConfigSource.STATIC_BROKER_CONFIG.value, True)
    assert broker_configs["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
    assert broker_configs["log.dirs"].value == str(admin_broker.data_dir / "logs")

    unknown = ConfigResource(ResourceType.TOPIC, "adm-no-such-topic")
    err = _error(admin.describe_configs([unknown], request_timeout=TIMEOUT_S)[unknown])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# -- altering configs ----------------------------------------------------------------------------


def _legacy_alter(admin: AdminClient, res: ConfigResource) -> Future[Any]:
    with pytest.warns(DeprecationWarning, match="alter_configs has been deprecated"):
        return admin.alter_configs([res], request_timeout=TIMEOUT_S)[res]


def test_legacy_alter_configs_replaces_the_whole_override_set(admin: AdminClient) -> None:
    _result(_create(admin, NewTopic("adm-legacy", 1, 1, config={"retention.ms": "1000000",
                                                                   "segment.bytes": "100000"}))["adm-legacy"])
    res = ConfigResource(ResourceType.TOPIC, "adm-legacy", set_config={"max.message.bytes": "5000"})
    assert _result(_legacy_alter(admin, res)) is None
    configs = _describe(admin, "adm-legacy")
    assert configs["max.message.bytes"].value == "5000"
    assert configs["retention.ms"].value == str(48 * HOUR_MS)  # back to the broker's
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    bad = ConfigResource(ResourceType.TOPIC, "adm-legacy", set_config={"retention.ms": "-7"})
    err = _error(_legacy_alter(admin, bad))
    assert err.code() == KafkaError.INVALID_CONFIG and "retention.ms" in err.str()
    assert _describe(admin, "adm-legacy")["max.message.bytes"].value == "5000"  # unchanged


def test_incremental_alter_configs(admin: AdminClient) -> None:
    _result(_create(admin, NewTopic("adm-incr", 1, 1, config={"retention.ms": "1000000"}))["adm-incr"])
    assert _result(_incremental(admin, "adm-incr",
                                ("segment.bytes", "200000", AlterConfigOpType.SET),
                                ("retention.ms", None, AlterConfigOpType.DELETE),
                                ("cleanup.policy", "compact", AlterConfigOpType.APPEND))) is None
    configs = _describe(admin, "adm-incr")
    assert configs["segment.bytes"].value == "200000"
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        str(48 * HOUR_MS), ConfigSource.DEFAULT_CONFIG.value)  # back to log.retention.hours, reported as Kafka does
    assert configs["cleanup.policy"].value == "delete,compact"
    assert _result(_incremental(admin, "adm-incr", ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))) is None
    assert _describe(admin, "adm-incr")["cleanup.policy"].value == "compact"

    err = _error(_incremental(admin, "adm-incr", ("segment.bytes", "1", AlterConfigOpType.APPEND)))
    assert err.code() == KafkaError.INVALID_CONFIG and "segment.bytes" in err.str()
    err = _error(_incremental(admin, "adm-incr", ("segment.bites", "1", AlterConfigOpType.SET)))
    assert err.code() == KafkaError.INVALID_CONFIG and "segment.bites" in err.str()
    err = _error(_incremental(admin, "adm-incr", ("cleanup.policy", "shred", AlterConfigOpType.SET)))
    assert err.code() == KafkaError.INVALID_CONFIG and "cleanup.policy" in err.str()
    err = _error(_incremental(admin, "adm-missing", ("segment.bytes", "200000", AlterConfigOpType.SET)))
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    assert _result(_incremental(admin, "adm-incr", ("segment.bytes", "300000", AlterConfigOpType.SET),
                                validate_only=True)) is None
    assert _describe(admin, "adm-incr")["segment.bytes"].value == "200000"

    # log.retention.hours is not a dynamic broker key (only the first synonym, log.retention.ms, is)
    res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.hours", "1", incremental_operation=AlterConfigOpType.SET)])
    err = _error(admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res])
    assert err.code() == KafkaError.INVALID_REQUEST
    assert err.str() == "Cannot update these configs dynamically: Set(log.retention.hours)"


def test_max_message_bytes_lowered_live_rejects_a_bigger_batch(admin: AdminClient,
                                                                admin_broker: BrokerProcess) -> None:
    _result(_create(admin, NewTopic("adm-mmb", 1, 1))["adm-mmb"])
    big = b"x" * 50_000
    assert _produce(admin_broker.bootstrap, "adm-mmb", [big]) == [None]
    _result(_incremental(admin, "adm-mmb", ("max.message.bytes", "10000", AlterConfigOpType.SET)))
    errors = _produce(admin_broker.bootstrap, "adm-mmb", [big, b"small"], one_batch_each=True)
    assert errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert errors[1] is None
    assert _offsets(admin, "adm-mmb", OffsetSpec.latest()).offset == 2
    _result(_incremental(admin, "adm-mmb", ("max.message.bytes", None, AlterConfigOpType.DELETE)))
    assert _produce(admin_broker.bootstrap, "adm-mmb", [big]) == [None]


def _segment_files(broker: BrokerProcess, topic: str) -> list[Path]:
    return sorted((broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))


def test_segment_bytes_and_retention_ms_take_effect_live(admin: AdminClient, admin_broker: BrokerProcess) -> None:
    _result(_create(admin, NewTopic("adm-live", 1, 1))["adm-live"])
    two_hours_ago = int(time.time() * 1000) - 2 * HOUR_MS
    old = _produce(admin_broker.bootstrap, "adm-live", [b"o" * 1000] * 10,
                   timestamps=[two_hours_ago + i for i in range(10)])
    assert old == [None] * 10
    assert len(_segment_files(admin_broker, "adm-live")) == 1
    _result(_incremental(admin, "adm-live", ("segment.bytes", "3000", AlterConfigOpType.SET)))
    assert _produce(admin_broker.bootstrap, "adm-live", [b"n" * 1000] * 6, one_batch_each=True) == [None] * 6
    assert len(_segment_files(admin_broker, "adm-live")) >= 3  # rolled at the new size
    assert _offsets(admin, "adm-live", OffsetSpec.earliest()).offset == 0

    # an hour of retention: the first segment (records two hours old) goes on the next retention pass
    _result(_incremental(admin, "adm-live", ("retention.ms", str(HOUR_MS), AlterConfigOpType.SET)))
    deadline = time.monotonic() + TIMEOUT_S
    while _offsets(admin, "adm-live", OffsetSpec.earliest()).offset != 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _offsets(admin, "adm-live", OffsetSpec.earliest()).offset == 10
    assert _offsets(admin, "adm-live", OffsetSpec.latest()).offset == 16


# -- partitions, offsets and records -------------------------------------------------------------


def test_create_partitions(admin: AdminClient, admin_broker: BrokerProcess) -> None:
    _result(_create(admin, NewTopic("adm-grow", 1, 1))["adm-grow"])
    assert _result(admin.create_partitions([NewPartitions("adm-grow", 3)],
                                           operation_timeout=TIMEOUT_S)["adm-grow"]) is None
    assert _partitions(admin, "adm-grow") == 3
    assert _produce(admin_broker.bootstrap, "adm-grow", [b"p2"], partition=2) == [None]
    assert _offsets(admin, "adm-grow", OffsetSpec.latest(), partition=2).offset == 1

    for count, needle in ((2, "would not be an increase"), (3, "already has 3")):
        err = _error(admin.create_partitions([NewPartitions("adm-grow", count)],
                                             operation_timeout=TIMEOUT_S)["adm-grow"])
        assert err.code() == KafkaError.INVALID_PARTITIONS and needle in err.str()
    err = _error(admin.create_partitions([NewPartitions("adm-nothing", 2)], operation_timeout=TIMEOUT_S)["adm-nothing"])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert _result(admin.create_partitions([NewPartitions("adm-grow", 8)], validate_only=True,
                                           operation_timeout=TIMEOUT_S)["adm-grow"]) is None
    assert _partitions(admin, "adm-grow") == 3


def test_list_offsets_by_spec_on_known_timestamps(admin: AdminClient, admin_broker: BrokerProcess) -> None:
    _result(_create(admin, NewTopic("adm-times", 1, 1))["adm-times"])
    t0 = int(time.time() * 1000) - 600_000
    stamps = [t0, t0 + 1000, t0 + 5000, t0 + 2000, t0 + 3000]  # the maximum is at offset 2
    assert _produce(admin_broker.bootstrap, "adm-times", [b"v%d" % i for i in range(5)], timestamps=stamps,
                    one_batch_each=True) == [None] * 5
    assert _offsets(admin, "adm-times", OffsetSpec.earliest()).offset == 0
    assert _offsets(admin, "adm-times", OffsetSpec.latest()).offset == 5
    top = _offsets(admin, "adm-times", OffsetSpec.max_timestamp())
    assert (top.offset, top.timestamp) == (2, t0 + 5000)
    found = _offsets(admin, "adm-times", OffsetSpec.for_timestamp(t0 + 500))
    assert (found.offset, found.timestamp) == (1, t0 + 1000)
    assert _offsets(admin, "adm-times", OffsetSpec.for_timestamp(t0 + 1500)).offset == 2  # first ts >= target
    assert _offsets(admin, "adm-times", OffsetSpec.for_timestamp(t0 + 60_000)).offset == -1


def test_delete_records_moves_the_earliest_offset(admin: AdminClient, admin_broker: BrokerProcess) -> None:
    _result(_create(admin, NewTopic("adm-trim", 1, 1))["adm-trim"])
    assert _produce(admin_broker.bootstrap, "adm-trim", [b"r%d" % i for i in range(10)]) == [None] * 10
    tp = TopicPartition("adm-trim", 0, 4)
    assert _result(admin.delete_records([tp], operation_timeout=TIMEOUT_S)[tp]).low_watermark == 4
    assert _offsets(admin, "adm-trim", OffsetSpec.earliest()).offset == 4

    consumer = Consumer({"bootstrap.servers": admin_broker.bootstrap, "group.id": "adm-trim", "log_level": 3,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("adm-trim", 0, 0)])  # below the log start: reset to earliest
        first = None
        deadline = time.monotonic() + TIMEOUT_S
        while first is None and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                first = m
        assert first is not None and (first.offset(), first.value()) == (4, b"r4")
    finally:
        consumer.close()

    beyond = TopicPartition("adm-trim", 0, 11)
    assert _error(admin.delete_records([beyond], operation_timeout=TIMEOUT_S)[beyond]).code() == \
        KafkaError.OFFSET_OUT_OF_RANGE
    everything = TopicPartition("adm-trim", 0, -1)  # OFFSET_END: up to the high watermark
    assert _result(admin.delete_records([everything], operation_timeout=TIMEOUT_S)[everything]).low_watermark == 10
    assert _offsets(admin, "adm-trim", OffsetSpec.earliest()).offset == 10


# -- newest versions, on the wire ---------------------------------------------------------------


def test_create_topics_v7_reports_partitions_replication_and_configs(admin_broker: BrokerProcess) -> None:
    with WireClient(admin_broker.bootstrap) as c:
        topic = {"name": "adm-wire", "num_partitions": 2, "replication_factor": -1, "assignments": [],
                 "configs": [{"name": "retention.ms", "value": "5000"}]}
        dry = c.call(19, 7, topics=[topic], timeout=5000, validate_only=True).topics[0]
        assert int(dry.error_code) == 0 and dry.num_partitions == 2
        real = c.call(19, 7, topics=[topic], timeout=5000, validate_only=False).topics[0]
        assert int(real.error_code) == 0
        assert (real.num_partitions, real.replication_factor) == (2, 1)
        assert real.topic_id is not None and real.topic_id.int != 0
        configs = {e.name: e for e in real.configs}
        assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("5000", 1)
        assert configs["segment.bytes"].config_source == 5 and not configs["segment.bytes"].read_only
        assert len(configs) == len({e.name for e in real.configs}) > 20

        again = c.call(19, 7, topics=[topic, topic], timeout=5000, validate_only=False).topics
        assert [(t.name, int(t.error_code), t.error_message) for t in again] == [
            ("adm-wire", 42, "Duplicate topic name.")]
        old = c.call(19, 2, topics=[topic], timeout=5000, validate_only=False).topics[0]
        assert int(old.error_code) == 36 and old.error_message == "Topic 'adm-wire' already exists."

        # v6 DeleteTopics by topic id, then the same id again
        gone = c.call(20, 6, topics=[{"name": None, "topic_id": real.topic_id}], timeout=5000).responses[0]
        assert (gone.name, gone.topic_id, int(gone.error_code)) == ("adm-wire", real.topic_id, 0)
        again = c.call(20, 6, topics=[{"name": None, "topic_id": real.topic_id}], timeout=5000).responses[0]
        assert int(again.error_code) == 100  # UNKNOWN_TOPIC_ID
        both = c.call(20, 6, topics=[{"name": "x", "topic_id": uuid.uuid4()}], timeout=5000).responses[0]
        assert int(both.error_code) == 42
        internal = c.call(20, 6, topics=[{"name": "__consumer_offsets", "topic_id": None}], timeout=5000).responses[0]
        assert int(internal.error_code) == 17 and "internal" in internal.error_message


def test_describe_configs_v4_types_documentation_and_filters(admin_broker: BrokerProcess) -> None:
    with WireClient(admin_broker.bootstrap) as c:
        c.call(19, 7, topics=[{"name": "adm-doc", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                               "configs": []}], timeout=5000, validate_only=False)
        resp = c.call(32, 4, include_synonyms=True, include_documentation=True, resources=[
            {"resource_type": 2, "resource_name": "adm-doc", "configuration_keys": ["cleanup.policy", "retention.ms"]},
            {"resource_type": 4, "resource_name": "2", "configuration_keys": None},
            {"resource_type": 8, "resource_name": "1", "configuration_keys": None},
        ])
        topic, other_broker, logger = resp.results
        assert int(topic.error_code) == 0
        by_name = {e.name: e for e in topic.configs}
        assert set(by_name) == {"cleanup.policy", "retention.ms"}
        assert by_name["cleanup.policy"].config_type == 7  # LIST
        assert by_name["retention.ms"].config_type == 5  # LONG
        # only log.retention.hours=48 is set: Kafka reports DEFAULT_CONFIG and drops its synonyms
        assert (by_name["retention.ms"].value, by_name["retention.ms"].config_source) == (str(48 * HOUR_MS), 5)
        assert list(by_name["retention.ms"].synonyms) == []
        assert by_name["retention.ms"].documentation
        assert int(other_broker.error_code) == 42 and "Unexpected broker id" in other_broker.error_message
        assert int(logger.error_code) == 42 and other_broker.configs == ()


def test_incremental_alter_configs_v1_request_level_checks(admin_broker: BrokerProcess) -> None:
    with WireClient(admin_broker.bootstrap) as c:
        c.call(19, 7, topics=[{"name": "adm-iac", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                               "configs": []}], timeout=5000, validate_only=False)
        res = {"resource_type": 2, "resource_name": "adm-iac"}
        resp = c.call(44, 1, validate_only=False, resources=[
            {**res, "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"},
                                {"name": "retention.ms", "config_operation": 1, "value": None}]},
        ]).responses[0]
        assert (int(resp.error_code), resp.error_message) == (42, "Error due to duplicate config keys")
        resp = c.call(44, 1, validate_only=False, resources=[
            {**res, "configs": [{"name": "retention.ms", "config_operation": 0, "value": None}]}]).responses[0]
        assert int(resp.error_code) == 42 and "Null value" in resp.error_message
        twice = c.call(44, 1, validate_only=False, resources=[{**res, "configs": []}, {**res, "configs": []}])
        assert [int(r.error_code) for r in twice.responses] == [42, 42]


def test_delete_records_v2_and_describe_log_dirs(admin_broker: BrokerProcess) -> None:
    assert _produce(admin_broker.bootstrap, "adm-dirs", [b"d" * 100] * 3) == [None] * 3  # auto-created
    with WireClient(admin_broker.bootstrap) as c:
        resp = c.call(21, 2, timeout=5000, topics=[
            {"name": "adm-dirs", "partitions": [{"partition_index": 0, "offset": 1},
                                                {"partition_index": 5, "offset": 1}]},
            {"name": "__consumer_offsets", "partitions": [{"partition_index": 0, "offset": 0}]},
        ])
        parts = resp.topics[0].partitions
        assert [(p.partition_index, p.low_watermark, int(p.error_code)) for p in parts] == [(0, 1, 0), (5, -1, 3)]
        assert int(resp.topics[1].partitions[0].error_code) == 17  # INVALID_TOPIC_EXCEPTION: internal

        dirs = c.call(35, 4, topics=[{"topic": "adm-dirs", "partitions": [0]}])
        assert int(dirs.error_code) == 0 and len(dirs.results) == 1
        result = dirs.results[0]
        assert result.log_dir == str((admin_broker.data_dir / "logs").resolve())
        assert result.total_bytes > 0 and result.usable_bytes > 0
        [topic] = result.topics
        [p] = topic.partitions
        assert (topic.name, p.partition_index, p.offset_lag) == ("adm-dirs", 0, 0)
        assert p.partition_size > 300
        everything = c.call(35, 1, topics=None).results[0]
        assert "adm-dirs" in {t.name for t in everything.topics}


# -- delete.topic.enable=false -------------------------------------------------------------------


def test_topic_deletion_disabled(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "b", {"delete.topic.enable": "false"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})
        _result(_create(admin, NewTopic("keep", 1, 1))["keep"])
        assert _error(admin.delete_topics(["keep"], operation_timeout=TIMEOUT_S)["keep"]).code() == \
            KafkaError.TOPIC_DELETION_DISABLED
        with WireClient(b.bootstrap) as c:
            resp = c.call(20, 6, topics=[{"name": "keep", "topic_id": None}], timeout=5000).responses[0]
            assert (int(resp.error_code), resp.error_message) == (73, "Topic deletion is disabled.")
            # before v3 the code did not exist: Kafka answers INVALID_REQUEST
            resp = c.call(20, 2, topic_names=["keep"], timeout=5000).responses[0]
            assert (resp.name, int(resp.error_code)) == ("keep", 42)
        assert _partitions(admin, "keep") == 1
    finally:
        b.stop()


def test_every_version_of_every_admin_api_answers(admin_broker: BrokerProcess) -> None:
    """One call per version kio knows (ApiVersions advertises them all): each must encode and succeed."""
    from strata.protocol.frame import known_versions

    versions = known_versions()
    with WireClient(admin_broker.bootstrap) as c:
        for v in range(versions[19][0], versions[19][1] + 1):
            name = f"adm-v{v}"
            resp = c.call(19, v, timeout=5000, validate_only=False, topics=[
                {"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [],
                 "configs": [{"name": "retention.ms", "value": "90000"}]}])
            assert [(t.name, int(t.error_code)) for t in resp.topics] == [(name, 0)], (v, resp)
        for v in range(versions[37][0], versions[37][1] + 1):
            resp = c.call(37, v, timeout=5000, validate_only=False,
                          topics=[{"name": f"adm-v{versions[19][0] + v}", "count": 3, "assignments": None}])
            assert int(resp.results[0].error_code) == 0, (v, resp)
        for v in range(versions[32][0], versions[32][1] + 1):
            resp = c.call(32, v, include_synonyms=True, include_documentation=True, resources=[
                {"resource_type": 2, "resource_name": "adm-v2", "configuration_keys": None},
                {"resource_type": 4, "resource_name": "1", "configuration_keys": None}])
            topic, broker = resp.results
            assert int(topic.error_code) == int(broker.error_code) == 0, (v, resp)
            assert {e.name: e.value for e in topic.configs}["retention.ms"] == "90000"
            assert {e.name: e.value for e in broker.configs}["log.retention.hours"] == "48"
        for v in range(versions[33][0], versions[33][1] + 1):
            entries = [{"name": "retention.ms", "value": "7"}]
            resp = c.call(33, v, validate_only=False,
                          resources=[{"resource_type": 2, "resource_name": "adm-v2", "configs": entries}])
            assert int(resp.responses[0].error_code) == 0, (v, resp)
        for v in range(versions[44][0], versions[44][1] + 1):
            resp = c.call(44, v, validate_only=False, resources=[
                {"resource_type": 2, "resource_name": "adm-v2",
                 "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1234"}]}])
            assert int(resp.responses[0].error_code) == 0, (v, resp)
        for v in range(versions[21][0], versions[21][1] + 1):
            resp = c.call(21, v, timeout=5000, topics=[
                {"name": "adm-v2", "partitions": [{"partition_index": 0, "offset": -1}]}])
            assert (int(resp.topics[0].partitions[0].error_code), resp.topics[0].partitions[0].low_watermark) == (0, 0)
        for v in range(versions[35][0], versions[35][1] + 1):
            resp = c.call(35, v, topics=[{"topic": "adm-v2", "partitions": [0, 1, 2]}])
            assert [p.partition_index for p in resp.results[0].topics[0].partitions] == [0, 1, 2], (v, resp)
        for v in range(versions[20][0], versions[20][1] + 1):
            name = f"adm-v{versions[19][0] + v - versions[20][0]}"
            resp = c.call(20, v, timeout=5000, topic_names=[name], topics=[{"name": name, "topic_id": None}])
            assert [(r.name, int(r.error_code)) for r in resp.responses] == [(name, 0)], (v, resp)


def test_create_partitions_with_manual_assignments(admin_broker: BrokerProcess) -> None:
    with WireClient(admin_broker.bootstrap) as c:
        c.call(19, 7, topics=[{"name": "adm-assign", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                               "configs": []}], timeout=5000, validate_only=False)

        def grow(count: int, assignments: list[list[int]] | None) -> tuple[int, str | None]:
            wanted = None if assignments is None else [{"broker_ids": a} for a in assignments]
            r = c.call(37, 3, timeout=5000, validate_only=False,
                       topics=[{"name": "adm-assign", "count": count, "assignments": wanted}]).results[0]
            return int(r.error_code), r.error_message

        code, message = grow(3, [[1]])
        assert code == 39 and "Attempted to add 2 additional partition(s), but only 1 assignment(s)" in message
        code, message = grow(2, [[2]])
        assert code == 39 and "broker 2" in message
        code, message = grow(2, [[1, 1]])
        assert code == 39 and "more than once" in message
        assert grow(3, [[1], [1]]) == (0, None)
        meta = c.call(3, 12, topics=[{"name": "adm-assign", "topic_id": None}], allow_auto_topic_creation=False,
                      include_topic_authorized_operations=False)
        assert [p.partition_index for p in meta.topics[0].partitions] == [0, 1, 2]
        internal = c.call(37, 3, timeout=5000, validate_only=False, topics=[
            {"name": "__consumer_offsets", "count": 99, "assignments": None}]).results[0]
        assert int(internal.error_code) == 42 and "internal topic" in internal.error_message
