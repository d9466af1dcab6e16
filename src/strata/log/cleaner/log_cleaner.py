"""Kafka's ``LogCleaner``: the cleaner threads, their throttle and their metrics.

Each of ``log.cleaner.threads`` threads loops: ask the manager (on the log's thread) for the filthiest
compacted log, clean it (:class:`Cleaner`: reading rolled segments and writing the ``.cleaned`` one
off the event loop; the swap on it), record the clean offset, and sleep ``log.cleaner.backoff.ms``
when nothing needs cleaning. A log whose cleaning raises is marked uncleanable (Kafka's
``uncleanable-partitions-count``) and skipped until the broker restarts; the others go on.

The threads share the interpreter with the event loop: cleaning is per-record Python work (the only
place the broker decodes records of user topics), so ``log.cleaner.io.max.bytes.per.second`` is the
knob that bounds what it takes from request handling.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from strata.common import Clock
from strata.common.metrics import Registry
from strata.config.cleaner_config import CleanerConfig
from strata.log.cleaner.cleaner import Cleaner, CleanerStats, LogToClean, Throttler
from strata.log.cleaner.manager import LogCleanerManager
from strata.log.cleaner.offset_map import OffsetMap
from strata.log.errors import CleaningAbortedError
from strata.log.partition_log import PartitionLog

log = logging.getLogger("strata.log.cleaner")

T = TypeVar("T")
Submit = Callable[[Callable[[], None]], None]  # schedule a callable on the log's thread (thread-safe)


class LogCleaner:
    def __init__(self, config: CleanerConfig, manager: LogCleanerManager, clock: Clock, submit: Submit,
                 registry: Registry | None = None) -> None:
        """``submit(fn)``: run ``fn`` on the log's thread soon (``loop.call_soon_threadsafe``)."""
        self.config = config
        self.manager = manager
        self._clock = clock
        self._submit = submit
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._throttler = Throttler(config.max_io_bytes_per_second)
        self.last_stats: dict[int, CleanerStats] = {}
        self.dead_threads = 0
        self.cleanings = 0
        self._done = threading.Condition()
        if registry is not None:
            self._register_metrics(registry)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if not self.config.enable or self.config.num_threads <= 0:
            log.info("log cleaner disabled: compacted topics are not compacted")
            return
        per_thread = self.config.dedupe_buffer_size // self.config.num_threads
        stop = self._stop  # each generation of threads keeps its own event (reconfigure replaces it)
        for i in range(self.config.num_threads):
            offset_map = OffsetMap(per_thread, self.config.dedupe_buffer_load_factor)
            cleaner = Cleaner(i, offset_map, self._throttler, self._clock,
                              lambda fn: self._call_on_log_thread(fn, stop), lambda p: self._check_done(p, stop))
            t = threading.Thread(target=self._run, args=(cleaner, stop), name=f"strata-log-cleaner-{i}",
                                 daemon=True)
            self._threads.append(t)
            t.start()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop the threads; a cleaning in progress aborts (its ``.cleaned`` files are removed)."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads.clear()

    def reconfigure(self, config: CleanerConfig) -> None:
        """Dynamic ``log.cleaner.*`` (Kafka's ``LogCleaner.reconfigure``): the rate and back-off apply at
        once; a new thread count, dedupe buffer or enable flag restarts the threads (a cleaning in progress
        is aborted and done again). The restart runs on a thread of its own: the threads being stopped may
        be waiting for the caller's loop."""
        old, self.config = self.config, config
        self._throttler.rate = config.max_io_bytes_per_second
        if (old.enable, old.num_threads, old.dedupe_buffer_size, old.dedupe_buffer_load_factor) == \
                (config.enable, config.num_threads, config.dedupe_buffer_size, config.dedupe_buffer_load_factor):
            return

        def restart() -> None:
            self.shutdown()
            self._stop = threading.Event()
            self.start()
            log.info("log cleaner restarted with %d threads, %d bytes of dedupe buffer", config.num_threads,
                     config.dedupe_buffer_size)

        threading.Thread(target=restart, name="strata-log-cleaner-reconfigure", daemon=True).start()

    def wait_for_cleanings(self, count: int, timeout_s: float) -> bool:
        """Tests and tools: wait until ``count`` cleanings have completed since start."""
        with self._done:
            return self._done.wait_for(lambda: self.cleanings >= count, timeout_s)

    # -- the thread ------------------------------------------------------------------------------

    def _run(self, cleaner: Cleaner, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                cleaned = self._clean_filthiest_log(cleaner, stop)
                if not cleaned:
                    stop.wait(self.config.backoff_ms / 1000)
        except CleaningAbortedError:
            pass  # shutting down
        except Exception:
            self.dead_threads += 1
            log.exception("log cleaner thread %d died", cleaner.id)

    def _clean_filthiest_log(self, cleaner: Cleaner, stop: threading.Event) -> bool:
        ltc = self._call_on_log_thread(lambda: self.manager.grab_filthiest_compacted_log(self._clock.milliseconds()),
                                       stop)
        if ltc is None:
            return False
        tp = ltc.log.topic_partition
        end_offset: int | None = None
        stats: CleanerStats | None = None
        try:
            end_offset, stats = cleaner.clean(ltc)
            self.last_stats[cleaner.id] = stats
            self._log_stats(cleaner.id, ltc, end_offset, stats)
        except CleaningAbortedError as e:
            if stop.is_set():
                raise
            log.info("%s: cleaning aborted: %s", tp, e)
        except Exception as e:
            if self._log_changed(ltc, stop):
                # Truncated, deleted or moved under the cleaning (a segment file renamed away between two
                # abort checks): the log is as it was, the next cleaning starts over. Kafka's truncation
                # waits for the cleaner instead; here nothing waits, so the error is an abort.
                log.info("%s: cleaning aborted: the log changed meanwhile (%s: %s)", tp, type(e).__name__, e)
            else:
                log.warning("%s: cleaning failed, the partition is marked uncleanable until the broker restarts: "
                            "%s: %s", tp, type(e).__name__, e, exc_info=True)
                self.manager.mark_uncleanable(tp)
        finally:
            self.manager.done_cleaning(tp, end_offset, stats.delete_horizon_ms if stats is not None else None)
            with self._done:
                self.cleanings += 1
                self._done.notify_all()
        return True

    def _log_changed(self, ltc: LogToClean, stop: threading.Event) -> bool:
        """Whether a cleaning that raised was aborted, or its log changed under it since it was chosen."""
        tp = ltc.log.topic_partition
        try:
            self.manager.check_cleaning_aborted(tp)
        except CleaningAbortedError:
            return True

        def changed() -> bool:
            if self.manager.log_of(tp) is not ltc.log:
                return True
            old = [s for s in ltc.segments[:-1] if s.base_offset < ltc.first_uncleanable_offset]
            try:
                ltc.log.check_segments_unchanged(old, [s.size for s in old])
            except CleaningAbortedError:
                return True
            return not all(s.log.path.exists() for s in old)

        return self._call_on_log_thread(changed, stop)

    def _call_on_log_thread(self, fn: Callable[[], T], stop: threading.Event) -> T:
        """Run ``fn`` on the log's thread and wait for it; shutting down aborts the wait."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(e)

        self._submit(run)
        while True:
            try:
                return future.result(timeout=0.2)
            except concurrent.futures.TimeoutError:
                if stop.is_set() and future.cancel():
                    raise CleaningAbortedError("the broker is shutting down") from None

    def _check_done(self, plog: PartitionLog, stop: threading.Event) -> None:
        if stop.is_set():
            raise CleaningAbortedError("the broker is shutting down")
        self.manager.check_cleaning_aborted(plog.topic_partition)

    @staticmethod
    def _log_stats(cleaner_id: int, ltc: LogToClean, end_offset: int, stats: CleanerStats) -> None:
        mb = 1024 * 1024
        read, written = stats.bytes_read, stats.bytes_written
        log.info("cleaner %d cleaned %s (dirty section [%d, %d)): %.1f MB in %.1f s (%.1f MB/s, map %.1f s, "
                 "buffer %.0f%%), %d -> %d messages, %.1f%% smaller", cleaner_id, ltc.log.topic_partition,
                 ltc.first_dirty_offset, end_offset, read / mb, stats.elapsed_s, read / mb / stats.elapsed_s,
                 stats.map_elapsed_s, 100 * stats.buffer_utilization, stats.messages_read,
                 stats.messages_written, 100 * (1 - written / read) if read else 0.0)
        if stats.invalid_messages_read:
            log.warning("cleaner %d found %d records without a key in %s: removed", cleaner_id,
                        stats.invalid_messages_read, ltc.log.topic_partition)

    # -- metrics (Kafka's kafka.log:type=LogCleaner / LogCleanerManager) ----------------------------

    def _register_metrics(self, registry: Registry) -> None:
        def stats() -> list[CleanerStats]:
            return list(self.last_stats.values())

        registry.gauge("kafka_log_LogCleaner_max_buffer_utilization_percent",
                       "Largest dedupe map use of the last cleanings",
                       fn=lambda: max((100 * s.buffer_utilization for s in stats()), default=0.0))
        registry.gauge("kafka_log_LogCleaner_cleaner_recopy_percent",
                       "Share of the bytes read that the last cleanings wrote back",
                       fn=lambda: 100 * sum(s.bytes_written for s in stats())
                       / max(1, sum(s.bytes_read for s in stats())))
        registry.gauge("kafka_log_LogCleaner_max_clean_time_secs", "Longest of the last cleanings",
                       fn=lambda: max((s.elapsed_s for s in stats()), default=0.0))
        registry.gauge("kafka_log_LogCleaner_max_compaction_delay_secs",
                       "How far past max.compaction.lag.ms the most delayed dirty record is",
                       fn=lambda: self.manager.max_compaction_delay_ms / 1000)
        registry.gauge("kafka_log_LogCleaner_DeadThreadCount", "Cleaner threads that died",
                       fn=lambda: self.dead_threads)
        registry.gauge("kafka_log_LogCleanerManager_max_dirty_percent",
                       "Largest share of cleanable bytes among the compacted logs",
                       fn=lambda: 100 * self.manager.dirtiest_ratio)
        registry.gauge("kafka_log_LogCleanerManager_time_since_last_run_ms",
                       "Since the cleaner last looked for a log to clean",
                       fn=lambda: max(0, self._clock.milliseconds() - self.manager.time_of_last_run_ms)
                       if self.manager.time_of_last_run_ms else 0)
        registry.gauge("kafka_log_LogCleanerManager_uncleanable_partitions_count",
                       "Partitions whose cleaning failed (skipped until restart)",
                       fn=lambda: len(self.manager.uncleanable()))
