"""``build.make``: one version-agnostic description, the right kio entity for every version.

Handlers describe a response once; these tests pin down the rules that makes safe: fields a
version lacks are dropped (Kafka's rule for older versions), nested dicts and lists become that
version's entity classes, ints become ErrorCode / timedelta / datetime where kio wants them,
and a required field nobody supplied is a TypeError naming it rather than a silent default.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from strata.protocol.build import fields_of, has_field, make, zero_values
from strata.protocol.frame import encode_response

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")

METADATA = {
    "throttle_time": 25,
    "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
    "cluster_id": "cid",
    "controller_id": 1,
    "topics": [{
        "error_code": 0, "name": "t", "topic_id": TOPIC_ID, "is_internal": False,
        "partitions": [{"error_code": 9, "partition_index": 0, "leader_id": 1, "leader_epoch": 3,
                        "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}],
        "topic_authorized_operations": -2147483648,
    }],
    "cluster_authorized_operations": -2147483648,
}


@pytest.mark.parametrize("version", range(13))
def test_metadata_response_from_one_description_for_every_version(version: int) -> None:
    cls = load_response_schema(3, version)
    resp = make(cls, **METADATA)
    assert type(resp) is cls
    names = {f.name for f in dataclasses.fields(cls)}
    (topic,) = resp.topics
    (partition,) = topic.partitions
    assert type(topic).__module__ == cls.__module__  # nested entities of this very version
    assert partition.error_code is ErrorCode.replica_not_available  # 9, as kio's enum
    assert partition.replica_nodes == (1,) and isinstance(resp.brokers, tuple)
    assert ("throttle_time" in names) == (version >= 3)
    if "throttle_time" in names:
        assert resp.throttle_time == datetime.timedelta(milliseconds=25)
    assert has_field(topic, "topic_id") == (version >= 10)
    assert has_field(partition, "leader_epoch") == (version >= 7)
    assert has_field(cls, "cluster_id") == (version >= 2)
    (data,) = encode_response(resp, 1)  # and it encodes
    assert len(data) > 20


def test_produce_response_timestamps_and_error_codes() -> None:
    for version in (3, 8, 9, 11):
        cls = load_response_schema(0, version)
        base = {"throttle_time": 0, "responses": [{"name": "t", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 5, "log_append_time": -1, "log_start_offset": 0,
             "record_errors": [], "error_message": None},
            {"index": 1, "error_code": 87, "base_offset": -1, "log_append_time": 1_700_000_000_123,
             "log_start_offset": 0, "record_errors": [{"batch_index": 2, "batch_index_error_message": "bad"}],
             "error_message": "invalid"},
        ]}]}
        ok, failed = make(cls, **base).responses[0].partition_responses
        assert ok.log_append_time is None  # -1: no LogAppendTime
        assert failed.log_append_time == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC)
        assert failed.error_code is ErrorCode.invalid_record
        if version >= 8:
            assert failed.record_errors[0].batch_index == 2 and failed.error_message == "invalid"
        else:
            assert not has_field(failed, "record_errors")


def test_request_fields_read_across_versions() -> None:
    v4 = make(load_request_schema(1, 4), **{**zero_values(load_request_schema(1, 4)), "max_wait": 500,
                                            "min_bytes": 1, "topics": [{"topic": "t", "partitions": []}]})
    v13 = make(load_request_schema(1, 13), **{**zero_values(load_request_schema(1, 13)), "max_wait": 500,
                                              "topics": [{"topic_id": TOPIC_ID, "partitions": []}]})
    assert v4.max_wait == datetime.timedelta(milliseconds=500) == v13.max_wait
    assert getattr(v4.topics[0], "topic", None) == "t" and getattr(v4.topics[0], "topic_id", None) is None
    assert getattr(v13.topics[0], "topic", None) is None and v13.topics[0].topic_id == TOPIC_ID
    assert fields_of(v4.topics[0]) == {"topic": "t", "partitions": ()}


def test_missing_required_field_names_class_and_field() -> None:
    cls = load_response_schema(3, 12)
    with pytest.raises(TypeError, match=r"MetadataResponse needs \['brokers', 'topics'\]"):
        make(cls, throttle_time=0, cluster_id=None, controller_id=1)
    broker_cls = load_response_schema(60, 0)
    with pytest.raises(TypeError, match=r"DescribeClusterBroker needs \['broker_id'\]"):
        make(broker_cls, **{**zero_values(broker_cls), "brokers": [{"node_id": 1, "host": "h", "port": 1}]})


def test_entities_pass_through_and_optional_arrays_stay_none() -> None:
    cls = load_response_schema(3, 12)
    resp = make(cls, **METADATA)
    again = make(cls, **{**METADATA, "topics": resp.topics})
    assert again == resp
    fetch = load_response_schema(1, 12)
    part = make(fetch, **{**zero_values(fetch), "responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 0, "aborted_transactions": None,
         "records": None}]}]}).responses[0].partitions[0]
    assert part.aborted_transactions is None and part.records is None
    assert part.last_stable_offset == -1 and part.preferred_read_replica == -1  # kio's defaults kept


def test_zero_values_are_read_only() -> None:
    """Cached per class: writing into one would change every later response of that class."""
    z = zero_values(load_response_schema(18, 3))
    with pytest.raises(TypeError):
        z["error_code"] = -1  # type: ignore[index]
    assert int(make(load_response_schema(18, 3), **z).error_code) == 0


def test_zero_values_are_neutral() -> None:
    z = zero_values(load_response_schema(1, 16))
    assert z["error_code"] == 0 and z["responses"] == () and z["throttle_time"] == 0
    z = zero_values(load_response_schema(60, 2))
    assert z["cluster_id"] == "" and z["brokers"] == ()
    z = zero_values(load_request_schema(3, 12))
    assert z["topics"] is None  # nullable: None, not an empty list ("all topics" vs "none")
    assert "allow_auto_topic_creation" not in z  # has a default in the spec: kio's (True) is kept
    assert make(load_request_schema(3, 12), **z).allow_auto_topic_creation is True
