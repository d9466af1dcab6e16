"""Exactly-once writes of ``format("strata")`` (``transactional=true``): one Kafka transaction per task.

Each Spark task writes its rows as ONE Kafka transaction under transactional.id
``<prefix>-<Spark partition id>``. The id is the same for every attempt of the task, so an attempt's
``init_transactions`` fences the attempts before it (a task that died mid-write, an executor that
was lost, a speculative copy): whatever a fenced attempt left open is aborted by the coordinator,
and its ``commit_transaction`` fails. A read_committed consumer therefore sees a task's rows
once, or not at all.

A retried task must also not write again what an attempt already committed (an attempt that
committed and then died before Spark heard of it; a micro-batch Spark replays after a restart).
So the transaction carries, next to the rows, a **progress marker**: a transactional offset commit
(``send_offsets_to_transaction``) in consumer group ``<prefix>-<partition id>`` for partition 0 of
the marker topic, committed or aborted with the rows. Its offset is the batch id + 1 (0 + 1 for a
batch write) and its metadata says which run wrote it (the streaming query's id, stable across
restarts from its checkpoint, also for a batch write inside ``foreachBatch``; for another batch
write an id drawn when the write starts, shared by all attempts of its tasks), how many rows and an
order-independent digest of them. Before writing, an
attempt fences its predecessors, then reads its marker with ``require_stable`` (read_committed: an
offset commit still pending in a transaction is waited for) and

- writes, and commits its marker, when the marker is from another run or an earlier batch;
- writes nothing when the marker is of a later batch (this one is long done);
- when the marker is of this very batch: reads its rows without writing them and compares the
  count and digest. Equal: the rows are in the topic already, nothing is written. Different: a
  replayed micro-batch reached the tasks partitioned differently from the attempt that committed
  (or the query is not deterministic), so rows may have moved between tasks that did and did not
  commit; the task fails with :class:`StrataExactlyOnceError` rather than write them twice.

A task commits only when its input really ended. When something upstream in the same task fails
(a source read, a UDF, a Python worker that dies), Spark shuts the writer's input socket: the
Arrow stream then just ends, exactly like a complete one, and the task would commit part of its
rows (its retry would then fail the layout check). So before committing, the task looks at what
follows the Arrow stream on its Python worker's input: Spark's END_OF_STREAM marker after a
complete input, nothing after a cut one (:func:`input_complete`).

A streaming query's driver adds, once every task of micro-batch B has committed
(``DataSourceStreamWriter.commit``, which Spark calls before it records the batch in the
checkpoint's commit log), a **batch marker**: offset B + 1 in group ``<prefix>`` (the same key).
A replay of a batch whose marker is there writes nothing, however its rows are partitioned: the
layout check above is only ever needed for a batch that failed part-way, or whose driver died
between the tasks' commits and its own.
"""

from __future__ import annotations

import inspect
import json
import logging
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from strata.spark.options import SinkOptions
from strata.spark.task_writer import (
    StrataWriteError,
    StrataWriterCommitMessage,
    _librdkafka_logger,
    _TaskWriter,
    librdkafka_options,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's local properties of a micro-batch's tasks
QUERY_ID_PROPERTY = "sql.streaming.queryId"
MARKER_PARTITION = 0
# Connection settings a marker consumer shares with the producer (``kafka.*`` options).
_SHARED_PREFIXES = ("security.", "sasl.", "ssl.", "client.", "socket.", "broker.address.")
_RETRY_PAUSE_S = 0.2
_END_OF_STREAM = struct.pack(">i", -4)  # PySpark's SpecialLengths.END_OF_STREAM, after a task's whole input
_warned_unverifiable = False


class StrataExactlyOnceError(StrataWriteError):
    """An attempt cannot tell which of its rows an earlier attempt committed, so it writes none."""


@dataclass(frozen=True)
class Progress:
    """A progress marker's metadata: which run and batch, and (a task's) rows and their digest."""

    run: str
    batch: int
    rows: int | None = None
    digest: int | None = None

    def metadata(self) -> str:
        data: dict[str, Any] = {"strata": 1, "run": self.run, "batch": self.batch}
        if self.rows is not None:
            data["rows"] = self.rows
        if self.digest is not None:
            data["digest"] = f"{self.digest:016x}"
        return json.dumps(data, separators=(",", ":"))

    @staticmethod
    def parse(metadata: str | None) -> Progress | None:
        """None for anything that is not a Strata marker (no marker, or another application's)."""
        if not metadata:
            return None
        try:
            data = json.loads(metadata)
            if not isinstance(data, dict) or data.get("strata") != 1:
                return None
            rows = data.get("rows")
            digest = data.get("digest")
            return Progress(str(data["run"]), int(data["batch"]), None if rows is None else int(rows),
                            None if digest is None else int(digest, 16))
        except (ValueError, KeyError, TypeError):
            return None


def _task_input_stream() -> Any | None:
    """The Python worker's input (``input_data_stream`` in ``pyspark.worker``, the caller of the writer)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            stream = frame.f_locals.get("input_data_stream")
            if stream is not None and hasattr(stream, "peek"):
                return stream
            frame = frame.f_back
        return None
    finally:
        del frame


def input_complete() -> bool:
    """Whether the task's input, just read to its end, ended because Spark sent all of it.

    After a complete input Spark sends END_OF_STREAM right away; when the task fails upstream it
    shuts the socket instead, so the worker sees the end of the file. The bytes are peeked, not
    read: PySpark reads the marker itself once the writer returns. Where the stream cannot be
    found (a PySpark that runs writers differently) the input is taken as complete, with a warning:
    a cut input is then committed, and the task's retry fails its layout check instead.
    """
    global _warned_unverifiable
    stream = _task_input_stream()
    if stream is None:
        if not _warned_unverifiable:
            _warned_unverifiable = True
            log.warning("strata sink: the task's input stream was not found: a task whose input is cut by an "
                        "upstream failure cannot be told from a complete one")
        return True
    ahead = bytes(stream.peek(len(_END_OF_STREAM))[:len(_END_OF_STREAM)])
    return bool(ahead) and _END_OF_STREAM.startswith(ahead)


def _consumer(options: SinkOptions, group: str) -> Any:
    """A consumer that never joins: group metadata for the producer, and OffsetFetch (require_stable)."""
    from confluent_kafka import Consumer

    conf: dict[str, Any] = {k: v for k, v in librdkafka_options(options.producer_config).items()
                            if k.startswith(_SHARED_PREFIXES)}
    conf.update({"bootstrap.servers": options.bootstrap, "group.id": group, "isolation.level": "read_committed",
                 "enable.auto.commit": False, "logger": _librdkafka_logger()})
    return Consumer(conf)


def _reason(e: BaseException) -> str:
    err = e.args[0] if e.args else e
    return err.str() if hasattr(err, "str") else str(err)


def read_marker(consumer: Any, topic: str, timeout_s: float, what: str) -> Progress | None:
    """The committed marker of the consumer's group; waits out one still pending in a transaction."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        tp = consumer.committed([TopicPartition(topic, MARKER_PARTITION)], timeout=timeout_s)[0]
    except KafkaException as e:
        raise StrataWriteError(f"cannot read the {what} (committed offset of {topic}[{MARKER_PARTITION}]): "
                               f"{_reason(e)}") from None
    if tp.error is not None:
        raise StrataWriteError(f"cannot read the {what} (committed offset of {topic}[{MARKER_PARTITION}]): "
                               f"{_reason(KafkaException(tp.error))}")
    return Progress.parse(tp.metadata) if tp.offset >= 0 else None


def commit_batch_marker(options: SinkOptions, run: str, batch: int, timeout_s: float = 30.0) -> None:
    """The driver's batch marker: every task of ``batch`` has committed (a plain offset commit)."""
    from confluent_kafka import KafkaException, TopicPartition

    assert options.transactional_id_prefix is not None and options.marker_topic is not None
    consumer = _consumer(options, options.transactional_id_prefix)
    try:
        consumer.commit(offsets=[TopicPartition(options.marker_topic, MARKER_PARTITION, batch + 1,
                                                metadata=Progress(run, batch).metadata())], asynchronous=False)
    except KafkaException as e:
        # Only an optimisation for a replay: each task's marker still says what it committed.
        log.warning("strata sink: batch %d: the batch marker of group %s could not be committed: %s", batch,
                    options.transactional_id_prefix, _reason(e))
    finally:
        consumer.close()


class TransactionalTask:
    """One attempt of one task: fence, read the markers, then write-and-commit, check, or skip."""

    def __init__(self, conf: dict[str, str], columns: Any, options: SinkOptions, *, partition: int, run: str,
                 batch: int, streaming: bool, micro_batch: bool) -> None:
        assert options.transactional_id_prefix is not None and options.marker_topic is not None
        self.options = options
        self.prefix = options.transactional_id_prefix
        self.marker_topic = options.marker_topic
        self.transactional_id = f"{self.prefix}-{partition}"
        self.partition = partition
        self.run_id = run
        self.batch = batch
        self.streaming = streaming  # a stream writer's task: the driver keeps a batch marker too
        self.micro_batch = micro_batch  # a stream writer's task, or a batch write inside foreachBatch
        self.writer = _TaskWriter({**conf, "transactional.id": self.transactional_id}, columns, options.topic,
                                  digest=True)
        self.timeout_s = self.writer.timeout_s
        self._in_transaction = False

    def _call(self, what: str, call: Callable[[float], T]) -> T:
        """A transactional API call, retried while librdkafka says the error is retriable (timeouts)."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return call(max(1.0, deadline - time.monotonic()))
            except KafkaException as e:
                err = e.args[0] if e.args else None
                retriable = err is not None and err.retriable() and not err.fatal()
                if retriable and time.monotonic() < deadline:
                    time.sleep(_RETRY_PAUSE_S)
                    continue
                fenced = " (fenced: a newer attempt of this task took over its transactional.id)" \
                    if err is not None and err.fatal() else ""
                raise StrataWriteError(f"{what} of transactional.id {self.transactional_id} failed{fenced}: "
                                       f"{_reason(e)}") from None

    def _message(self, started: float, skipped: str | None) -> StrataWriterCommitMessage:
        w = self.writer
        return StrataWriterCommitMessage(0 if skipped else w.records, 0 if skipped else w.bytes,
                                         time.monotonic() - started, transactional_id=self.transactional_id,
                                         run=self.run_id, batch=self.batch, skipped=skipped)

    def run(self, batches: Iterator[Any]) -> StrataWriterCommitMessage:
        started = time.monotonic()
        consumer = None
        try:
            producer = self.writer.open()
            self._call("init_transactions", producer.init_transactions)  # fences earlier attempts
            if self.streaming:
                done = self._batch_marker()
                if done is not None and done.run == self.run_id and done.batch >= self.batch:
                    for _ in batches:  # the input is read to its end, as a write would
                        pass
                    log.info("strata sink: batch %d was committed before (batch marker): task %d writes nothing",
                             self.batch, self.partition)
                    return self._message(started, "batch committed before")
            consumer = _consumer(self.options, self.transactional_id)
            mine = read_marker(consumer, self.marker_topic, self.timeout_s,
                               f"progress marker of group {self.transactional_id}")
            if mine is not None and mine.run == self.run_id and mine.batch >= self.batch:
                return self._check(batches, mine, started)
            self._call("begin_transaction", lambda _t: producer.begin_transaction())
            self._in_transaction = True
            for batch in batches:
                self.writer.write_batch(batch)
            self._check_input()
            self.writer.finish()
            progress = Progress(self.run_id, self.batch, self.writer.records, self.writer.digest)
            self._commit(producer, consumer, progress)
            return self._message(started, None)
        finally:
            self._close(consumer)

    def _batch_marker(self) -> Progress | None:
        consumer = _consumer(self.options, self.prefix)
        try:
            return read_marker(consumer, self.marker_topic, self.timeout_s, f"batch marker of group {self.prefix}")
        finally:
            consumer.close()

    def _check(self, batches: Iterator[Any], mine: Progress, started: float) -> StrataWriterCommitMessage:
        """An attempt of this task committed this batch (or a later one) already: write nothing, but
        make sure it committed these very rows."""
        if mine.batch > self.batch:
            for _ in batches:
                pass
            return self._message(started, f"task committed batch {mine.batch} since")
        for batch in batches:
            self.writer.write_batch(batch, produce=False)
        self._check_input()
        rows, digest = self.writer.records, self.writer.digest
        if (rows, digest) != (mine.rows, mine.digest):
            kind = f"micro-batch {self.batch} of streaming query {self.run_id}" if self.micro_batch else \
                f"batch write {self.run_id}"
            raise StrataExactlyOnceError(
                f"{kind}: task {self.partition} (transactional.id {self.transactional_id}) committed {mine.rows} "
                f"row(s) in an earlier attempt, but this attempt has {rows} row(s) with another digest: the batch "
                "reached the tasks partitioned differently (or the query is not deterministic), so rows may have "
                "moved between tasks that had and had not committed. Writing them could duplicate rows; nothing "
                "is written. Exactly-once across a replay needs each task to get the same rows again.")
        log.info("strata sink: task %d committed these %d row(s) before: nothing written", self.partition, rows)
        return self._message(started, "task committed before")

    def _check_input(self) -> None:
        if not input_complete():
            raise StrataWriteError(f"the input of task {self.partition} ended early after {self.writer.records} "
                                   "row(s): the task failed upstream (see the task's other errors); its transaction "
                                   "is aborted, not committed")

    def _commit(self, producer: Any, consumer: Any, progress: Progress) -> None:
        from confluent_kafka import TopicPartition

        marker = [TopicPartition(self.marker_topic, MARKER_PARTITION, self.batch + 1, metadata=progress.metadata())]
        self._call("send_offsets_to_transaction (the progress marker)",
                   lambda t: producer.send_offsets_to_transaction(marker, consumer.consumer_group_metadata(), t))
        self._call("commit_transaction", producer.commit_transaction)
        self._in_transaction = False

    def _close(self, consumer: Any) -> None:
        producer = self.writer.producer
        if producer is not None and self._in_transaction:
            try:  # not committed: abort now rather than hold read_committed readers until a retry fences it
                producer.abort_transaction(10)
            except Exception as e:  # fenced or fatal: the coordinator aborts it when it fences or times out
                log.info("strata sink: abort_transaction of %s: %s", self.transactional_id, _reason(e))
        self.writer.close()
        if consumer is not None:
            consumer.close()
