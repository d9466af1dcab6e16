"""A topic comes back from the bucket (issue 29, part 4) on a single broker: the broker that wrote it is gone with
its disk; a new broker on the same bucket creates the topic with ``remote.recovery=true`` and serves every tiered
record again with its offset, key, value and timestamp; the topic's id, partitions and configs come from the
bucket; new records continue after the restored ones, in a later leader epoch, across a restart. The 3-broker
version (ZooKeeper and every disk destroyed) is tests/cluster/test_cluster_recovery.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import ConfigResource, NewTopic
from tests.support.keys import v2_broker_props
from tests.tiered.harness import WAIT_S, Record, S3TieredBroker, TieredBroker, read_range, wait_until

TOPIC = "orders"
PARTITIONS = 2
BASE_TS = 1_700_000_000_000

def read_partition(bootstrap: str, partition: int, end: int) -> list[Record]:
    """Every record of ``orders-<partition>`` below ``end``, with its timestamp."""
    return read_range(bootstrap, TOPIC, partition, 0, end)


def produce(b: TieredBroker, first: int, count: int) -> None:
    for p in range(PARTITIONS):
        b.produce(TOPIC, p, [(f"k{p}-{i}", f"value {p}-{i} " + "x" * 300, BASE_TS + i * 1000)
                             for i in range(first, first + count)])


def create_recovered(b: TieredBroker, partitions: int = -1, **configs: str) -> Any:
    futures = b.admin().create_topics([NewTopic(TOPIC, partitions, -1, config={"remote.recovery": "true",
                                                                               **configs})],
                                      operation_timeout=30)
    return futures[TOPIC]


def topic_id(b: TieredBroker) -> str:
    from confluent_kafka import TopicCollection

    return str(b.admin().describe_topics(TopicCollection([TOPIC]))[TOPIC].result(timeout=WAIT_S).topic_id)


def topic_configs(b: TieredBroker) -> dict[str, str]:
    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    entries = b.admin().describe_configs([res])[res].result(timeout=WAIT_S)
    return {k: v.value for k, v in entries.items()}


@pytest.mark.parametrize("store_kind", ["local", "s3"])
def test_a_topic_is_recovered_from_the_bucket_by_a_new_broker(tmp_path: Path, store_kind: str,
                                                            request: pytest.FixtureRequest) -> None:
    props = v2_broker_props(tmp_path / "keys")
    if store_kind == "s3":  # the same bucket and prefix for both brokers
        seaweedfs = request.getfixturevalue("seaweedfs")
        prefix = f"recovery-{uuid.uuid4().hex[:8]}/"

        def broker(name: str) -> TieredBroker:
            return S3TieredBroker(tmp_path / name, seaweedfs, key_prefix=prefix, **props)
    else:
        def broker(name: str) -> TieredBroker:
            return TieredBroker(tmp_path / name, **props)
    old = broker("old").start()
    try:
        old.create_topic(TOPIC, partitions=PARTITIONS, max_batches_per_segment=2, segment_bytes="4096",
                         retention_ms="-1", **{"max.message.bytes": "123456"})
        produce(old, 0, 40)
        for p in range(PARTITIONS):
            wait_until(f"{TOPIC}-{p} mostly tiered", lambda p=p: old.list_offsets(TOPIC, p, -5)[0] >= 30)
        expected = {p: read_partition(old.bootstrap, p, 40) for p in range(PARTITIONS)}
        assert all(len(expected[p]) == 40 for p in range(PARTITIONS))
        assert expected[0][3] == (3, b"k0-3", b"value 0-3 " + b"x" * 300, BASE_TS + 3000)
        old_id = topic_id(old)
    finally:
        old.stop()  # the broker and its disk are gone; the bucket stays

    new = broker("new")
    if store_kind == "local":
        shutil.copytree(old.remote_dir, new.remote_dir)  # the same bucket, seen from the new broker's config
    new.start()
    try:
        assert "has 2 partitions" in str(create_recovered(new, partitions=5).exception(timeout=WAIT_S))
        create_recovered(new).result(timeout=WAIT_S)
        meta = new.admin().list_topics(TOPIC, timeout=10).topics[TOPIC]
        assert len(meta.partitions) == PARTITIONS
        configs = topic_configs(new)
        assert configs["segment.bytes"] == "4096" and configs["max.message.bytes"] == "123456"
        assert configs["remote.storage.enable"] == "true" and configs["remote.recovery"] == "true"
        ends = {}
        for p in range(PARTITIONS):  # the restored end: whatever the old broker had tiered (at least 30)
            ends[p] = wait_until(f"{TOPIC}-{p} restored", lambda p=p: (e := new.list_offsets(TOPIC, p, -1)[0]) >= 30
                                 and e)
            assert new.list_offsets(TOPIC, p, -2)[0] == 0
            expected[p] = expected[p][: ends[p]]
            assert read_partition(new.bootstrap, p, ends[p]) == expected[p]  # offsets, keys, values, timestamps
        assert topic_id(new) == old_id  # the bucket's keys name it

        produce(new, 1000, 3)  # new records continue after the restored ones
        for p in range(PARTITIONS):
            got = read_partition(new.bootstrap, p, ends[p] + 3)
            assert got[: ends[p]] == expected[p] and [r[0] for r in got[ends[p]:]] == [ends[p], ends[p] + 1,
                                                                                        ends[p] + 2]
            _, epoch = new.list_offsets(TOPIC, p, -1)
            assert epoch >= 1  # above the restored records' epoch 0
        new.broker.restart()
        produce(new, 2000, 1)
        for p in range(PARTITIONS):
            wait_until("the restarted broker serves the partition",
                       lambda p=p: new.list_offsets(TOPIC, p, -1)[0] == ends[p] + 4)
            assert read_partition(new.bootstrap, p, ends[p])[: ends[p]] == expected[p]
    finally:
        new.stop()


def test_recovery_of_a_topic_the_bucket_does_not_hold_is_refused_naming_the_config(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **v2_broker_props(tmp_path / "keys")).start()
    try:
        error = create_recovered(b).exception(timeout=WAIT_S)
        assert error is not None and "remote.recovery" in str(error) and "no topic manifest" in str(error)
        assert TOPIC not in b.admin().list_topics(timeout=10).topics
    finally:
        b.stop()


def test_a_topic_unmounted_from_one_broker_is_mounted_on_another_with_every_record(tmp_path: Path) -> None:
    props = {**v2_broker_props(tmp_path / "keys"), "remote.log.scrubber.bytes.per.second": "0"}
    first = TieredBroker(tmp_path / "first", **props)
    second = TieredBroker(tmp_path / "second", **{**props, "rsm.config.dir": str(first.remote_dir)})
    first.start()
    second.start()
    try:
        first.create_topic(TOPIC, partitions=PARTITIONS, max_batches_per_segment=2, segment_bytes="4096",
                           retention_ms="-1")
        produce(first, 0, 25)  # the last records sit in the active segments, not uploaded
        expected = {p: read_partition(first.bootstrap, p, 25) for p in range(PARTITIONS)}
        assert all(len(v) == 25 for v in expected.values())

        unmounted = subprocess.run([sys.executable, "-m", "strata", "bucket", "unmount", "--bootstrap-server",
                                    first.bootstrap, "--topic", TOPIC], capture_output=True, text=True, timeout=120)
        assert unmounted.returncode == 0, unmounted.stderr
        assert "unmounted (2 partitions uploaded" in unmounted.stdout, unmounted.stdout
        assert TOPIC not in first.admin().list_topics(timeout=10).topics

        config = tmp_path / "second.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in second.broker.props.items()))
        mounted = subprocess.run([sys.executable, "-m", "strata", "bucket", "mount", "--config", str(config),
                                  "--bootstrap-server", second.bootstrap, "--topic", TOPIC],
                                 capture_output=True, text=True, timeout=120)
        assert mounted.returncode == 0, (mounted.stdout, mounted.stderr)
        for p in range(PARTITIONS):  # every record, the ones that were in the active segments too
            wait_until(f"{TOPIC}-{p} mounted", lambda p=p: second.list_offsets(TOPIC, p, -1)[0] == 25)
            assert read_partition(second.bootstrap, p, 25) == expected[p]
        produce(second, 100, 1)  # the topic is the second broker's now
        assert all(second.list_offsets(TOPIC, p, -1)[0] == 26 for p in range(PARTITIONS))
    finally:
        second.stop()
        first.stop()
