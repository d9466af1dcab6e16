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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from itertools import repeat
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from strata.client.security import librdkafka_config
from strata.errors import InvalidConfigError
from strata.spark.options import SinkOptions, StrataOptionError, parse_sink_options

__all__ = [
    "SinkColumns", "StrataBatchWriter", "StrataSaveModeError", "StrataSinkSchemaError", "StrataStreamWriter",
    "StrataWriteError", "StrataWriterCommitMessage", "producer_config", "sink_columns",
]

log = logging.getLogger(__name__)

TOPIC, KEY, VALUE, PARTITION, HEADERS = "topic", "key", "value", "partition", "headers"
HEADERS_TYPE = "array<struct<key:string,value:binary>>"
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000  # the Java producer's delivery.timeout.ms, which Spark users know
# transactional=true: how long a task's transaction may stay open (the broker's transaction.max.timeout.ms
# is 15 minutes by default). An attempt that dies leaves its transaction open until the next attempt
# fences it, or this long; read_committed readers of the topic wait at its first offset meanwhile.
DEFAULT_TRANSACTION_TIMEOUT_MS = 600_000
_DIGEST_MASK = (1 << 64) - 1
_TIMEOUT_KEYS = ("message.timeout.ms", "delivery.timeout.ms")
_FLUSH_MARGIN_S = 30.0
_UNASSIGNED = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the partitioner decides


class StrataSinkSchemaError(ValueError):
    """The DataFrame cannot be written to Kafka: a column is missing or has the wrong type."""


class StrataSaveModeError(ValueError):
    """A batch write in a save mode other than ``append``: the message says what to write instead."""

    def __init__(self, mode: str) -> None:
        super().__init__(f'Save mode {mode} not allowed for format("strata"): records are appended to Kafka topics, '
                         'which cannot be overwritten. Use .mode("append") (Spark\'s Kafka sink appends in its default '
                         'mode ErrorIfExists, which Spark refuses for Python data sources such as this one).')


class StrataWriteError(RuntimeError):
    """Records could not be written: a delivery failed or was not acknowledged in time."""


@dataclass(frozen=True)
class SinkColumns:
    """Which of Spark's Kafka sink columns the DataFrame has (checked on the driver)."""

    key: bool
    topic: bool  # the topic comes from the column (no ``topic`` option)
    partition: bool
    headers: bool


@dataclass(frozen=True)
class StrataWriterCommitMessage(WriterCommitMessage):
    """What one task wrote: every record here was acknowledged by the broker (and, transactional, committed)."""

    records: int
    bytes: int  # keys + values (+ header keys and values)
    seconds: float
    transactional_id: str | None = None  # transactional=true only, as the next three
    run: str | None = None  # the streaming query's id, or the batch write's
    batch: int | None = None  # the micro-batch id (0 for a batch write)
    skipped: str | None = None  # why nothing was written: an earlier attempt or run committed these rows


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


def librdkafka_options(producer_options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options (without the prefix) in librdkafka's names: the Java client's security keys
    translated; StrataOptionError naming what is wrong with them (never a password)."""
    try:
        return librdkafka_config(producer_options)
    except InvalidConfigError as e:
        raise StrataOptionError(f"invalid Kafka security option: {e} (options prefixed 'kafka.')") from None


def _delivery_timeout_s(conf: dict[str, str]) -> float:
    for k in _TIMEOUT_KEYS:
        if k in conf:
            try:
                ms = int(conf[k])
            except ValueError:
                break
            if ms > 0:  # 0 is librdkafka's "no timeout": keep the default bound for our waits
                return ms / 1000
            break
    return DEFAULT_DELIVERY_TIMEOUT_MS / 1000


def _librdkafka_logger() -> logging.Logger:
    return logging.getLogger(f"{__name__}.librdkafka")


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

        from strata.spark.transactional import BATCH_ID_PROPERTY, QUERY_ID_PROPERTY, TransactionalTask

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
                from strata.spark.transactional import commit_batch_marker

                commit_batch_marker(self.options, runs.pop(), batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, records, size = _summary(messages)
        log.warning("strata sink: batch %d aborted; %d of %d task(s) had already written %d record(s), %d byte(s)",
                    batchId, tasks, len(messages), records, size)


class _TaskWriter:
    """One task's producer (opened at the first non-empty batch) and its delivery failures.

    ``digest=True`` also sums a 64-bit hash of every row (topic, partition, key, value, headers):
    the order-independent digest a transactional task's progress marker keeps.
    """

    def __init__(self, conf: dict[str, str], columns: SinkColumns, topic: str | None, *,
                 digest: bool = False) -> None:
        self.conf = conf
        self.columns = columns
        self.topic = topic
        self.timeout_s = _delivery_timeout_s(conf)
        self.producer: Any = None
        self.failures: list[tuple[Any, str, int]] = []
        self.failed = 0
        self.records = 0
        self.bytes = 0
        self.with_digest = digest
        self.digest = 0

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1
            if len(self.failures) < 5:
                self.failures.append((err, msg.topic(), msg.partition()))

    def open(self) -> Any:
        from confluent_kafka import Producer

        self.producer = Producer({**self.conf, "delivery.report.only.error": True,
                                  "on_delivery": self._on_delivery, "logger": _librdkafka_logger()})
        return self.producer

    def _raise_failures(self) -> None:
        if self.failed:
            first = "; ".join(f"{t}[{p}]: {err.str()}" for err, t, p in self.failures)
            raise StrataWriteError(f"{self.failed} record(s) could not be written to Kafka: {first}")

    def write_batch(self, batch: Any, produce: bool = True) -> None:
        """Produce the batch's rows (``produce=False``: only count them, and digest them if asked)."""
        n = batch.num_rows
        if n == 0:
            return
        import pyarrow.compute as pc

        producer = (self.producer or self.open()) if produce else None
        c = self.columns
        index = {name: i for i, name in enumerate(batch.schema.names)}

        def column(name: str) -> Any:
            return batch.column(index[name])

        value_col = column(VALUE)
        size = pc.sum(pc.binary_length(value_col)).as_py() or 0
        values = value_col.to_pylist()
        if c.key:
            key_col = column(KEY)
            size += pc.sum(pc.binary_length(key_col)).as_py() or 0
            keys: Iterable[Any] = key_col.to_pylist()
        else:
            keys = repeat(None, n)
        if c.topic:
            topic_col = column(TOPIC)
            if topic_col.null_count:
                raise StrataWriteError(f"null topic present in the data. Use the {TOPIC} option for setting a "
                                       "default topic.")
            topics: Iterable[Any] = topic_col.to_pylist()
        else:
            topics = repeat(self.topic, n)
        if c.partition:
            part_col = column(PARTITION)
            lowest = pc.min(part_col).as_py()
            if lowest is not None and lowest < 0:
                raise StrataWriteError(f"invalid partition {lowest} in the data: partitions are >= 0 (null lets "
                                       "the partitioner choose)")
            partitions: Iterable[int] = pc.fill_null(part_col, _UNASSIGNED).to_pylist()
        else:
            partitions = repeat(_UNASSIGNED, n)
        header_rows: list[Any] | None = None
        if c.headers:
            header_rows, header_bytes = _headers(column(HEADERS).to_pylist())
            size += header_bytes
        if self.with_digest:  # materialised: the rows are walked twice
            topics, values, keys, partitions = list(topics), values, list(keys), list(partitions)
            self.digest = (self.digest + _digest(topics, partitions, keys, values, header_rows)) & _DIGEST_MASK
        if producer is not None:
            if header_rows is not None:
                self._produce_with_headers(producer, topics, values, keys, partitions, header_rows)
            else:
                self._produce(producer, topics, values, keys, partitions)
            producer.poll(0)
            self._raise_failures()
        self.records += n
        self.bytes += size

    def _produce(self, producer: Any, topics: Iterable[Any], values: Iterable[Any], keys: Iterable[Any],
                 partitions: Iterable[int]) -> None:
        produce = producer.produce
        for t, v, k, p in zip(topics, values, keys, partitions, strict=False):
            try:
                produce(t, v, k, p)
            except BufferError:
                self._retry(t, v, k, p, None)
            except Exception as e:
                raise self._produce_error(e, t, p) from e

    def _produce_with_headers(self, producer: Any, topics: Iterable[Any], values: Iterable[Any], keys: Iterable[Any],
                              partitions: Iterable[int], headers: Iterable[Any]) -> None:
        produce = producer.produce
        for t, v, k, p, h in zip(topics, values, keys, partitions, headers, strict=False):
            try:
                produce(t, v, k, p, headers=h)
            except BufferError:
                self._retry(t, v, k, p, h)
            except Exception as e:
                raise self._produce_error(e, t, p) from e

    @staticmethod
    def _produce_error(e: Exception, topic: str, partition: int) -> StrataWriteError:
        where = topic if partition == _UNASSIGNED else f"{topic}[{partition}]"
        err = e.args[0] if e.args else e
        reason = err.str() if hasattr(err, "str") else str(err)
        return StrataWriteError(f"cannot produce a record to {where}: {reason}")

    def _retry(self, t: Any, v: Any, k: Any, p: int, h: Any) -> None:
        """The producer's queue is full: serve deliveries until there is room (bounded)."""
        deadline = time.monotonic() + self.timeout_s + _FLUSH_MARGIN_S
        while True:
            self.producer.poll(0.05)
            self._raise_failures()
            try:
                if h is None:
                    self.producer.produce(t, v, k, p)
                else:
                    self.producer.produce(t, v, k, p, headers=h)
                return
            except BufferError:
                if time.monotonic() > deadline:
                    bound = self.timeout_s + _FLUSH_MARGIN_S
                    raise StrataWriteError(f"the producer's queue stayed full for {bound:.0f} s "
                                           f"({len(self.producer)} record(s) waiting)") from None
            except Exception as e:
                raise self._produce_error(e, t, p) from e

    def finish(self) -> None:
        """Wait (bounded) until every record is acknowledged or failed; raise if any is not written."""
        if self.producer is None:
            return
        bound = self.timeout_s + _FLUSH_MARGIN_S
        deadline = time.monotonic() + bound
        remaining = len(self.producer)
        while remaining and time.monotonic() < deadline:
            remaining = self.producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
            if self.failed:  # fail fast: the task fails anyway
                break
        self._raise_failures()
        if remaining:
            raise StrataWriteError(f"{remaining} record(s) were not acknowledged within {bound:.0f} s")

    def close(self) -> None:
        """Drop what is still queued (after a failure) and close the producer without waiting."""
        producer, self.producer = self.producer, None
        if producer is None:
            return
        if len(producer):
            producer.purge()
            producer.flush(0)  # serve the purged messages' reports
        producer.close()


def _as_bytes(v: Any) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


def _digest(topics: Iterable[Any], partitions: Iterable[int], keys: Iterable[Any], values: Iterable[Any],
            headers: Iterable[Any] | None) -> int:
    """The sum (mod 2**64) of a 64-bit BLAKE2b hash of every row: equal for the same rows in any order."""
    total = 0
    for t, p, k, v, h in zip(topics, partitions, keys, values, headers if headers is not None else repeat(None),
                             strict=False):
        kb, vb = _as_bytes(k), _as_bytes(v)
        d = blake2b(b"%s\x00%d\x00%d\x00%d\x00" % (t.encode(), p, -1 if kb is None else len(kb),
                                                   -1 if vb is None else len(vb)), digest_size=8)
        if kb:
            d.update(kb)
        if vb:
            d.update(vb)
        if h:
            d.update(repr(h).encode())
        total += int.from_bytes(d.digest(), "little")
    return total & _DIGEST_MASK


def _headers(rows: list[Any]) -> tuple[list[Any], int]:
    """Spark's ``headers`` rows (lists of {key, value}) as confluent-kafka header lists, and their size."""
    out: list[Any] = []
    size = 0
    for row in rows:
        if not row:
            out.append(None)
            continue
        pairs = []
        for h in row:
            key, value = h["key"], h["value"]
            if key is None:
                raise StrataWriteError("null header key present in the data: Kafka header keys are strings")
            pairs.append((key, value))
            size += len(key.encode()) + (len(value) if value is not None else 0)
        out.append(pairs)
    return out, size
