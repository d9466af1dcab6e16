"""``Writer``: buffers diskless produce requests into WAL objects, uploads them, commits them, answers.

The life of a request (reference §1.2, §1.6, §2):

1. ``submit()`` appends the request, whole, to the active file before it returns (``write()`` also
   waits for the answer). Rotation follows Inkless: rotate first if the file is non-empty and the
   request would overflow ``max_bytes``; rotate after adding if the file reached ``max_bytes``;
   otherwise the first write into an empty file arms a one-shot ``commit_interval_ms`` timer.
   Nothing written, nothing uploaded.
2. A rotated file becomes an object: uploaded with retries, several objects at once.
3. Commits run on one lane, in rotation order: object N+1 is committed only after object N's commit
   finished, whatever the order their uploads finished in. A producer's pipelined requests therefore
   reach the coordinator in the order they were sent, which idempotence needs.
4. Every partition of every request in the object is answered from the commit; if the upload or the
   commit failed, all of them get KAFKA_STORAGE_ERROR (the producer retries; its sequence numbers make
   the retry safe even when a commit was applied but its answer was lost).

Failed commits: an object whose commit was refused as malformed (nothing applied) is deleted; after any
other failure it is deleted only if the coordinator confirms its key is not committed, since the commit
may have been applied. What stays behind is for the orphan sweeper.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, TypeVar

from strata.common.clock import Clock, SystemClock
from strata.common.crashpoints import crash_point
from strata.diskless.coordinator.api import FileAlreadyCommittedError, InvalidCommitError
from strata.diskless.writer.active_file import ActiveFile, ClosedFile, PendingRequest
from strata.diskless.writer.config import WriterConfig
from strata.diskless.writer.model import (
    EMPTY_RESULT,
    CommitFn,
    SafeDeleteFn,
    WriteEntry,
    WriterClosedError,
    WriteResult,
)
from strata.diskless.writer.object_key import new_object_key
from strata.diskless.writer.stats import WriterStats
from strata.diskless.writer.timer import LoopTimer, Timer, TimerHandle
from strata.errors import ErrorCode
from strata.tiered.api import ObjectStore, RetriableRemoteStorageError

log = logging.getLogger("strata.diskless.writer")

T = TypeVar("T")

STORAGE_ERROR_MESSAGE = "Error committing data"  # what the producer sees (Inkless: "Error commiting data")


class _AfterFailure(Enum):
    """What to do with an object whose commit failed."""

    KEEP = "keep"                # it may be committed: leave it (the orphan sweeper decides later)
    DELETE = "delete"            # nothing was applied: delete it now
    DELETE_IF_SAFE = "if_safe"   # outcome unknown: delete only if the coordinator says the key is not committed


class Writer:
    """The produce side of diskless topics on one broker. Use from one event loop.

    ``store`` is called from worker threads (``executor``, or asyncio's default one); ``commit`` and
    ``is_safe_to_delete`` are awaited on the loop. ``clock`` names objects and times uploads; ``timer``
    drives the commit interval (the loop's timers unless a test passes a manual one).
    """

    def __init__(
        self,
        *,
        broker_id: int,
        store: ObjectStore,
        commit: CommitFn,
        is_safe_to_delete: SafeDeleteFn | None = None,
        config: WriterConfig | None = None,
        clock: Clock | None = None,
        timer: Timer | None = None,
        executor: concurrent.futures.Executor | None = None,
        on_uploaded: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.config = config or WriterConfig()
        self.stats = WriterStats()
        self._store = store
        self._commit = commit
        self._is_safe_to_delete = is_safe_to_delete
        self._clock: Clock = clock or SystemClock()
        self._timer: Timer = timer or LoopTimer()
        self._executor = executor
        self._on_uploaded = on_uploaded  # the broker's fetch cache takes the object it is about to serve
        self._next_file_id = 1
        self._active = ActiveFile(0)
        self._timer_handle: TimerHandle | None = None
        self._commit_tail: asyncio.Future[None] | None = None  # resolved when the last rotated object's commit ends
        self._tasks: set[asyncio.Task[None]] = set()
        self._upload_slots: asyncio.Semaphore | None = None  # made on first use, inside the loop
        self._closed = False

    # -- the produce path ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def active_file_size(self) -> int:
        """Bytes buffered for the next object."""
        return self._active.size

    @property
    def objects_in_flight(self) -> int:
        """Rotated objects not yet answered (uploading, waiting for their turn, or committing)."""
        return len(self._tasks)

    async def write(self, entries: Sequence[WriteEntry]) -> list[WriteResult]:
        """Write one produce request's diskless partitions; one result per entry, in order.

        Returns once the object holding them is committed (or failed): ``await submit(entries)``.
        """
        return await self.submit(entries)

    def submit(self, entries: Sequence[WriteEntry]) -> asyncio.Future[list[WriteResult]]:
        """Put one produce request's diskless partitions into the active file now, before returning; the
        future answers them (one result per entry, in order) once the object holding them is committed
        or failed.

        The buffering is synchronous, so requests submitted one after the other, with no ``await`` in
        between, join the active file in that order (a connection's pipelined produce requests share a
        commit cycle instead of waiting for each other's). Empty entries are answered NONE without being
        written. Raises :class:`WriterClosedError` after ``close()``, and
        :class:`~strata.errors.CorruptRecordError` for a control batch without a marker record (then
        nothing of the request is buffered). Cancelling the returned future (a client gone) does not stop
        the commit, nor answer anyone else's.
        """
        if self._closed:
            raise WriterClosedError("the diskless writer is closed")
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[WriteResult]] = loop.create_future()
        non_empty = [e for e in entries if e.batches]
        if not non_empty:
            answer.set_result([EMPTY_RESULT] * len(entries))
            return answer
        request = PendingRequest(non_empty, loop.create_future())  # may raise: then nothing is buffered
        self.stats.requests += 1
        self.stats.entries += len(non_empty)
        if not self._active.empty and self._active.size + request.size > self.config.max_bytes:
            self._rotate()
            self.stats.rotations_by_size += 1
        was_empty = self._active.empty
        self._active.add(request)
        if self._active.size >= self.config.max_bytes:
            self._rotate()
            self.stats.rotations_by_size += 1
        elif was_empty:
            file_id = self._active.file_id
            self._timer_handle = self._timer.call_later(self.config.commit_interval_ms,
                                                        lambda: self._on_interval(file_id))
        # The request's own future stays ours to answer (as a shield would keep it): the caller's may be
        # cancelled, the object still commits.
        mixed = len(non_empty) != len(entries)

        def deliver(done: asyncio.Future[list[WriteResult]]) -> None:
            if answer.done():
                return
            if done.cancelled():  # neither happens (requests are answered, never cancelled or failed): defensive
                answer.cancel()
                return
            error = done.exception()
            if error is not None:
                answer.set_exception(error)
                return
            answers = done.result()
            if mixed:
                it = iter(answers)
                answers = [next(it) if e.batches else EMPTY_RESULT for e in entries]
            answer.set_result(answers)

        request.future.add_done_callback(deliver)
        return answer

    async def flush(self) -> None:
        """Rotate the active file now and wait until every object rotated so far is answered."""
        if not self._active.empty:
            self._rotate()
            self.stats.rotations_by_flush += 1
        await self.drain()

    async def close(self) -> None:
        """Stop accepting writes, rotate the active file and wait (at most ``close_timeout_ms``) for the
        uploads and commits under way; what is still running then is cancelled and its requests are
        answered KAFKA_STORAGE_ERROR (an object uploaded but not committed is left to the sweeper)."""
        if self._closed:
            await self.drain()
            return
        self._closed = True
        if not self._active.empty:
            self._rotate()
            self.stats.rotations_by_flush += 1
        self._cancel_timer()
        tasks = set(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.config.close_timeout_ms / 1000)
        if pending:
            log.warning("diskless writer closing with %d object(s) not committed after %d ms; giving up on them",
                        len(pending), self.config.close_timeout_ms)
            for task in pending:
                task.cancel()
            await asyncio.wait(pending)

    async def drain(self) -> None:
        """Wait until every object rotated so far is answered and cleaned up (the active file is left
        alone; objects rotated meanwhile are not waited for, so steady traffic cannot hold this up)."""
        tasks = set(self._tasks)
        if tasks:
            await asyncio.wait(tasks)

    # -- rotation --------------------------------------------------------------------------------

    def _on_interval(self, file_id: int) -> None:
        self._timer_handle = None
        if self._active.file_id == file_id and not self._active.empty:
            self._rotate()
            self.stats.rotations_by_interval += 1

    def _cancel_timer(self) -> None:
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None

    def _rotate(self) -> None:
        """Close the active file into an object and start its upload; its commit queues behind the
        previous object's."""
        self._cancel_timer()
        key = new_object_key(self.config.object_key_prefix, self.broker_id, self._clock.milliseconds())
        closed = self._active.close(key, self.broker_id)
        self._active = ActiveFile(self._next_file_id)
        self._next_file_id += 1
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        previous, self._commit_tail = self._commit_tail, done
        task = loop.create_task(self._process(closed, previous, done), name=f"diskless-object-{closed.seq}")
        self._tasks.add(task)
        task.add_done_callback(self._object_done)

    def _object_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:  # a bug: its requests were answered anyway
            log.error("diskless object task %s failed", task.get_name(), exc_info=task.exception())

    # -- one object: upload, wait for its turn, commit, answer -------------------------------------

    async def _process(self, obj: ClosedFile, previous: asyncio.Future[None] | None,
                       done: asyncio.Future[None]) -> None:
        after_failure: _AfterFailure | None = None
        try:
            uploaded = await self._upload(obj)
            if uploaded:
                crash_point("diskless.after_upload")
            else:
                obj.fail(ErrorCode.KAFKA_STORAGE_ERROR, f"{STORAGE_ERROR_MESSAGE}: upload of {obj.object_key} failed")
            if previous is not None and not previous.done():
                await asyncio.wait([previous])  # asyncio.wait never cancels what it waits for
            if uploaded:
                after_failure = await self._commit_object(obj)
        finally:
            # Cancelled (close timed out) or crashed: nobody may be left waiting, and the lane moves on.
            obj.fail(ErrorCode.KAFKA_STORAGE_ERROR, f"{STORAGE_ERROR_MESSAGE}: writer stopped")
            if not done.done():
                done.set_result(None)
        if after_failure is _AfterFailure.DELETE:
            await self._delete(obj.object_key)
        elif after_failure is _AfterFailure.DELETE_IF_SAFE and await self._safe_to_delete(obj.object_key):
            await self._delete(obj.object_key)

    async def _upload(self, obj: ClosedFile) -> bool:
        if self._upload_slots is None:
            self._upload_slots = asyncio.Semaphore(self.config.max_uploads_in_flight)
        async with self._upload_slots:
            backoff_ms = self.config.upload_backoff_ms
            started = self._clock.monotonic_ms()
            for attempt in range(1, self.config.max_upload_attempts + 1):
                self.stats.put_requests += 1
                try:
                    await self._blocking(self._store.put_object, obj.object_key, obj.data)
                except RetriableRemoteStorageError as e:
                    if attempt == self.config.max_upload_attempts:
                        log.warning("upload of %s failed after %d attempts: %s", obj.object_key, attempt, e)
                        break
                    log.info("upload of %s failed (attempt %d), retrying in %d ms: %s",
                             obj.object_key, attempt, backoff_ms, e)
                    self.stats.upload_retries += 1
                    await asyncio.sleep(backoff_ms / 1000)
                    backoff_ms *= 2
                except Exception as e:  # a permanent store error: retrying will not help
                    log.warning("upload of %s failed: %s", obj.object_key, e, exc_info=True)
                    break
                else:
                    self.stats.objects_uploaded += 1
                    self.stats.bytes_uploaded += obj.size
                    self.stats.upload_latency_ms.append(self._clock.monotonic_ms() - started)
                    if self._on_uploaded is not None:
                        self._on_uploaded(obj.object_key, obj.data)
                    obj.data = b""  # the store has it; do not hold it while waiting for the commit lane
                    return True
        self.stats.upload_failures += 1
        return False

    async def _commit_object(self, obj: ClosedFile) -> _AfterFailure | None:
        """Commit and answer; returns what to do with the object if the commit failed."""
        started = self._clock.monotonic_ms()
        try:
            responses = await self._commit(obj.commit_request)
        except FileAlreadyCommittedError as e:
            # The key is committed (a retry below us applied it?): never delete a committed object.
            return self._commit_failed(obj, e, ErrorCode.KAFKA_STORAGE_ERROR, _AfterFailure.KEEP)
        except InvalidCommitError as e:
            # Refused as a whole, nothing applied; the same request would fail again, so no retry.
            return self._commit_failed(obj, e, ErrorCode.INVALID_REQUEST, _AfterFailure.DELETE)
        except Exception as e:
            return self._commit_failed(obj, e, ErrorCode.KAFKA_STORAGE_ERROR, _AfterFailure.DELETE_IF_SAFE)
        self.stats.commit_latency_ms.append(self._clock.monotonic_ms() - started)
        if len(responses) != len(obj.commit_request.batches):
            error = RuntimeError(f"{len(responses)} answers for {len(obj.commit_request.batches)} batches")
            return self._commit_failed(obj, error, ErrorCode.KAFKA_STORAGE_ERROR, _AfterFailure.KEEP)
        self.stats.commits += 1
        self.stats.batches_committed += sum(1 for r in responses if r.error is ErrorCode.NONE)
        crash_point("diskless.after_commit")
        obj.answer(responses)
        return None

    def _commit_failed(self, obj: ClosedFile, error: BaseException, code: ErrorCode,
                       after: _AfterFailure) -> _AfterFailure:
        log.warning("commit of %s (%d batches) failed: %s", obj.object_key, len(obj.commit_request.batches), error)
        self.stats.commit_failures += 1
        obj.fail(code, f"{STORAGE_ERROR_MESSAGE}: {error}" if code is ErrorCode.KAFKA_STORAGE_ERROR else str(error))
        return after

    async def _safe_to_delete(self, key: str) -> bool:
        if self._is_safe_to_delete is None:
            return False
        try:
            return await self._is_safe_to_delete(key)
        except Exception as e:  # unknown counts as unsafe (Inkless does the same)
            log.warning("cannot tell whether %s is committed, keeping it: %s", key, e)
            return False

    async def _delete(self, key: str) -> None:
        try:
            await self._blocking(self._store.delete_objects, [key])
        except Exception as e:  # best effort: the orphan sweeper will find it
            self.stats.delete_failures += 1
            log.warning("could not delete uncommitted object %s: %s", key, e)
        else:
            self.stats.objects_deleted += 1

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
