"""Invalid requests and configs are answered with Kafka's error codes, and change nothing.

One broker with tiering on (the ``local`` RSM) serves the module; requests go over the wire with the
raw kio client (exact codes and messages, the newest versions) and, for the tiering rules, through
confluent-kafka's AdminClient (what an operator sees). After each refused change the topic's
configs, partition count and offsets are what they were. The expected codes follow Kafka's
controller and ``LogConfig.validate`` rules (KIP-405/KIP-950 for tiering):

INVALID_CONFIG 40, INVALID_PARTITIONS 37, INVALID_REPLICATION_FACTOR 38, INVALID_REQUEST 42,
POLICY_VIOLATION 44, OFFSET_OUT_OF_RANGE 1, UNKNOWN_TOPIC_OR_PARTITION 3, CORRUPT_MESSAGE 2,
MESSAGE_TOO_LARGE 10, INVALID_REQUIRED_ACKS 21, INVALID_TOPIC_EXCEPTION 17, INVALID_SESSION_TIMEOUT 26,
INVALID_GROUP_ID 24, UNKNOWN_MEMBER_ID 25, ILLEGAL_GENERATION 22.

A request whose non-nullable array arrives as null (length -1) is refused the way Kafka's generated
readers refuse it: the connection is closed, no handler runs. Invalid ``server.properties`` values make
``strata serve`` exit with status 2 naming the key.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from tests.broker.kafka_wire import WireClient, encode_request, ensure_topic, produce
from tests.tiered.harness import TieredBroker

from strata.protocol.records import BatchBuilder

TIMEOUT_S = 15
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TIERED = {"remote.storage.enable": "true"}


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TieredBroker]:
    b = TieredBroker(tmp_path_factory.mktemp("bad-requests")).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def wire(tb: TieredBroker) -> Iterator[WireClient]:
    with WireClient(tb.bootstrap) as c:
        yield c
    log_text = tb.broker.log_path.read_text(errors="replace")
    assert "Traceback" not in log_text, log_text[log_text.index("Traceback") - 1000:][:4000]


def _create(c: WireClient, name: str, partitions: int = 1, rf: int = 1, configs: dict[str, str] | None = None,
            validate_only: bool = False) -> tuple[int, str | None]:
    topic = {"name": name, "num_partitions": partitions, "replication_factor": rf, "assignments": [],
             "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}
    r = c.call(19, 7, timeout=5000, validate_only=validate_only, topics=[topic]).topics[0]
    return int(r.error_code), r.error_message


def _alter(c: WireClient, name: str, *entries: tuple[str, int, str | None],
           validate_only: bool = False) -> tuple[int, str | None]:
    r = c.call(44, 1, validate_only=validate_only, resources=[{"resource_type": 2, "resource_name": name, "configs": [
        {"name": k, "config_operation": op, "value": v} for k, op, v in entries]}]).responses[0]
    return int(r.error_code), r.error_message


def _configs(c: WireClient, name: str) -> dict[str, tuple[str | None, int]]:
    r = c.call(32, 4, include_synonyms=False, include_documentation=False, resources=[
        {"resource_type": 2, "resource_name": name, "configuration_keys": None}]).results[0]
    assert int(r.error_code) == 0, r
    return {e.name: (e.value, e.config_source) for e in r.configs}


def _partitions(c: WireClient, name: str) -> int | None:
    r = c.call(3, 12, topics=[{"name": name, "topic_id": None}], allow_auto_topic_creation=False,
               include_topic_authorized_operations=False).topics[0]
    return len(r.partitions) if int(r.error_code) == 0 else None


# -- CreateTopics --------------------------------------------------------------------------------

CREATE_CASES: list[tuple[str, dict[str, Any], int, str]] = [
    ("zero partitions", {"partitions": 0}, 37, "non-positive"),
    ("negative partitions", {"partitions": -5}, 37, "non-positive"),
    ("zero replication factor", {"rf": 0}, 38, "larger than 0"),
    ("negative replication factor", {"rf": -3}, 38, "larger than 0"),
    ("replication factor above the brokers", {"rf": 3}, 38, "only 1 broker"),
    ("more partitions than a request may create", {"partitions": 10_001}, 44, "Excessively large number"),
    ("unknown config name", {"configs": {"retention.msec": "1"}}, 40, "retention.msec"),
    ("config value of the wrong type", {"configs": {"retention.ms": "a week"}}, 40, "retention.ms"),
    ("config value out of range", {"configs": {"retention.ms": "-7"}}, 40, "retention.ms"),
    ("cleanup policy nobody knows", {"configs": {"cleanup.policy": "shred"}}, 40, "cleanup.policy"),
    ("tiered: local.retention.bytes above retention.bytes",
     {"configs": {**TIERED, "retention.bytes": "1000", "local.retention.bytes": "2000"}}, 40, "local.retention.bytes"),
    ("tiered: local.retention.ms above retention.ms",
     {"configs": {**TIERED, "retention.ms": "60000", "local.retention.ms": "120000"}}, 40, "local.retention.ms"),
    ("tiered: unlimited local retention under a total limit",
     {"configs": {**TIERED, "retention.ms": "60000", "local.retention.ms": "-1"}}, 40, "local.retention.ms"),
    ("tiered: copy disabled with a different local retention",
     {"configs": {**TIERED, "remote.log.copy.disable": "true", "retention.ms": "60000", "local.retention.ms": "1000"}},
     40, "remote.log.copy.disable"),
]


@pytest.mark.parametrize(("case", "spec", "code", "needle"), CREATE_CASES, ids=[c[0] for c in CREATE_CASES])
def test_create_topics_refuses_bad_shapes_and_configs(wire: WireClient, case: str, spec: dict[str, Any], code: int,
                                                      needle: str) -> None:
    name = "bad-" + uuid.uuid4().hex[:8]
    for validate_only in (True, False):  # a dry run answers exactly as the real creation
        got, message = _create(wire, name, validate_only=validate_only, **spec)
        assert (got, needle in (message or "")) == (code, True), (case, validate_only, got, message)
    assert _partitions(wire, name) is None


def test_create_topics_accepts_the_boundaries_of_the_tiering_rules(wire: WireClient) -> None:
    """Kafka's rules compare against -2 (use the total) and -1 (unlimited): these are all valid."""
    for i, configs in enumerate([
        {**TIERED, "retention.bytes": "1000", "local.retention.bytes": "1000"},  # equal
        {**TIERED, "retention.bytes": "1000", "local.retention.bytes": "-2"},  # follow the total
        {**TIERED, "retention.bytes": "-1", "local.retention.bytes": "5000"},  # no total limit
        {**TIERED, "retention.ms": "-1", "local.retention.ms": "-1"},
        {**TIERED, "remote.log.copy.disable": "true", "retention.ms": "60000", "local.retention.ms": "60000"},
        {**TIERED, "cleanup.policy": "compact"},  # KIP-1272: Strata tiers compacted topics (Kafka refuses them)
        {**TIERED, "cleanup.policy": "compact,delete"},
    ]):
        assert _create(wire, f"ok-tiered-{i}", configs=configs) == (0, None), configs


def test_the_admin_client_sees_invalid_config(tb: TieredBroker) -> None:
    admin = tb.admin()
    futures = admin.create_topics([NewTopic("adm-unlimited", 1, 1, config={**TIERED, "retention.ms": "60000",
                                                                            "local.retention.ms": "-1"}),
                                   NewTopic("adm-local", 1, 1, config={**TIERED, "retention.bytes": "10",
                                                                       "local.retention.bytes": "20"})],
                                  operation_timeout=TIMEOUT_S)
    for name, fut in futures.items():
        with pytest.raises(KafkaException) as e:
            fut.result(TIMEOUT_S)
        assert e.value.args[0].name() == "INVALID_CONFIG", name
    tb.create_topic("adm-tiered", retention_bytes="100000", local_retention_bytes="50000")
    res = ConfigResource(ResourceType.TOPIC, "adm-tiered", incremental_configs=[
        ConfigEntry("local.retention.bytes", "200000", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)
    assert e.value.args[0].name() == "INVALID_CONFIG"
    assert "local.retention.bytes" in e.value.args[0].str()


# -- config changes ------------------------------------------------------------------------------


def test_config_changes_that_break_the_tiering_rules_are_refused_and_change_nothing(wire: WireClient) -> None:
    name = "alter-tiered"
    assert _create(wire, name, configs={**TIERED, "retention.bytes": "100000", "local.retention.bytes": "50000",
                                        "retention.ms": "3600000", "local.retention.ms": "600000"}) == (0, None)
    before = _configs(wire, name)
    refused = [
        ("total below the local retention", [("retention.bytes", SET, "1000")], "local.retention.bytes"),
        ("local above the total", [("local.retention.bytes", SET, "200000")], "local.retention.bytes"),
        ("local time above the total", [("local.retention.ms", SET, "7200000")], "local.retention.ms"),
        ("unlimited local under a total", [("local.retention.ms", SET, "-1")], "local.retention.ms"),
        ("tiering off, keeping remote data", [("remote.storage.enable", SET, "false")],
         "remote.log.delete.on.disable"),
        ("tiering off by deleting the override", [("remote.storage.enable", DELETE, None)],
         "remote.log.delete.on.disable"),
        ("copy off with different retentions", [("remote.log.copy.disable", SET, "true")],
         "remote.log.copy.disable"),
        ("unknown key", [("local.retention.byte", SET, "1")], "local.retention.byte"),
        ("bad value", [("local.retention.bytes", SET, "lots")], "local.retention.bytes"),
    ]
    for case, entries, needle in refused:
        for validate_only in (True, False):
            code, message = _alter(wire, name, *entries, validate_only=validate_only)
            assert (code, needle in (message or "")) == (40, True), (case, validate_only, code, message)
    # The legacy AlterConfigs replaces the whole set: the same rules apply to the result.
    r = wire.call(33, 2, validate_only=False, resources=[{"resource_type": 2, "resource_name": name, "configs": [
        {"name": "remote.storage.enable", "value": "true"}, {"name": "retention.bytes", "value": "10"},
        {"name": "local.retention.bytes", "value": "100"}]}]).responses[0]
    assert (int(r.error_code), "local.retention.bytes" in r.error_message) == (40, True)
    # Request-level mistakes: an operation Kafka does not define, a topic that does not exist.
    assert _alter(wire, name, ("retention.ms", 7, "1"))[0] == 42
    assert _alter(wire, "alter-no-such-topic", ("retention.ms", SET, "1"))[0] == 3
    assert _configs(wire, name) == before
    # The allowed ways: turn copying off with equal retentions, or turn tiering off deleting remote data.
    assert _alter(wire, name, ("remote.log.copy.disable", SET, "true"), ("local.retention.ms", DELETE, None),
                  ("local.retention.bytes", DELETE, None)) == (0, None)
    assert _alter(wire, name, ("remote.storage.enable", SET, "false"),
                  ("remote.log.delete.on.disable", SET, "true")) == (0, None)


# -- partitions and records ----------------------------------------------------------------------


def test_partition_counts_and_record_deletion_out_of_range(wire: WireClient) -> None:
    assert _create(wire, "grow", partitions=2) == (0, None)
    batch = BatchBuilder()
    for i in range(5):
        batch.append(b"r%d" % i)
    assert int(produce(wire, "grow", 0, batch.build()).error_code) == 0

    def grow(*topics: tuple[str, int]) -> list[tuple[int, str | None]]:
        r = wire.call(37, 3, timeout=5000, validate_only=False,
                      topics=[{"name": n, "count": count, "assignments": None} for n, count in topics])
        return [(int(x.error_code), x.error_message) for x in r.results]

    [(code, message)] = grow(("grow", 1))
    assert code == 37 and "would not be an increase" in message
    [(code, message)] = grow(("grow", 2))
    assert code == 37 and "already has 2" in message
    [(code, message)] = grow(("grow", -4))
    assert code == 37
    assert grow(("grow-missing", 3))[0][0] == 3
    # More than a request may add: refused as a whole, Kafka's controller limit of 10,000 records.
    assert _create(wire, "grow-other", partitions=1) == (0, None)
    assert [c for c, _ in grow(("grow", 3), ("grow-other", 10_002))] == [44, 44]
    assert (_partitions(wire, "grow"), _partitions(wire, "grow-other")) == (2, 1)

    r = wire.call(21, 2, timeout=5000, topics=[{"name": "grow", "partitions": [
        {"partition_index": 0, "offset": 6},  # beyond the high watermark (5)
        {"partition_index": 0, "offset": -7},  # negative, and not -1 (= the high watermark)
        {"partition_index": 9, "offset": 1},  # no such partition
    ]}, {"name": "grow-missing", "partitions": [{"partition_index": 0, "offset": 0}]}])
    assert [(int(p.error_code), p.low_watermark) for p in r.topics[0].partitions] == [(1, -1), (1, -1), (3, -1)]
    assert int(r.topics[1].partitions[0].error_code) == 3
    assert _create(wire, "compacted", configs={"cleanup.policy": "compact"}) == (0, None)
    r = wire.call(21, 2, timeout=5000, topics=[{"name": "compacted", "partitions": [
        {"partition_index": 0, "offset": 0}]}])
    assert int(r.topics[0].partitions[0].error_code) == 44  # POLICY_VIOLATION: nothing to delete by offset
    lo = wire.call(2, 7, replica_id=-1, isolation_level=0, topics=[{"name": "grow", "partitions": [
        {"partition_index": 0, "timestamp": -2, "current_leader_epoch": -1}]}]).topics[0].partitions[0]
    assert (int(lo.error_code), lo.offset) == (0, 0)  # nothing was deleted
    r = wire.call(20, 6, topics=[{"name": "never-created", "topic_id": None}], timeout=5000)
    assert int(r.responses[0].error_code) == 3


# -- the data path and groups ----------------------------------------------------------------------


def test_well_formed_but_invalid_requests_get_their_error_codes(wire: WireClient) -> None:
    ensure_topic(wire, "plain")
    one = BatchBuilder()
    one.append(b"x")
    record = one.build()
    assert int(produce(wire, "plain", 0, record).error_code) == 0
    corrupt = bytearray(record)
    corrupt[-1] ^= 0xFF
    huge = BatchBuilder()
    huge.append(b"x" * 1_100_000)  # above message.max.bytes (1 MiB + 12)
    produce_cases = [
        ("unknown topic", "no-such-topic", 0, record, -1, 3),
        ("unknown partition", "plain", 7, record, -1, 3),
        ("acks 2", "plain", 0, record, 2, 21),
        ("CRC mismatch", "plain", 0, bytes(corrupt), -1, 2),
        ("batch above message.max.bytes", "plain", 0, huge.build(), -1, 10),
        ("internal topic", "__consumer_offsets", 0, record, -1, 17),
    ]
    for case, topic, partition, records, acks, code in produce_cases:
        assert int(produce(wire, topic, partition, records, acks=acks).error_code) == code, case

    def fetch_part(topic: str, offset: int) -> dict[str, Any]:
        return {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1000,
                                                "current_leader_epoch": -1, "log_start_offset": -1,
                                                "last_fetched_epoch": -1}]}

    r = wire.call(1, 12, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                  session_epoch=-1, replica_id=-1, rack_id="", forgotten_topics_data=[],
                  topics=[fetch_part("plain", 100), fetch_part("no-such-topic", 0)])
    assert [int(t.partitions[0].error_code) for t in r.responses] == [1, 3]
    negative = fetch_part("plain", 0)
    negative["partitions"][0]["partition_max_bytes"] = -5  # read as 0: the first batch only
    r = wire.call(1, 12, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                  session_epoch=-1, replica_id=-1, rack_id="", forgotten_topics_data=[], topics=[negative])
    part = r.responses[0].partitions[0]
    assert (int(part.error_code), len(part.records)) == (0, len(record))
    r = wire.call(2, 7, replica_id=-1, isolation_level=0, topics=[{"name": "plain", "partitions": [
        {"partition_index": 5, "timestamp": -1, "current_leader_epoch": -1}]}])
    assert int(r.topics[0].partitions[0].error_code) == 3
    r = wire.call(3, 12, topics=[{"name": "bad name!", "topic_id": None}], allow_auto_topic_creation=True,
                  include_topic_authorized_operations=False)
    assert int(r.topics[0].error_code) == 17

    join = {"rebalance_timeout": 1000, "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}
    assert int(wire.call(11, 5, group_id="g", session_timeout=1, **join).error_code) == 26  # below the minimum
    assert int(wire.call(11, 5, group_id="g", session_timeout=10**8, **join).error_code) == 26  # above the maximum
    assert int(wire.call(11, 5, group_id="", session_timeout=10_000, **join).error_code) == 24
    assert int(wire.call(12, 3, group_id="no-group", generation_id=1, member_id="m",
                         group_instance_id=None).error_code) == 25
    assert int(wire.call(14, 3, group_id="no-group", generation_id=1, member_id="m", group_instance_id=None,
                         assignments=[]).error_code) == 25
    r = wire.call(8, 8, group_id="no-group", generation_id_or_member_epoch=5, member_id="m", group_instance_id=None,
                  retention_time_ms=-1, topics=[{"name": "plain", "partitions": [
                      {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                       "committed_metadata": ""}]}])
    assert int(r.topics[0].partitions[0].error_code) == 22  # a generation of a group that does not exist


def test_a_null_where_kafka_forbids_one_closes_the_connection(tb: TieredBroker, wire: WireClient) -> None:
    """A non-nullable array sent with length -1: Kafka's reader refuses the request; no handler sees None."""
    ensure_topic(wire, "nulls")
    marker = uuid.UUID("0123456789abcdef0123456789abcdef")
    frame = bytearray(encode_request(1, 16, 77, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                                     session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                                     topics=[{"topic_id": marker, "partitions": []}]))
    at = frame.index(marker.bytes) + 16
    assert frame[at] == 1  # the compact length of the empty partitions array; 0 means null
    frame[at] = 0
    with WireClient(tb.bootstrap) as c:
        c.send_raw(bytes(frame))
        c.sock.settimeout(5)
        assert c.sock.recv(1) == b""  # closed without an answer, as Kafka closes on a parse error
    assert int(wire.call(18, 0).error_code) == 0  # the broker, and other connections, carry on
    text = tb.broker.log_path.read_text(errors="replace")
    assert "non-nullable field FetchTopic.partitions" in text


# -- server.properties ---------------------------------------------------------------------------

BAD_PROPERTIES = [
    ({"num.partitions": "0"}, "num.partitions"),
    ({"socket.request.max.bytes": "0"}, "socket.request.max.bytes"),
    ({"connections.max.idle.ms": "-5"}, "connections.max.idle.ms"),
    ({"message.max.bytes": "-1"}, "message.max.bytes"),
    ({"log.retention.bytes": "lots"}, "log.retention.bytes"),
    ({"log.segment.bytes": "0"}, "log.segment.bytes"),
    ({"log.cleanup.policy": "shred"}, "log.cleanup.policy"),
    ({"remote.log.storage.system.enable": "true", "log.retention.bytes": "1000", "log.local.retention.bytes": "2000"},
     "local.retention.bytes"),
    ({"remote.log.storage.system.enable": "maybe"}, "remote.log.storage.system.enable"),
]


@pytest.mark.parametrize(("props", "named"), BAD_PROPERTIES, ids=[n for _, n in BAD_PROPERTIES])
def test_serve_refuses_invalid_server_properties(tmp_path: Path, props: dict[str, str], named: str) -> None:
    config = tmp_path / "server.properties"
    lines = [f"log.dirs={tmp_path / 'logs'}", "listeners=PLAINTEXT://127.0.0.1:0"]
    config.write_text("\n".join(lines + [f"{k}={v}" for k, v in props.items()]) + "\n")
    result = subprocess.run([sys.executable, "-m", "strata", "serve", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    assert named in result.stderr and "Traceback" not in result.stderr
    assert "ready" not in result.stderr
