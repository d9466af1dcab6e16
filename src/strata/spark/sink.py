"""The sink of ``format("strata")``: DataFrame rows to Kafka records, as Spark's Kafka sink does.

    (df.selectExpr("CAST(id AS STRING) AS key", "payload AS value")
       .write.format("strata").mode("append")
       .option("kafka.bootstrap.servers", "localhost:9092")
       .option("topic", "events")
       .save())

Save mode: ``append``. Spark's Kafka sink accepts its default, ``ErrorIfExists``, and appends;
Spark refuses ``ErrorIfExists`` and ``Ignore`` for every Python data source before the source is
asked (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``), so ``.mode("append")`` is required here.
``Overwrite``, which Spark's message offers too, is refused with :class:`StrataSaveModeError` (as
Spark's Kafka sink refuses it): records cannot replace what a topic holds.

Columns (Spark's names, types and errors; other columns are ignored):

- ``value`` (required): binary or string; a null value is a tombstone.
- ``key``: binary or string, may be null.
- ``topic``: string; required unless the ``topic`` option is set, which overrides the column.
- ``partition``: int; null (or no column) leaves the choice to the producer's partitioner.
- ``headers``: ``array<struct<key:string,value:binary>>``; header values may be null.

The schema is checked when Spark creates the writer, on the driver, before any task runs. Each
task writes its Arrow batches column by column through one confluent-kafka (librdkafka)
``Producer``: idempotent, ``acks=all``, and keyed records land in the partition the Java client
(Spark's Kafka sink) would choose (``murmur2_random``). Every ``kafka.*`` option goes to the
producer without its prefix (librdkafka's property names; most match the Java client's), after
these defaults, and is checked on the driver too; the Kafka Java client's security options
(``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location``...) are translated to librdkafka's
(:func:`strata.client.security.librdkafka_config`). A task succeeds only when every record it
produced was acknowledged; otherwise it fails with the first delivery error, and Spark retries it.
Like Spark's Kafka sink this is at-least-once: a retried task or micro-batch writes its records
again.

With ``transactional=true`` (and ``transactional.id.prefix``) each task writes its rows as one Kafka
transaction and commits a progress marker with them, so that, read with read_committed, every row
is in the topic exactly once across task retries and micro-batch replays (:mod:`strata.spark.transactional`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from strata.spark.options import SinkOptions, StrataOptionError, parse_sink_options
from strata.spark.task_writer import (
    _TIMEOUT_KEYS,
    DEFAULT_DELIVERY_TIMEOUT_MS,
    HEADERS,
    KEY,
    PARTITION,
    TOPIC,
    VALUE,
    SinkColumns,
    StrataWriteError,
    StrataWriterCommitMessage,
    _librdkafka_logger,
    _TaskWriter,
    librdkafka_options,
)
from strata.spark.transactional import BATCH_ID_PROPERTY, QUERY_ID_PROPERTY, TransactionalTask, commit_batch_marker

__all__ = [
    "SinkColumns", "StrataBatchWriter", "StrataSaveModeError", "StrataSinkSchemaError", "StrataStreamWriter",
    "StrataWriteError", "StrataWriterCommitMessage", "producer_config", "sink_columns",
]

log = logging.getLogger(__name__)

HEADERS_TYPE = "array<struct<key:string,value:binary>>"
# transactional=true: how long a task's transaction may stay open (the broker's transaction.max.timeout.ms
# is 15 minutes by default). An attempt that dies leaves its transaction open until the next attempt
# fences it, or this long; read_committed readers of the topic wait at its first offset meanwhile.
DEFAULT_TRANSACTION_TIMEOUT_MS = 600_000


class StrataSinkSchemaError(ValueError):
    """The DataFrame cannot be written to Kafka: a column is missing or has the wrong type."""


class StrataSaveModeError(ValueError):
    """A batch write in a save mode other than ``append``: the message says what to write instead."""

    def __init__(self, mode: str) -> None:
        super().__init__(f'Save mode {mode} not allowed for format("strata"): records are appended to Kafka topics, '
                         'which cannot be overwritten. Use .mode("append") (Spark\'s Kafka sink appends in its default '
                         'mode ErrorIfExists, which Spark refuses for Python data sources such as this one).')


def _unsupported(name: str, t: DataType, expected: str) -> StrataSinkSchemaError:
    return StrataSinkSchemaError(f"{name} attribute unsupported type {t.simpleString()}. {name} must be a(n) "
                                 f"{expected}")


def _is_headers(t: DataType) -> bool:
    """``array<struct<key:string,value:binary>>``, nullability aside (Spark's ``sameType``)."""
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = t.elementType.fields
    return (len(fields) == 2 and fields[0].name == "key" and isinstance(fields[0].dataType, StringType)
            and fields[1].name == "value" and isinstance(fields[1].dataType, BinaryType))


def sink_columns(schema: StructType, topic_option: str | None) -> SinkColumns:
    """Spark's ``KafkaWriter.validateQuery``: the same column names (case-sensitive) and messages."""
    names = [f.name for f in schema.fields]
    for name in (TOPIC, KEY, VALUE, PARTITION, HEADERS):
        if names.count(name) > 1:
            raise StrataSinkSchemaError(f"the DataFrame has {names.count(name)} columns named '{name}'")
    types = {f.name: f.dataType for f in schema.fields}
    if topic_option is None:
        if TOPIC not in types:
            raise StrataSinkSchemaError(f"topic option required when no '{TOPIC}' attribute is present. "
                                        "Use the topic option for setting a topic.")
        if not isinstance(types[TOPIC], StringType):
            raise _unsupported(TOPIC, types[TOPIC], "string")
    if KEY in types and not isinstance(types[KEY], StringType | BinaryType):
        raise _unsupported(KEY, types[KEY], "string or binary")
    if VALUE not in types:
        raise StrataSinkSchemaError(f"Required attribute '{VALUE}' not found")
    if not isinstance(types[VALUE], StringType | BinaryType):
        raise _unsupported(VALUE, types[VALUE], "string or binary")
    if HEADERS in types and not _is_headers(types[HEADERS]):
        raise _unsupported(HEADERS, types[HEADERS], HEADERS_TYPE)
    if PARTITION in types and not isinstance(types[PARTITION], IntegerType):
        raise _unsupported(PARTITION, types[PARTITION], "int")
    return SinkColumns(key=KEY in types, topic=topic_option is None, partition=PARTITION in types,
                       headers=HEADERS in types)


def producer_config(options: SinkOptions) -> dict[str, str]:
    """Strata's defaults, then every ``kafka.*`` option (without the prefix), then the bootstrap servers.

    Transactional writes add ``transaction.timeout.ms`` (unless given) and keep the default delivery
    timeout within it (librdkafka refuses a ``message.timeout.ms`` above it); the transactional.id is
    each task's own.
    """
    conf = {"enable.idempotence": "true", "acks": "all", "partitioner": "murmur2_random"}
    if not any(k in options.producer_config for k in _TIMEOUT_KEYS):
        conf["message.timeout.ms"] = str(DEFAULT_DELIVERY_TIMEOUT_MS)
    if options.transactional and "transaction.timeout.ms" not in options.producer_config:
        conf["transaction.timeout.ms"] = str(DEFAULT_TRANSACTION_TIMEOUT_MS)
    conf.update(librdkafka_options(options.producer_config))
    if options.transactional and "message.timeout.ms" in conf and not any(k in options.producer_config
                                                                           for k in _TIMEOUT_KEYS):
        try:
            within = min(int(conf["message.timeout.ms"]), int(conf["transaction.timeout.ms"]))
        except ValueError:
            pass  # librdkafka names the bad value when the options are checked
        else:
            conf["message.timeout.ms"] = str(within)
    conf["bootstrap.servers"] = options.bootstrap
    return conf


def _check_producer_config(conf: dict[str, str]) -> None:
    """librdkafka checks names and values when the producer is created; do it on the driver, offline
    (no bootstrap servers, so no connection), so a bad ``kafka.*`` option fails before any task."""
    from confluent_kafka import KafkaException, Producer

    offline = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    try:
        producer = Producer({**offline, "logger": _librdkafka_logger()})
    except KafkaException as e:
        err = e.args[0] if e.args else e
        reason = err.str() if hasattr(err, "str") else str(err)
        raise StrataOptionError(f"the Kafka producer rejects the options: {reason} (options prefixed 'kafka.' go "
                                "to librdkafka without the prefix)") from None
    producer.close()


class _Sink:
    """Shared by the batch and the stream writer: parsed options and columns, nothing unpicklable."""

    streaming = False

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = parse_sink_options(options)
        self.columns = sink_columns(schema, self.options.topic)
        self.conf = producer_config(self.options)
        transactional = {"transactional.id": f"{self.options.transactional_id_prefix}-0"} \
            if self.options.transactional else {}
        _check_producer_config({**self.conf, **transactional})
        # A batch write's run id, drawn on the driver: every attempt of its tasks has it (their markers
        # say which write committed them); a streaming query's tasks use the query's id instead.
        self.run_id = uuid.uuid4().hex

    def _write(self, batches: Iterator[Any]) -> StrataWriterCommitMessage:
        if self.options.transactional:
            return self._write_transactional(batches)
        started = time.monotonic()
        task = _TaskWriter(self.conf, self.columns, self.options.topic)
        try:
            for batch in batches:
                task.write_batch(batch)
            task.finish()
        finally:
            task.close()
        return StrataWriterCommitMessage(task.records, task.bytes, time.monotonic() - started)

    def _write_transactional(self, batches: Iterator[Any]) -> StrataWriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise StrataWriteError("transactional writes run in Spark tasks (no TaskContext)")
        # A micro-batch is identified by its query's id (kept in the checkpoint) and batch id, also when a
        # batch write runs inside ``foreachBatch`` (its jobs carry the micro-batch's properties), so a
        # replayed micro-batch finds the markers of its first run; any other batch write by its own id.
        query, batch_id = ctx.getLocalProperty(QUERY_ID_PROPERTY), ctx.getLocalProperty(BATCH_ID_PROPERTY)
        run, batch = self.run_id, 0
        if query and batch_id is not None:
            run, batch = query, int(batch_id)
        elif self.streaming:
            raise StrataWriteError(f"a streaming task without Spark's {QUERY_ID_PROPERTY!r} and "
                                   f"{BATCH_ID_PROPERTY!r} properties cannot write exactly once")
        task = TransactionalTask(self.conf, self.columns, self.options, partition=ctx.partitionId(), run=run,
                                 batch=batch, streaming=self.streaming, micro_batch=run != self.run_id)
        return task.run(batches)


def _summary(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int, int]:
    done = [m for m in messages if isinstance(m, StrataWriterCommitMessage)]
    return len(done), sum(m.records for m in done), sum(m.bytes for m in done)


class StrataBatchWriter(_Sink, DataSourceArrowWriter):
    """``df.write.format("strata")``: each task produces its Arrow batches and waits for every ack."""

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, records, size = _summary(messages)
        log.info("strata sink: %d task(s) wrote %d record(s), %d byte(s)", tasks, records, size)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, records, size = _summary(messages)
        log.warning("strata sink: write aborted; %d of %d task(s) had already written %d record(s), %d byte(s) "
                    "(Kafka has no rollback: they stay in the topics)", tasks, len(messages), records, size)


class StrataStreamWriter(_Sink, DataSourceStreamArrowWriter):
    """``writeStream.format("strata")``: each micro-batch like a batch write (at-least-once, as Spark's;
    exactly once with ``transactional=true``)."""

    streaming = True

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, records, size = _summary(messages)
        log.info("strata sink: batch %d: %d task(s) wrote %d record(s), %d byte(s)", batchId, tasks, records, size)
        if self.options.transactional:
            # Every task committed its transaction: the batch marker lets a replay of this batch (the
            # driver dies before Spark records the batch in its commit log) skip it whatever its layout.
            runs = {m.run for m in messages if isinstance(m, StrataWriterCommitMessage) and m.run}
            if len(runs) == 1:
                commit_batch_marker(self.options, runs.pop(), batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, records, size = _summary(messages)
        log.warning("strata sink: batch %d aborted; %d of %d task(s) had already written %d record(s), %d byte(s)",
                    batchId, tasks, len(messages), records, size)
