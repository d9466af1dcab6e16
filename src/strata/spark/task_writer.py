"""One Spark task's Kafka producer (``_TaskWriter``) and what the sink's plain and transactional paths share.

Split from :mod:`strata.spark.sink` so that :mod:`strata.spark.transactional`, which wraps a task writer in a
transaction, and the sink, which picks the transactional path when ``transactional=true``, do not import each
other: both build on this module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from hashlib import blake2b
from itertools import repeat
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from strata.client.security import librdkafka_config
from strata.errors import InvalidConfigError
from strata.spark.options import StrataOptionError

TOPIC, KEY, VALUE, PARTITION, HEADERS = "topic", "key", "value", "partition", "headers"
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000  # the Java producer's delivery.timeout.ms, which Spark users know
_DIGEST_MASK = (1 << 64) - 1
_TIMEOUT_KEYS = ("message.timeout.ms", "delivery.timeout.ms")
_FLUSH_MARGIN_S = 30.0
_UNASSIGNED = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the partitioner decides


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
    return logging.getLogger("strata.spark.sink.librdkafka")  # the name users configure


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
