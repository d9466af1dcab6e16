"""``format("strata")`` against a cluster whose clients must use SASL_SSL, configured as spark-sql-kafka is.

Three brokers on ZooKeeper (module scope), tiering to a shared local store, each with a CLIENT listener
(SASL_SSL, PLAIN users from the listener's JAAS config, a CA-signed certificate) beside the PLAINTEXT one
the brokers and the test's own setup use. Spark gets only the CLIENT addresses and the Kafka Java client's
options (``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.*``): the driver plans over SASL_SSL (Metadata, ListOffsets, the remote log
metadata), the executors fetch the tail over it, remote segments come from the store, and the sink's
librdkafka producer gets the same options translated. A wrong password fails the read at once, saying so.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from tests.cluster.harness import Cluster, running_cluster, wait_until
from tests.cluster.tiered_harness import produce, tiered_props, tiered_topic_config, value
from tests.security.certs import Pki, make_pki

from strata.client.security import client_security
from strata.spark import explain
from strata.spark.failover import FailoverCluster

PARTITIONS = 3
RECORDS = 200  # per partition: about three 64 KiB segments, most of them tiered
PASSWORD, WRONG_PASSWORD = "alice-Spark-Canary-5", "wrong-Spark-Canary-8"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        f'user_alice="{PASSWORD}";')
WAIT_S = 90.0

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("spark-pki"))


@pytest.fixture(scope="module")
def cluster(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("spark-secure")
    props = {**tiered_props(base / "store"),
             "sasl.enabled.mechanisms": "PLAIN",
             "listener.name.client.plain.sasl.jaas.config": JAAS,
             "listener.name.client.ssl.keystore.type": "PEM",
             "listener.name.client.ssl.keystore.location": str(pki.server.pem)}
    with running_cluster(f"{zookeeper.connect}/t-{uuid.uuid4().hex[:12]}", base, 3, props,
                         listeners={"CLIENT": "SASL_SSL"}) as c:
        yield c


def client_bootstrap(cluster: Cluster) -> str:
    return ",".join(b.address("CLIENT") for b in cluster.brokers.values())


def security_options(truststore: str, password: str) -> dict[str, str]:
    """The Kafka client's options, as spark-sql-kafka takes them (docs/spark.md shows this function)."""
    return {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                  f'username="alice" password="{password}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": truststore,
    }


def rows(df: Any) -> list[tuple[int, int, bytes, bytes]]:
    return sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]))
                  for r in df.select("partition", "offset", "key", "value").collect())


def test_batch_read_and_write_over_sasl_ssl(spark: Any, cluster: Cluster, pki: Pki) -> None:
    topic, out = "sec-in", "sec-out"
    cluster.admin().create_topics([NewTopic(topic, PARTITIONS, 2, config=tiered_topic_config()),
                                   NewTopic(out, PARTITIONS, 2)])[topic].result(30)
    cluster.wait_full_isr(topic)
    for p in range(PARTITIONS):
        produce(cluster.bootstrap, topic, 0, RECORDS, partition=p)
    security = security_options(str(pki.truststore_pem), PASSWORD)
    bootstrap = client_bootstrap(cluster)
    with FailoverCluster(bootstrap, timeout_s=30,
                         security=client_security({k[len("kafka."):]: v for k, v in security.items()})) as client:
        def tiered() -> bool:
            got = client.list_offsets({(topic, p): -5 for p in range(PARTITIONS)})
            return min(got.values()) >= RECORDS // 3
        wait_until(tiered, WAIT_S, f"a third of every partition of {topic} in the remote tier")

    # the driver's plan: Metadata, ListOffsets and __remote_log_metadata over SASL_SSL
    summary = explain({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **security})
    assert summary.remote_offsets > 0 and summary.broker_slices > 0, summary
    want = [(p, o, b"%d" % o, value(o)) for p in range(PARTITIONS) for o in range(RECORDS)]

    df = (spark.read.format("strata")
          .option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic)
          .options(**security)
          .load())
    assert rows(df) == want

    (df.selectExpr("key", "value", "partition")
     .write.format("strata").mode("append")
     .option("kafka.bootstrap.servers", bootstrap)
     .option("topic", out)
     .options(**security)
     .save())
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(out, p, 0) for p in range(PARTITIONS)])
        written: list[tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + WAIT_S
        while len(written) < len(want) and time.monotonic() < deadline:
            for m in consumer.consume(500, timeout=0.5):
                if not m.error():
                    written.append((m.partition(), m.key(), m.value()))
    finally:
        consumer.close()
    assert sorted(written) == sorted((p, k, v) for p, _, k, v in want)


def test_a_wrong_password_fails_the_read_clearly(spark: Any, cluster: Cluster, pki: Pki) -> None:
    options = {"kafka.bootstrap.servers": client_bootstrap(cluster), "subscribe": "sec-in",
               **security_options(str(pki.truststore_pem), WRONG_PASSWORD)}
    df = spark.read.format("strata").options(**options).load()
    started = time.monotonic()
    with pytest.raises(Exception) as e:
        df.collect()
    message = str(e.value)
    assert "SASL PLAIN login as 'alice' failed" in message and "Invalid username or password" in message, message
    assert time.monotonic() - started < 30, "an authentication failure must not be retried until the timeout"
    assert WRONG_PASSWORD not in message and PASSWORD not in message
