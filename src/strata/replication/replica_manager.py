"""``ReplicaManager``: the partitions this broker hosts, as leader or follower, and who waits on them.

Single node: every partition's only replica is this broker, created as leader at epoch 0 with the
ISR ``{node_id}``, so the high watermark follows the log end offset as soon as an append returns
(what Kafka does when the ISR has one member). Cluster mode: partitions are created and changed by
:meth:`become_leader_or_follower` with the state the controller wrote; followers are fed by the
replica fetchers, leaders learn their followers' progress from their fetches.

Who waits here (Kafka's purgatories, as futures on the event loop):

* fetches waiting for data (consumers for the high watermark, followers for the log end),
* acks=all produces waiting until the high watermark reaches their last offset (``DelayedProduce``).

ISR changes are proposed by the partition and written by an :class:`IsrWriter` (ZooKeeper, with
the state znode's version as the fence); the change is applied only once it is written.
All appends and state changes run on the event loop thread, the active segment's only writer.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from strata.common import Clock, TopicPartition
from strata.config import LogConfig
from strata.errors import ApiError, ErrorCode, KafkaError, KafkaStorageError
from strata.log import dir_move
from strata.log.manager import LogManager
from strata.log.partition_log import PartitionLog
from strata.log.producer_state import AppendOrigin
from strata.log.validator import LogAppendInfo
from strata.replication.partition import Partition, PartitionState, Transition

MOVE_COPY_ROUNDS = 3  # copy rolled segments, roll the active one if it grew, again; then swap
MOVE_SWAP_ACTIVE_BYTES = 4 * 1024 * 1024  # the swap (on the event loop) copies an active segment up to this size

log = logging.getLogger(__name__)

INITIAL_LEADER_EPOCH = 0


class TopicLike(Protocol):
    name: str
    topic_id: uuid.UUID
    partitions: int


class IsrWriter(Protocol):
    async def __call__(self, tp: TopicPartition, proposed: PartitionState) -> PartitionState | None:
        """Write ``proposed`` conditionally on its ``partition_epoch``; the written state (new partition
        epoch), or None when the write lost (the partition changed meanwhile: a newer state follows)."""


class ReplicaManager:
    def __init__(self, node_id: int, logs: LogManager, config_for: Callable[[str], LogConfig],
                 clock: Clock, partition_exists: Callable[[TopicPartition], bool] | None = None) -> None:
        self.node_id = node_id
        self.logs = logs
        self.config_for = config_for
        self.clock = clock
        # Kafka's metadataCache.contains: is the partition anywhere in the cluster (hosted here or not)?
        self.partition_exists: Callable[[TopicPartition], bool] = partition_exists or (lambda tp: False)
        self.partitions: dict[TopicPartition, Partition] = {}
        self.isr_writer: IsrWriter | None = None
        # Called with (tp, transition, partition) after a role change: fetchers, coordinators, tiering.
        self.on_transition: list[Callable[[TopicPartition, str, Partition], None]] = []
        self.on_isr_change: list[Callable[[str], None]] = []  # "shrink" / "expand": the metrics count them
        # Diskless partitions whose replicas consolidate from the coordinator (not by fetching from the leader):
        # they stay in the ISR. Set by the diskless service; a classic partition being switched is not in it yet.
        self.consolidating: set[TopicPartition] = set()
        # Whether a broker is registered (cluster mode: the metadata cache's view). A diskless partition's ISR
        # is expanded to its live replicas only: re-adding a dead one the controller removed would write
        # ZooKeeper at every ISR check while it is down.
        self.broker_alive: Callable[[int], bool] = lambda _broker: True
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._isr_tasks: set[asyncio.Task[None]] = set()

    # -- topology -----------------------------------------------------------------------------

    def partition(self, tp: TopicPartition) -> Partition:
        """A hosted partition, leader or follower; Kafka's ``getPartitionOrException`` when there is none.

        A partition of the cluster this broker holds no replica of is NOT_LEADER_OR_FOLLOWER, which sends a
        client back to its metadata for the partition's current leader (a request that reached a broker after
        a reassignment moved the replica away, or a stale or wrong leader); UNKNOWN_TOPIC_OR_PARTITION only
        when the partition exists nowhere, which a client may treat as final.
        """
        part = self.partitions.get(tp)
        if part is None:
            if self.partition_exists(tp):
                raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"Broker {self.node_id} holds no replica of {tp}")
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           f"This server does not host this topic-partition: {tp}")
        return part

    def leader_partition(self, tp: TopicPartition) -> Partition:
        part = self.partition(tp)
        if not part.is_leader:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"Broker {self.node_id} is not the leader of {tp} (leader {part.leader})")
        return part

    def leader_epoch(self, tp: TopicPartition) -> int:
        part = self.partitions.get(tp)
        return part.leader_epoch if part is not None else -1

    def check_leader_epoch(self, tp: TopicPartition, requested: int) -> int:
        """Kafka's fencing of a client's ``current_leader_epoch`` (-1: not checked); returns ours."""
        current = self.leader_epoch(tp)
        if requested > current:
            raise ApiError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                           f"{tp}: requested leader epoch {requested} is newer than {current}")
        if 0 <= requested < current:
            raise ApiError(ErrorCode.FENCED_LEADER_EPOCH, f"{tp}: leader epoch {requested} is fenced by {current}")
        return current

    def leader_epoch_of(self, topic: str, partition: int) -> int:
        return self.leader_epoch(TopicPartition(topic, partition))

    def get_log(self, tp: TopicPartition) -> PartitionLog:
        """The log of a partition this broker leads (what clients may read and write)."""
        return self.leader_partition(tp).log

    def local_log(self, tp: TopicPartition) -> PartitionLog | None:
        """The log of a hosted partition, leader or follower."""
        part = self.partitions.get(tp)
        return part.log if part is not None else None

    def _host(self, tp: TopicPartition, topic_id: uuid.UUID) -> Partition:
        part = self.partitions.get(tp)
        if part is None:
            plog = self.logs.get_or_create_log(tp, topic_id, self.config_for(tp.topic))
            part = Partition(tp, topic_id, self.node_id, plog)
            self.partitions[tp] = part
        return part

    def open_topic(self, info: TopicLike) -> None:
        """Single node: create (or load) every partition's log and lead it at epoch 0."""
        for p in range(info.partitions):
            self._lead_alone(TopicPartition(info.name, p), info.topic_id)

    def _lead_alone(self, tp: TopicPartition, topic_id: uuid.UUID) -> None:
        part = self._host(tp, topic_id)
        if part.leader_epoch < 0:
            # the log's latest epoch: a restored topic's log leads above the epochs of the bucket's records
            epoch = max(INITIAL_LEADER_EPOCH, part.log.leader_epoch_cache.latest_epoch or 0)
            state = PartitionState(self.node_id, epoch, (self.node_id,), (self.node_id,))
            part.apply(state, self.clock.milliseconds())
        # This node is the only replica: everything in the log was acknowledged, so the HW is the
        # log end (the checkpointed HW lags after a kill -9).
        part.log.update_high_watermark(part.log.log_end_offset)

    def add_partitions(self, info: TopicLike, first_new: int) -> None:
        """Single node CreatePartitions: the logs of partitions ``first_new .. info.partitions - 1``.

        The registry already holds the new count, so a crash before every log exists is repaired
        at the next start (``Broker.start`` opens every partition the registry lists).
        """
        for p in range(first_new, info.partitions):
            self._lead_alone(TopicPartition(info.name, p), info.topic_id)

    def close_topic(self, info: TopicLike) -> None:
        """Delete the topic's logs (renamed at once, removed later; one checkpoint rewrite for all)."""
        self.remove_partitions([TopicPartition(info.name, p) for p in range(info.partitions)], delete=True)

    def remove_partitions(self, tps: list[TopicPartition], *, delete: bool) -> None:
        """Stop hosting ``tps`` (topic deletion, a replica moved away); their logs deleted when ``delete``."""
        for tp in tps:
            part = self.partitions.pop(tp, None)
            if part is not None:
                part.leader = -1
                for fn in self.on_transition:
                    fn(tp, Transition.STOPPED, part)
        try:
            if delete:
                self.logs.delete_logs(tps)
        finally:
            for tp in tps:
                self._wake(tp)

    def apply_config(self, name: str) -> None:
        config = self.config_for(name)
        for tp, plog in self.logs.logs.items():
            if tp.topic == name:
                plog.update_config(config)

    # -- cluster state --------------------------------------------------------------------------

    def become_leader_or_follower(self, tp: TopicPartition, topic_id: uuid.UUID, state: PartitionState) -> str:
        """Apply the controller's decision for a partition this broker is a replica of."""
        part = self._host(tp, topic_id)
        transition = part.apply(state, self.clock.milliseconds())
        if transition != Transition.NONE:
            for fn in self.on_transition:
                fn(tp, transition, part)
            if part.is_leader and part.maybe_increment_high_watermark():
                pass
            self._wake(tp)  # waiting produces re-check (not leader any more, or the ISR changed)
        return transition

    def fence_leaderships(self) -> None:
        """The ZooKeeper session expired (or is presumed so: no ZooKeeper for a session timeout): other
        leaders may have been elected meanwhile. Refuse appends on every partition led here until a state
        read from the new session confirms it."""
        for part in self.partitions.values():
            if part.is_leader:
                part.fenced = True
        self.wake_all()

    def fence_partitions(self, tps: set[TopicPartition]) -> None:
        """Peers saw these leaderships move on (a higher leader epoch) while ZooKeeper was away: refuse appends."""
        for tp in tps:
            part = self.partitions.get(tp)
            if part is not None and part.is_leader:
                part.fenced = True
        self.wake_all()

    def unfence_leaderships(self, keep: set[TopicPartition] | frozenset[TopicPartition] = frozenset()) -> None:
        """The session survived a presumed expiry: the registration never went, so the leaderships stand, except
        ``keep`` (peers saw those move on: they stay fenced until the watched state makes this broker follow)."""
        for tp, part in self.partitions.items():
            if tp not in keep:
                part.fenced = False
        self.wake_all()

    def led_partitions(self) -> dict[TopicPartition, int]:
        """The partitions led here, with their leader epochs (what a leadership probe asks peers about)."""
        return {tp: part.leader_epoch for tp, part in self.partitions.items() if part.is_leader}

    def update_assignment(self, tp: TopicPartition, replicas: tuple[int, ...]) -> None:
        part = self.partitions.get(tp)
        if part is not None and part.update_replicas(replicas, self.clock.milliseconds()):
            self._wake(tp)

    # -- produce ------------------------------------------------------------------------------

    def append(self, tp: TopicPartition, records: bytes, origin: AppendOrigin = AppendOrigin.CLIENT,
               required_acks: int = 1) -> LogAppendInfo:
        """Append as leader. acks=all is refused before writing while the ISR is below
        ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS), as Kafka refuses it."""
        part = self.leader_partition(tp)
        if part.fenced:  # acks=1 too: a write the new leader never sees is lost; send the client there
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"Broker {self.node_id} lost its ZooKeeper session: its leadership of {tp} is not confirmed")
        if part.log.config.remote_read_replica:
            raise ApiError(ErrorCode.POLICY_VIOLATION,
                           f"{tp.topic} is a read replica (remote.read.replica=true): it mirrors the topic another "
                           "cluster writes to the remote store; produce to that cluster")
        if part.log.config.remote_unmount and origin is AppendOrigin.CLIENT:  # (transaction markers still land)
            raise ApiError(ErrorCode.POLICY_VIOLATION,
                           f"{tp.topic} is being unmounted into the remote store (remote.unmount=true): it takes no "
                           "more records")
        if part.log.remote_restore_pending:  # (retriable: the client waits and sends again)
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"{tp} is being restored from remote storage (remote.recovery); its leader accepts "
                           "records once its log starts after the restored ones")
        if required_acks == -1:
            min_isr = part.log.config.min_insync_replicas
            if len(part.isr) < min_isr:
                raise ApiError(ErrorCode.NOT_ENOUGH_REPLICAS,
                               f"The size of the current ISR {sorted(part.isr)} is insufficient to satisfy the "
                               f"min.isr requirement of {min_isr} for partition {tp}")
        info = part.log.append_as_leader(records, part.leader_epoch, origin)
        if not info.duplicate:
            part.maybe_increment_high_watermark()
            self._wake(tp)
        return info

    def replicated(self, tp: TopicPartition, required_offset: int) -> bool:
        """Is an acks=all wait for ``required_offset`` over already, successfully (answered without waiting)?
        An outcome with an error is not: the wait (:meth:`wait_for_replication`) reports it."""
        part = self.partitions.get(tp)
        if part is None:
            return False
        done, code = part.check_enough_replicas_reach_offset(required_offset, part.log.config.min_insync_replicas)
        return done and code == ErrorCode.NONE

    async def wait_for_replication(self, tp: TopicPartition, required_offset: int, timeout_s: float) -> int:
        """Kafka's DelayedProduce for one partition: wait until the HW reaches ``required_offset``.

        Returns NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank below min.insync.replicas),
        NOT_LEADER_OR_FOLLOWER (leadership moved: the write may be lost) or REQUEST_TIMED_OUT.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            part = self.partitions.get(tp)
            if part is None:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            done, code = part.check_enough_replicas_reach_offset(required_offset,
                                                                 part.log.config.min_insync_replicas)
            if done:
                return code
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            await self.wait_for_data([tp], remaining)

    # -- leader: follower fetches and the ISR ----------------------------------------------------

    def update_follower_fetch(self, tp: TopicPartition, replica_id: int, fetch_offset: int,
                              log_start_offset: int) -> None:
        part = self.partitions.get(tp)
        if part is None or not part.is_leader:
            return
        now = self.clock.milliseconds()
        if part.update_follower_fetch(replica_id, fetch_offset, log_start_offset, now):
            self._wake(tp)  # acks=all produces and consumers waiting for the HW
        joining = part.isr_to_expand(replica_id)
        if joining is not None:
            self._propose_isr(part, part.isr | {joining}, "expand")

    def maybe_shrink_isr(self, max_lag_ms: int) -> None:
        """Kafka's periodic ``maybeShrinkIsr``: drop followers that have not caught up in ``max_lag_ms``."""
        now = self.clock.milliseconds()
        for tp, part in list(self.partitions.items()):
            if not part.is_leader or part.isr_change_in_flight:
                continue
            if tp in self.consolidating or (part.log.config.diskless_enable and part.log.log_end_offset == 0):
                # Diskless: replicas consolidate from the coordinator and never fetch from the leader, so
                # they are never out of sync; every replica stays eligible as leader (a shrunk ISR would
                # leave the partition offline when its leader dies). A new diskless partition counts from
                # its creation; a classic one being switched is shrunk as usual until its seal.
                full = part.isr | frozenset(r for r in part.replicas if r == self.node_id or self.broker_alive(r))
                if part.isr != full:
                    self._propose_isr(part, full, "expand")
                continue
            lagging = part.out_of_sync_replicas(now, max_lag_ms)
            if lagging:
                log.info("%s: shrinking ISR from %s to %s (not caught up for %d ms)", part.tp,
                         sorted(part.isr), sorted(part.isr - lagging), max_lag_ms)
                self._propose_isr(part, part.isr - lagging, "shrink")

    def _propose_isr(self, part: Partition, isr: frozenset[int], kind: str) -> None:
        writer = self.isr_writer
        if writer is None:
            return
        part.isr_change_in_flight = True
        proposed = replace(part.state(), isr=tuple(r for r in part.replicas if r in isr))
        task = asyncio.get_running_loop().create_task(self._write_isr(writer, part, proposed, kind))
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    async def _write_isr(self, writer: IsrWriter, part: Partition, proposed: PartitionState, kind: str) -> None:
        try:
            written = await writer(part.tp, proposed)
        except Exception as e:  # ZooKeeper unreachable: retried by the next fetch or shrink round
            log.warning("%s: ISR %s to %s not written: %s", part.tp, kind, list(proposed.isr), e)
            written = None
        if self.partitions.get(part.tp) is not part:
            return
        part.isr_change_in_flight = False
        if written is None:
            return  # a newer state (new leader epoch or another ISR) arrives through the watch
        for fn in self.on_isr_change:  # counted once per written change (the watch may apply it first)
            fn(kind)
        if part.apply(written, self.clock.milliseconds()) != Transition.NONE:
            log.info("%s: ISR is now %s (partition epoch %d)", part.tp, list(written.isr), written.partition_epoch)
        part.maybe_increment_high_watermark()
        self._wake(part.tp)

    # -- waiting ------------------------------------------------------------------------------

    def notify(self, tp: TopicPartition) -> None:
        """Something about ``tp`` changed (a follower append, a new HW): wake whoever waits on it."""
        self._wake(tp)

    def _wake(self, tp: TopicPartition) -> None:
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        """Return when any of ``tps`` changes (append, HW, role), or after ``timeout_s``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        tps = list(tps)
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            # asyncio.wait, not wait_for: on 3.11 wait_for swallows a cancel that races with the
            # future completing, which would keep a connection alive through shutdown.
            await asyncio.wait({fut}, timeout=timeout_s)
        finally:
            fut.cancel()
            for tp in tps:
                waiting = self._waiters.get(tp)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[tp]

    def wake_all(self) -> None:
        for tp in list(self._waiters):
            self._wake(tp)

    # -- moving a replica between log dirs (JBOD) --------------------------------------------------

    def start_log_dir_move(self, tp: TopicPartition, target_dir: Path) -> None:
        """AlterReplicaLogDirs: move ``tp``'s log to ``target_dir`` in the background (see
        :mod:`strata.log.dir_move`); the partition keeps serving meanwhile, and its tiering continues from
        the new directory without uploading again (the remote metadata and the highest uploaded offset carry over)."""
        task = asyncio.get_running_loop().create_task(self._move_log_dir(tp, target_dir), name=f"move-{tp}")
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    async def _move_log_dir(self, tp: TopicPartition, target_dir: Path) -> None:
        logs = self.logs
        try:
            future = logs.begin_move(tp, target_dir)
        except KafkaError as e:
            log.warning("cannot move %s to %s: %s", tp, target_dir, e)
            return
        loop = asyncio.get_running_loop()
        try:
            for _ in range(MOVE_COPY_ROUNDS):
                plog = logs.get_log(tp)
                if plog is None:
                    raise KafkaStorageError(f"{tp} was deleted while moving")
                active = plog.segments[-1]
                await loop.run_in_executor(None, dir_move.copy_rolled, plog.dir, future,
                                           f"{active.base_offset:020d}")
                if logs.get_log(tp) is not plog:
                    raise KafkaStorageError(f"{tp} was replaced while moving")
                if plog.segments[-1].size <= MOVE_SWAP_ACTIVE_BYTES:
                    break
                plog.roll()  # so the swap, which blocks the partition, copies a small active segment
            plog = logs.complete_move(tp)
        except (OSError, KafkaError) as e:
            logs.abort_move(tp)
            log.error("moving %s to %s failed (it stays where it was): %s", tp, target_dir, e)
            return
        part = self.partitions.get(tp)
        if part is not None:
            part.log = plog
        self._wake(tp)

    async def close(self) -> None:
        for task in list(self._isr_tasks):
            task.cancel()
        await asyncio.gather(*self._isr_tasks, return_exceptions=True)
