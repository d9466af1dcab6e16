"""Spark on a diskless topic: the exactly-once sink writes it (transactions through the WAL) and
``format("strata")`` reads it back, every row once.

Until consolidation moves diskless data into KIP-405 segments, the source reads a diskless topic through
the brokers' Fetch (any broker serves it, from the object store); its remote-segment planning finds nothing.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from confluent_kafka.admin import NewTopic
from pyspark.sql import functions as F
from tests.transactions.clients import until_end_confluent

ROWS, TASKS = 4000, 4


def test_the_exactly_once_sink_writes_a_diskless_topic_and_the_source_reads_it(spark: Any, txn_broker: Any) -> None:
    topic = f"dl-spark-{uuid.uuid4().hex[:8]}"
    txn_broker.admin().create_topics([NewTopic(topic, TASKS, 1, config={"diskless.enable": "true"})],
                                     operation_timeout=10)[topic].result(60)
    df = spark.range(0, ROWS, numPartitions=TASKS).selectExpr(
        "CAST(id AS STRING) AS key", "CAST(concat('v', CAST(id AS STRING)) AS BINARY) AS value")
    (df.write.format("strata").mode("append").option("kafka.bootstrap.servers", txn_broker.bootstrap)
     .option("topic", topic).option("transactional", "true").option("transactional.id.prefix", topic).save())
    expected = Counter(f"v{i}".encode() for i in range(ROWS))
    assert Counter(until_end_confluent(txn_broker.bootstrap, topic, TASKS, "read_committed", timeout_s=60)) == \
        expected
    read = (spark.read.format("strata").option("kafka.bootstrap.servers", txn_broker.bootstrap)
            .option("subscribe", topic).option("kafka.isolation.level", "read_committed").load())
    rows = read.select(F.col("value")).collect()
    assert Counter(bytes(r["value"]) for r in rows) == expected
