"""The classic group protocol's state machine and the committed offsets (Kafka's group coordinator shard).

Everything here runs on one thread (the broker's event loop), so there are no locks: a request
handler calls in, the state changes, and parked JoinGroup/SyncGroup requests are answered through
their callbacks. Time enters only through the :class:`Timer` (session timeouts per member, the
rebalance timeout of the join phase, the initial rebalance delay, the sync deadline) and a clock,
which is what lets the unit tests drive the machine deterministically.

Persistence goes through ``writer(group_id, [(key, value), ...])``, which appends one batch to the
group's ``__consumer_offsets`` partition, returns the offset it was appended at, and raises a
:class:`KafkaError` if it could not. The state machine follows Kafka's rule: what must survive a
restart is written before it is acknowledged (a SyncGroup from the leader answers nobody until the
assignment is in the log, an OffsetCommit is answered after its records are), and a failed write is
answered with the error Kafka maps it to.

Transactional offset commits (KIP-98 TxnOffsetCommit; KIP-447 adds the member checks) are written
by ``writer(group_id, records, (producer_id, producer_epoch))`` as one transactional batch of that
producer. Until the transaction's COMMIT or ABORT marker is in the partition they are *pending*:
kept per group and producer, invisible to OffsetFetch (which answers UNSTABLE_OFFSET_COMMIT for them
when asked for stable offsets). A commit makes them the committed offsets unless a plain commit was
appended after them: the log order decides, which is why every offset remembers the offset of the
batch that holds it (Kafka's ``CommitRecordMetadataAndOffset``). Replay follows the same rules, fed
batch by batch (a transactional batch's records are pending, a marker completes them).

The decisions mirror Apache Kafka's ``GroupMetadataManager`` (classic groups) and
``OffsetMetadataManager`` closely, including its error codes, so clients see the same behaviour.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from strata.common import Clock
from strata.config.group_config import ConsumerGroupConfig, GroupSettings
from strata.coordinator.group import modern_records
from strata.coordinator.group.classic import (
    CONSUMER_PROTOCOL_TYPE,
    GROUP_SUBSCRIBED_TO_TOPIC,
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupError,
    GroupState,
    Member,
    Protocols,
    Response,
    Waiter,
)
from strata.coordinator.group.consumer import ConsumerGroup
from strata.coordinator.group.consumer_manager import ConsumerGroupManager, TopicsView
from strata.coordinator.group.records import (
    OFFSET_COMMIT_VALUE_VERSION,
    OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    decode_subscription,
    encode_assignment,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from strata.coordinator.group.share_manager import Initializer, ShareGroupManager, ShareGroupSettings
from strata.coordinator.group.timer import Timer
from strata.errors import CorruptRecordError, ErrorCode, KafkaError

log = logging.getLogger("strata.coordinator.group")

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE,
                                              GroupState.COMPLETING_REBALANCE, GroupState.STABLE, GroupState.DEAD)
GROUP_TYPE_CLASSIC = "classic"
REQUIRES_KNOWN_MEMBER_ID_VERSION = 4  # JoinGroup v4+: an unknown member first gets MEMBER_ID_REQUIRED
SKIP_ASSIGNMENT_VERSION = 9
GROUP_ID_NOT_FOUND_COMMIT_VERSION = 9  # OffsetCommit v9+ says GROUP_ID_NOT_FOUND instead of ILLEGAL_GENERATION

NO_PRODUCER_ID = -1  # RecordBatch.NO_PRODUCER_ID: a record that is not part of a transaction
NO_APPEND_OFFSET = -1  # the writer did not say where the batch went (test fakes)

Record = tuple[bytes, bytes | None]
CONSUMER_GROUP_KEYS = (modern_records.ConsumerGroupMetadataKey, modern_records.ConsumerGroupPartitionMetadataKey,
                       modern_records.ConsumerGroupMemberMetadataKey,
                       modern_records.ConsumerGroupTargetAssignmentMetadataKey,
                       modern_records.ConsumerGroupTargetAssignmentMemberKey,
                       modern_records.ConsumerGroupCurrentMemberAssignmentKey,
                       modern_records.ConsumerGroupRegularExpressionKey)
TxnProducer = tuple[int, int]  # (producer id, producer epoch) of a transactional write


class Writer(Protocol):
    """Appends ``records`` as one batch to ``group_id``'s partition and returns its base offset.

    ``producer`` makes the batch transactional for that producer; it is passed only when set, so a
    writer that never sees transactional commits may take two arguments.
    """

    def __call__(self, group_id: str, records: list[Record], producer: TxnProducer | None = None, /
                 ) -> int | None: ...


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    initial_rebalance_delay_ms: int = 3000
    new_member_join_timeout_ms: int = 5 * 60 * 1000
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    offset_metadata_max_bytes: int = 4096


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1
    # Where the batch holding the record was appended (Kafka's appendedBatchOffset): it decides whether a
    # transactional commit completing later replaces this offset. Not part of the value: two commits of
    # the same offset are the same commit.
    append_offset: int = field(default=NO_APPEND_OFFSET, compare=False)

    def older_than(self, other: OffsetAndMetadata) -> bool:
        return self.append_offset < other.append_offset


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    api_version: int
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes]


@dataclass(frozen=True, slots=True)
class CommitRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    retention_ms: int
    api_version: int
    partitions: list[tuple[str, int, int, int, str | None]]  # topic, partition, offset, leader epoch, metadata


@dataclass(frozen=True, slots=True)
class TxnCommitRequest:
    """A TxnOffsetCommit; before v3 (KIP-447) it carries no member, so generation -1 and member ""."""

    group_id: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    member_id: str
    group_instance_id: str | None
    generation_id: int
    partitions: list[tuple[str, int, int, int, str | None]]  # topic, partition, offset, leader epoch, metadata


def join_error(member_id: str, code: int) -> Response:
    return {"error_code": code, "generation_id": -1, "protocol_type": None, "protocol_name": None, "leader": "",
            "skip_assignment": False, "member_id": member_id, "members": []}


def sync_response(code: int, protocol_type: str | None = None, protocol_name: str | None = None,
                  assignment: bytes = b"") -> Response:
    return {"error_code": code, "protocol_type": protocol_type, "protocol_name": protocol_name,
            "assignment": assignment}


def group_append_error(e: KafkaError) -> int:
    """Kafka's ``appendGroupMetadataErrorToResponseError``: storage errors as coordinator errors."""
    code = int(e.error_code)
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


def offset_append_error(e: KafkaError) -> int:
    """As :func:`group_append_error`, but an oversized commit is INVALID_COMMIT_OFFSET_SIZE."""
    if e.error_code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return group_append_error(e)


def txn_offset_append_error(code: int) -> int:
    """Kafka's ``maybeConvertOffsetCommitError`` for a transactional commit's append (or its replication).

    A fenced producer is INVALID_PRODUCER_EPOCH, the code producers handle for a TxnOffsetCommit
    (Kafka's AddPartitionsToTxnManager turns PRODUCER_FENCED into it for the same reason); any other
    error the client understands (INVALID_TXN_STATE, REQUEST_TIMED_OUT...) goes back unchanged.
    """
    if code == ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


class _NoTopics:
    def topic(self, name: str) -> None:
        return None

    def name_of(self, topic_id: object) -> None:
        return None

    def names(self) -> list[str]:
        return []


def _no_initializer(_group_id: str, _todo: dict[Any, frozenset[int]], _epoch: int,
                    done: Callable[[dict[Any, frozenset[int]]], None]) -> None:
    done({})


def _share_session_settings(settings: Callable[[str], GroupSettings] | None) -> Callable[[str], tuple[int, int]] | None:
    """A group's share.session.timeout.ms and share.heartbeat.interval.ms from its per-group settings."""
    if settings is None:
        return None

    def session_and_heartbeat(group_id: str) -> tuple[int, int]:
        group = settings(group_id)
        return group.share_session_timeout_ms, group.share_heartbeat_interval_ms
    return session_and_heartbeat


class GroupMetadataManager:
    def __init__(self, config: GroupConfig, timer: Timer, clock: Clock, writer: Writer, *,
                 consumer_config: ConsumerGroupConfig | None = None, topics: TopicsView | None = None,
                 group_settings: Callable[[str], GroupSettings] | None = None,
                 share_settings: ShareGroupSettings | None = None,
                 share_initializer: Initializer | None = None) -> None:
        self.config = config
        self.timer = timer
        self.clock = clock
        self._writer = writer
        self.groups: dict[str, ClassicGroup] = {}
        # KIP-848 consumer groups: their own state machine, the same id namespace and offsets
        # KIP-932 share groups: replayed and kept, served once ShareFetch exists (share_initializer: the share
        # coordinator's InitializeShareGroupState; None: nothing is initialized, so nothing is assigned)
        self.share = ShareGroupManager(share_settings or ShareGroupSettings(), timer, clock, topics or _NoTopics(),
                                       self._write, share_initializer or _no_initializer,
                                       lambda gid: gid in self.groups or self.consumer_group(gid) is not None,
                                       _share_session_settings(group_settings))
        self.consumer = ConsumerGroupManager(consumer_config or ConsumerGroupConfig(), timer, clock,
                                             topics or _NoTopics(), self._write, group_settings,
                                             lambda: self.groups, self._drop_replaced_classic, self._downgrade,
                                             config.max_size)
        self.consumer._is_share_group = lambda gid: gid in self.share.groups
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        # Kafka's pendingTransactionalOffsetCommits: group -> producer id -> (topic, partition) -> offset
        self.pending_txn_offsets: dict[str, dict[int, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        # Kafka's openGroupsForProducer: where a transaction marker has offsets to complete
        self.open_groups_for_producer: dict[int, set[str]] = {}

    # -- helpers ------------------------------------------------------------------------------

    def _now(self) -> int:
        return self.clock.milliseconds()

    @staticmethod
    def _heartbeat_key(group_id: str, member_id: str) -> Hashable:
        return ("heartbeat", group_id, member_id)

    @staticmethod
    def _join_key(group_id: str) -> Hashable:
        return ("join", group_id)

    @staticmethod
    def _sync_key(group_id: str) -> Hashable:
        return ("sync", group_id)

    def _write(self, group_id: str, records: list[Record], producer: TxnProducer | None = None) -> int:
        """The base offset of the appended batch (NO_APPEND_OFFSET when the writer does not say)."""
        offset = self._writer(group_id, records) if producer is None else self._writer(group_id, records, producer)
        return NO_APPEND_OFFSET if offset is None else offset

    def _drop_replaced_classic(self, group_id: str) -> None:
        """The classic group became a consumer group (its offsets stay): parked JoinGroup/SyncGroup calls are
        answered REBALANCE_IN_PROGRESS (the members rejoin, now into the consumer group) and its timers stop."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.complete_all(ErrorCode.REBALANCE_IN_PROGRESS)
            self.timer.cancel(self._join_key(group_id))
            self.timer.cancel(self._sync_key(group_id))
            for member_id in list(group.members):
                self.timer.cancel(self._heartbeat_key(group_id, member_id))

    def _downgrade(self, consumer_group: ConsumerGroup, leaving: set[str]) -> bool:
        """Kafka's ``convertToClassicGroup`` when the last consumer-protocol member leaves: the classic members
        left form a classic group at the group epoch, with their current assignments, which then rebalances.
        One batch tombstones the consumer group and writes the classic group; False (nothing changed) when it
        cannot be written or an assignment cannot be expressed."""
        gid = consumer_group.group_id
        now = self._now()
        group = ClassicGroup(gid, now, state=STABLE, generation=consumer_group.group_epoch,
                             protocol_type=CONSUMER_PROTOCOL_TYPE, current_state_timestamp=now)
        for m in consumer_group.members.values():
            if m.member_id in leaving or m.classic is None:
                continue
            partitions: dict[str, list[int]] = {}
            for topic_id, ps in m.assigned.items():
                name = self.consumer.topics.name_of(topic_id)
                if name is not None and ps:
                    partitions[name] = sorted(ps)
            try:
                version = decode_subscription(m.classic.protocols[0][1]).version
            except CorruptRecordError:
                version = 0
            group.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                             m.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, m.classic.protocols,
                             encode_assignment(partitions, version)))
        if not group.members:
            return False
        group.protocol_name = group.select_protocol()
        group.leader_id = next(iter(group.members))
        group.subscribed = group.compute_subscribed_topics()
        records = self.consumer.encode(self.consumer.group_tombstones(consumer_group))
        records.append(self._group_record(group, group.assignments()))
        try:
            self._write(gid, records)
        except KafkaError as e:
            log.warning("could not downgrade consumer group %s to a classic group: %s", gid, e)
            return False
        self.consumer.unload(lambda g: g == gid)
        self.groups[gid] = group
        for member in group.members.values():
            self._reschedule_heartbeat(group, member)
        log.info("consumer group %s converted to a classic group: only classic members are left", gid)
        self._prepare_rebalance(group, f"Downgrade group {gid} from consumer to classic for member leaving.")
        return True

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        group = self.consumer.groups.get(group_id)
        return group if group is not None and not group.dead else None

    def _convert_empty_consumer_group(self, group_id: str) -> int:
        """A classic JoinGroup for a consumer group: an empty one becomes classic (Kafka's offline downgrade,
        its offsets kept, whatever ``group.consumer.migration.policy`` says, as in Kafka); one with members
        answers INCONSISTENT_GROUP_PROTOCOL (classic members inside a consumer group are not built yet)."""
        group = self.consumer_group(group_id)
        if group is None:
            return ErrorCode.NONE
        if group.members:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        try:
            self._write(group_id, self.consumer.encode(self.consumer.group_tombstones(group)))
        except KafkaError as e:
            return group_append_error(e)
        self.consumer.unload(lambda gid: gid == group_id)
        log.info("empty consumer group %s converted to a classic group", group_id)
        return ErrorCode.NONE

    def _group_record(self, group: ClassicGroup, assignment: dict[str, bytes]) -> Record:
        members = tuple(
            MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                           m.session_timeout_ms, m.metadata(group.protocol_name), assignment.get(m.member_id, b""))
            for m in group.members.values())
        value = GroupMetadataValue(group.protocol_type or "", group.generation, group.protocol_name, group.leader_id,
                                   group.current_state_timestamp if group.current_state_timestamp is not None else -1,
                                   members)
        return encode_group_metadata_key(group.group_id), encode_group_metadata_value(value)

    def _empty_group_record(self, group: ClassicGroup) -> Record:
        value = GroupMetadataValue("", 0, None, None, group.current_state_timestamp or -1, ())
        return encode_group_metadata_key(group.group_id), encode_group_metadata_value(value)

    def _join_ok(self, group: ClassicGroup, member_id: str, members: list[Response], *, skip: bool = False,
                 leader: str | None = None) -> Response:
        leader_id = leader if leader is not None else group.leader_id
        return {"error_code": ErrorCode.NONE, "generation_id": group.generation, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol_name, "leader": leader_id or "", "skip_assignment": skip,
                "member_id": member_id, "members": members}

    def _reschedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        gid, mid = group.group_id, member.member_id
        self.timer.schedule(self._heartbeat_key(gid, mid), member.session_timeout_ms if timeout_ms is None
                            else timeout_ms, lambda: self._expire_heartbeat(gid, mid))

    # -- JoinGroup ----------------------------------------------------------------------------

    def join_group(self, req: JoinRequest, respond: Waiter) -> None:
        """Answer now or park ``respond`` until the join phase completes (at most the rebalance timeout)."""
        if not req.group_id:
            respond(join_error(req.member_id, ErrorCode.INVALID_GROUP_ID))
            return
        if not self.config.min_session_timeout_ms <= req.session_timeout_ms <= self.config.max_session_timeout_ms:
            respond(join_error(req.member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        unknown = req.member_id == UNKNOWN_MEMBER_ID
        consumer_group = self.consumer_group(req.group_id)
        if consumer_group is not None and consumer_group.members:
            self._join_consumer_group(req, respond)
            return
        if req.group_id in self.share.groups:
            respond(join_error(req.member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        code = self._convert_empty_consumer_group(req.group_id)
        if code:
            respond(join_error(req.member_id, code))
            return
        group = self.groups.get(req.group_id)
        if group is None:
            if not unknown:
                respond(join_error(req.member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            group = ClassicGroup(req.group_id, self._now())
            try:  # a new group is committed to the log before anything refers to it
                self._write(group.group_id, [self._empty_group_record(group)])
            except KafkaError as e:
                log.warning("failed to write empty metadata for new group %s: %s", req.group_id, e)
                respond(join_error(req.member_id, group_append_error(e)))
                return
            self.groups[req.group_id] = group
        if not self._accept_joining_member(group, req.member_id):
            if req.member_id in group.members:  # a rejoiner beyond the (lowered) max size is dropped
                self._release(group, req.member_id)
                self.timer.cancel(self._heartbeat_key(group.group_id, req.member_id))
            group.remove(req.member_id)
            respond(join_error(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif unknown:
            self._join_new_member(group, req, respond)
        else:
            self._join_existing_member(group, req, respond)

    def _join_consumer_group(self, req: JoinRequest, respond: Waiter) -> None:
        """A classic member joins a consumer group (Kafka's mixed group): answered at once, no join phase."""
        try:
            answer = self.consumer.classic_join(
                req.group_id, req.member_id, req.group_instance_id, req.protocol_type, tuple(req.protocols),
                req.session_timeout_ms, req.rebalance_timeout_ms, req.client_id, req.client_host,
                req.api_version >= REQUIRES_KNOWN_MEMBER_ID_VERSION and req.group_instance_id is None)
        except GroupError as e:
            respond(join_error(req.member_id, e.error_code))
            return
        except KafkaError as e:
            respond(join_error(req.member_id, group_append_error(e)))
            return
        if answer["error_code"]:
            respond(join_error(answer["member_id"], answer["error_code"]))
            return
        respond({"error_code": ErrorCode.NONE, "generation_id": answer["generation_id"], "protocol_type": "consumer",
                 "protocol_name": answer["protocol_name"], "leader": "", "skip_assignment": False,
                 "member_id": answer["member_id"], "members": []})

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.is_in(EMPTY, DEAD):
            return True
        if group.is_in(PREPARING):
            # Counting members parked in JoinGroup (not all members) lets the last rejoiners be refused.
            m = group.members.get(member_id)
            return (m is not None and m.awaiting_join) or group.num_awaiting_join() < self.config.max_size
        return member_id in group.members or len(group.members) < self.config.max_size

    def _join_new_member(self, group: ClassicGroup, req: JoinRequest, respond: Waiter) -> None:
        if group.is_in(DEAD):
            respond(join_error(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, {name for name, _ in req.protocols}):
            respond(join_error(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = group.generate_member_id(req.client_id, req.group_instance_id)
        if req.group_instance_id is not None:
            existing = group.static_member_id(req.group_instance_id)
            if existing is not None:
                log.info("static member %s of group %s rejoins with an unknown member id in state %s: replacing %s",
                         req.group_instance_id, group.group_id, group.state.value, existing)
                self._update_static_member(group, req, existing, new_id, respond)
            else:
                self._add_member_and_rebalance(group, req, new_id, respond)
        elif req.api_version >= REQUIRES_KNOWN_MEMBER_ID_VERSION:
            # Hand out the id and wait for the member to come back with it (KIP-394): a client that
            # times out and retries then cannot leave a trail of defunct members behind.
            group.add_pending_member(new_id)
            gid = group.group_id
            self.timer.schedule(self._heartbeat_key(gid, new_id), req.session_timeout_ms,
                                lambda: self._expire_heartbeat(gid, new_id))
            respond(join_error(new_id, ErrorCode.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(group, req, new_id, respond)

    def _join_existing_member(self, group: ClassicGroup, req: JoinRequest, respond: Waiter) -> None:
        member_id = req.member_id
        if group.is_in(DEAD):
            respond(join_error(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, {name for name, _ in req.protocols}):
            respond(join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:  # pending ids are only handed to dynamic members
                respond(join_error(member_id, ErrorCode.UNKNOWN_SERVER_ERROR))
                return
            self._add_member_and_rebalance(group, req, member_id, respond)
            return
        try:
            group.validate_member(member_id, req.group_instance_id)
        except GroupError as e:
            respond(join_error(member_id, e.error_code))
            return
        member = group.member(member_id)
        if group.is_in(PREPARING):
            self._update_member_and_rebalance(group, member, req, respond,
                                              f"member {member_id} is joining group during {group.state.value}")
        elif group.is_in(COMPLETING):
            if member.matches(req.protocols):
                # Same metadata: it probably missed the JoinGroup response. Send it again.
                respond(self._join_ok(group, member_id,
                                      group.join_members() if group.is_leader(member_id) else []))
            else:
                self._update_member_and_rebalance(group, member, req, respond,
                                                  f"updating metadata for member {member_id} during "
                                                  f"{group.state.value}")
        elif group.is_in(STABLE):
            if group.is_leader(member_id):
                # A leader rejoining asks for a rebalance (e.g. topic metadata changed its assignment).
                self._update_member_and_rebalance(group, member, req, respond,
                                                  f"leader {member_id} re-joining group during Stable")
            elif not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, req, respond,
                                                  f"updating metadata for member {member_id} during Stable")
            else:
                respond(self._join_ok(group, member_id, []))
        else:
            log.warning("member %s of group %s rejoins in unexpected state %s", member_id, group.group_id,
                        group.state.value)
            respond(join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _add_member_and_rebalance(self, group: ClassicGroup, req: JoinRequest, member_id: str,
                                  respond: Waiter) -> None:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                        req.session_timeout_ms, req.protocol_type, req.protocols, is_new=True)
        if group.is_in(PREPARING) and group.previous_state is EMPTY:
            group.new_member_added = True  # the initial rebalance may wait a little longer
        group.add(member, respond)
        # A new member cannot heartbeat until it has its id, and a client that gives up on a long
        # JoinGroup may retry with a fresh one: bound how long a parked new member counts.
        self._reschedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"adding new member {member_id} with group instance id {req.group_instance_id}; "
                   f"client reason: {req.reason or 'not provided'}")

    def _update_member_and_rebalance(self, group: ClassicGroup, member: Member, req: JoinRequest, respond: Waiter,
                                     reason: str) -> None:
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, respond)
        self._maybe_prepare_rebalance_or_complete_join(group, reason)

    def _update_static_member(self, group: ClassicGroup, req: JoinRequest, old_id: str, new_id: str,
                              respond: Waiter) -> None:
        """A known group.instance.id came back with a new member id: swap ids, rebalance only if needed."""
        assert req.group_instance_id is not None
        instance_id = req.group_instance_id
        current_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        self._reschedule_heartbeat(group, member)
        old_settings = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, respond)
        if group.is_in(STABLE):
            if group.protocol_name == group.select_protocol():
                try:
                    self._write(group.group_id, [self._group_record(group, group.assignments())])
                except KafkaError as e:
                    log.warning("failed to persist static member %s of group %s: %s; reverting to %s", new_id,
                                group.group_id, e, old_id)
                    group.update_member(member, *old_settings, None)
                    old = group.replace_static_member(instance_id, new_id, old_id)
                    self._reschedule_heartbeat(group, old)
                    respond({**self._join_ok(group, UNKNOWN_MEMBER_ID, [], leader=current_leader),
                             "error_code": group_append_error(e)})
                    return
                if req.api_version >= SKIP_ASSIGNMENT_VERSION:
                    is_leader = group.is_leader(new_id)
                    group.complete_join(member, self._join_ok(group, new_id,
                                                              group.join_members() if is_leader else [],
                                                              skip=is_leader))
                else:
                    # Older clients would reassign as leader; tell them the old id leads, so they only sync.
                    group.complete_join(member, self._join_ok(group, new_id, [], leader=current_leader))
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"static member {new_id} with instance id {instance_id} changed the group's protocol")
        elif group.is_in(COMPLETING):
            # The leader may already be assigning with the old id: only a new round is consistent.
            self._prepare_rebalance(group, f"updating metadata for static member {new_id} with instance id "
                                           f"{instance_id}")
        else:
            self._maybe_complete_join_phase(group)

    # -- the rebalance ------------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if not group.is_in(PREPARING):
            return
        if group.previous_state is EMPTY:
            return  # the initial rebalance is completed by its delay timer
        if group.has_all_members_joined():
            self._complete_join(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(COMPLETING):
            self._reset_and_propagate_assignment(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        initial = group.is_in(EMPTY)
        gid = group.group_id
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self.timer.schedule(self._join_key(gid), delay,
                                lambda: self._try_complete_initial_rebalance(gid, delay, remaining))
        log.info("preparing to rebalance group %s in state %s with old generation %d (reason: %s)", gid,
                 group.state.value, group.generation, reason)
        group.transition_to(PREPARING, self._now())
        if not initial:
            self._maybe_complete_join_else_schedule(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.has_all_members_joined():
            self._complete_join(group)
        else:
            gid = group.group_id
            self.timer.schedule(self._join_key(gid), group.rebalance_timeout_ms(),
                                lambda: self._complete_join_of(gid))

    def _try_complete_initial_rebalance(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self.config.initial_rebalance_delay_ms, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self.timer.schedule(self._join_key(group_id), new_delay,
                                lambda: self._try_complete_initial_rebalance(group_id, new_delay, new_remaining))
        else:
            self._complete_join(group)

    def _complete_join_of(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start the next generation."""
        gid = group.group_id
        self.timer.cancel(self._join_key(gid))
        gone = [m for m in group.not_yet_rejoined() if not m.is_static]
        for m in gone:
            group.remove(m.member_id)
            self.timer.cancel(self._heartbeat_key(gid, m.member_id))
        if gone:
            log.info("group %s removed dynamic members who did not rejoin: %s", gid, [m.member_id for m in gone])
        if group.is_in(DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait for them (or their session timeouts).
            log.warning("group %s could not complete its rebalance because no members rejoined", gid)
            self.timer.schedule(self._join_key(gid), group.rebalance_timeout_ms(), lambda: self._complete_join_of(gid))
            return
        group.init_next_generation(self._now())
        if group.is_empty:
            log.info("group %s with generation %d is now empty", gid, group.generation)
            try:
                self._write(gid, [self._group_record(group, {})])
            except KafkaError as e:  # the previous generation stays in the log; its members will time out
                log.warning("failed to write empty metadata for group %s: %s", gid, e)
            return
        log.info("stabilized group %s generation %d with %d members (protocol %s)", gid, group.generation,
                 len(group.members), group.protocol_name)
        for m in list(group.members.values()):
            members = group.join_members() if group.is_leader(m.member_id) else []
            group.complete_join(m, self._join_ok(group, m.member_id, members))
            self._reschedule_heartbeat(group, m)
            m.is_new = False
            group.pending_sync.add(m.member_id)
        generation = group.generation
        self.timer.schedule(self._sync_key(gid), group.rebalance_timeout_ms(),
                            lambda: self._expire_pending_sync(gid, generation))

    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        group = self.groups.get(group_id)
        if group is None or group.generation != generation or not group.is_in(COMPLETING, STABLE):
            return
        if group.pending_sync:
            pending = sorted(group.pending_sync)
            for member_id in pending:
                self._release(group, member_id)
                group.remove(member_id)
                self.timer.cancel(self._heartbeat_key(group_id, member_id))
            self._prepare_rebalance(group, f"removing {pending} on pending sync request expiration")

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync.clear()
        self.timer.cancel(self._sync_key(group.group_id))

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if group.is_in(DEAD, EMPTY, PREPARING) or not group.pending_sync:
            self.timer.cancel(self._sync_key(group.group_id))

    def _reset_and_propagate_assignment(self, group: ClassicGroup, code: int) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, code)

    def _set_and_propagate_assignment(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        self._propagate_assignment(group, ErrorCode.NONE)

    def _propagate_assignment(self, group: ClassicGroup, code: int) -> None:
        ok = code == ErrorCode.NONE
        for m in list(group.members.values()):
            response = sync_response(code, group.protocol_type if ok else None, group.protocol_name if ok else None,
                                     m.assignment)
            if group.complete_sync(m, response):
                # Its session was not being checked while it waited: restart the clock now.
                self._reschedule_heartbeat(group, m)

    def _release(self, group: ClassicGroup, member_id: str) -> None:
        """Answer whatever the member has parked before it is removed (nothing may hang forever)."""
        m = group.members.get(member_id)
        if m is not None:
            group.complete_join(m, join_error(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID))
            group.complete_sync(m, sync_response(ErrorCode.UNKNOWN_MEMBER_ID))

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            return
        if group.is_pending_member(member_id):
            log.info("pending member %s of group %s removed after its session timeout", member_id, group_id)
            group.remove(member_id)
            if group.is_in(PREPARING) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("member %s of group %s failed its session timeout (%d ms), removing it", member_id, group_id,
                 member.session_timeout_ms)
        self._remove_member_and_update_group(group, member, f"removing member {member_id} on heartbeat expiration")

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member, reason: str) -> None:
        self._release(group, member.member_id)
        group.remove(member.member_id)
        if group.is_in(STABLE, COMPLETING):
            self._maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.is_in(PREPARING) and group.has_all_members_joined():
            self._complete_join(group)

    # -- SyncGroup ----------------------------------------------------------------------------

    def sync_group(self, req: SyncRequest, respond: Waiter) -> None:
        """Followers park until the leader's assignment is persisted; the leader's is written first."""
        if not req.group_id:
            respond(sync_response(ErrorCode.INVALID_GROUP_ID))
            return
        if self.consumer_group(req.group_id) is not None:
            try:
                assignment = self.consumer.classic_sync(req.group_id, req.member_id, req.group_instance_id,
                                                        req.generation_id, req.protocol_type, req.protocol_name)
            except GroupError as e:
                respond(sync_response(e.error_code))
                return
            respond(sync_response(ErrorCode.NONE, CONSUMER_PROTOCOL_TYPE, req.protocol_name, assignment))
            return
        group = self.groups.get(req.group_id)
        if group is None or group.is_empty:
            respond(sync_response(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        code = self._validate_sync(group, req)
        if code:
            respond(sync_response(code))
        elif group.is_in(PREPARING):
            respond(sync_response(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_in(COMPLETING):
            member = group.member(req.member_id)
            if member.sync_waiter is not None:  # superseded by this request (a retry on a new connection)
                group.complete_sync(member, sync_response(ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_waiter = respond
            self._remove_pending_sync_member(group, req.member_id)
            if group.is_leader(req.member_id):
                self._store_assignment(group, req)
        elif group.is_in(STABLE):
            self._remove_pending_sync_member(group, req.member_id)
            member = group.member(req.member_id)
            respond(sync_response(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))

    def _store_assignment(self, group: ClassicGroup, req: SyncRequest) -> None:
        log.info("assignment received from leader %s for group %s generation %d (%d members)", req.member_id,
                 group.group_id, group.generation, len(group.members))
        assignment = {mid: req.assignments.get(mid, b"") for mid in group.members}
        missing = [mid for mid in group.members if mid not in req.assignments]
        if missing:
            log.warning("empty assignments for members %s of group %s generation %d", missing, group.group_id,
                        group.generation)
        try:
            self._write(group.group_id, [self._group_record(group, assignment)])
        except KafkaError as e:
            if group.is_in(COMPLETING) and req.generation_id == group.generation:
                code = group_append_error(e)
                log.warning("failed to store the assignment of group %s: %s", group.group_id, e)
                self._reset_and_propagate_assignment(group, code)
                self._maybe_prepare_rebalance_or_complete_join(group, f"error {code} storing the group assignment")
            return
        if group.is_in(COMPLETING) and req.generation_id == group.generation:
            self._set_and_propagate_assignment(group, assignment)
            group.transition_to(STABLE, self._now())

    def _validate_sync(self, group: ClassicGroup, req: SyncRequest) -> int:
        if group.is_in(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            group.validate_member(req.member_id, req.group_instance_id)
        except GroupError as e:
            return e.error_code
        if req.generation_id != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(req.protocol_name,
                                                                                   group.protocol_name):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    # -- Heartbeat and LeaveGroup -------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> int:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if self.consumer_group(group_id) is not None:
            try:
                return self.consumer.classic_heartbeat(group_id, member_id, instance_id, generation_id)
            except GroupError as e:
                return e.error_code
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            group.validate_member(member_id, instance_id)
        except GroupError as e:
            return e.error_code
        if generation_id != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_in(EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.member(member_id))
        if group.is_in(PREPARING):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, group_id: str, members: Iterable[tuple[str, str | None, str | None]]
                    ) -> tuple[int, list[Response]]:
        """``members`` are (member id, group instance id, reason); returns (group error, per-member results)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        if self.consumer_group(group_id) is not None:
            try:
                return ErrorCode.NONE, self.consumer.classic_leave(group_id, [(m, i) for m, i, _ in members])
            except KafkaError as e:
                return group_append_error(e), []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, []
        if group.is_in(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results: list[Response] = []
        left = []
        for member_id, instance_id, reason in members:
            code: int = ErrorCode.NONE
            if member_id == UNKNOWN_MEMBER_ID:
                # Admin removal of a static member by its group.instance.id alone.
                existing = group.static_member_id(instance_id) if instance_id is not None else None
                if existing is not None:
                    self._remove_current_member(group, existing, reason)
                    left.append(existing)
                else:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                self.timer.cancel(self._heartbeat_key(group_id, member_id))
                left.append(member_id)
            else:
                try:
                    group.validate_member(member_id, instance_id)
                    self._remove_current_member(group, member_id, reason)
                    left.append(member_id)
                except GroupError as e:
                    code = e.error_code
            results.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": code})
        if left:
            if group.is_in(STABLE, COMPLETING):
                self._maybe_prepare_rebalance_or_complete_join(group, f"explicit LeaveGroup for {left}")
            elif group.is_in(PREPARING):
                self._maybe_complete_join_phase(group)
        return ErrorCode.NONE, results

    def _remove_current_member(self, group: ClassicGroup, member_id: str, reason: str | None) -> None:
        self.timer.cancel(self._heartbeat_key(group.group_id, member_id))
        log.info("member %s has left group %s (client reason: %s)", member_id, group.group_id,
                 reason or "not provided")
        self._release(group, member_id)
        group.remove(member_id)

    # -- describe, list, delete -----------------------------------------------------------------

    def describe_group(self, group_id: str) -> Response | None:
        """None when the group does not exist (the caller answers per version)."""
        group = self.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            return None
        stable = group.is_in(STABLE)
        protocol = group.protocol_name if stable else None
        return {"error_code": ErrorCode.NONE, "error_message": None, "group_id": group_id,
                "group_state": group.state.value, "protocol_type": group.protocol_type or "",
                "protocol_data": protocol or "", "members": [m.describe(protocol) for m in group.members.values()]}

    def list_groups(self, states: set[str] | None = None, types: set[str] | None = None) -> list[Response]:
        """``states``/``types`` are lower-case filters; empty or None means all."""
        out = [] if types and "consumer" not in types else self.consumer.list_groups(states)
        out += [] if types and "share" not in types else self.share.list_groups(states)
        if types and GROUP_TYPE_CLASSIC not in types:
            return out
        for group in self.groups.values():
            if group.is_in(DEAD) or (states and group.state.value.lower() not in states):
                continue
            out.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                        "group_state": group.state.value, "group_type": GROUP_TYPE_CLASSIC})
        return out

    def delete_groups(self, group_ids: Iterable[str | None]) -> list[tuple[str | None, int]]:
        results: list[tuple[str | None, int]] = []
        for gid in group_ids:
            if gid is None:
                results.append((gid, ErrorCode.INVALID_GROUP_ID))
                continue
            consumer_group = self.consumer_group(gid)
            if consumer_group is not None:
                results.append((gid, self._delete_consumer_group(consumer_group)))
                continue
            group = self.groups.get(gid)
            if group is None or group.is_in(DEAD):
                results.append((gid, ErrorCode.GROUP_ID_NOT_FOUND))
                continue
            if not group.is_empty:
                results.append((gid, ErrorCode.NON_EMPTY_GROUP))
                continue
            records: list[Record] = [(encode_offset_commit_key(gid, t, p), None) for t, p in self.offsets.get(gid, {})]
            records.append((encode_group_metadata_key(gid), None))
            try:
                self._write(gid, records)
            except KafkaError as e:
                results.append((gid, group_append_error(e)))
                continue
            self._drop_group(group)
            log.info("deleted group %s", gid)
            results.append((gid, ErrorCode.NONE))
        return results

    def _delete_consumer_group(self, group: ConsumerGroup) -> int:
        gid = group.group_id
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        records: list[Record] = [(encode_offset_commit_key(gid, t, p), None) for t, p in self.offsets.get(gid, {})]
        records += self.consumer.encode(self.consumer.group_tombstones(group))
        try:
            self._write(gid, records)
        except KafkaError as e:
            return group_append_error(e)
        self.consumer.unload(lambda g: g == gid)
        self.offsets.pop(gid, None)
        self._forget_pending_txn_offsets(gid)
        log.info("deleted consumer group %s", gid)
        return ErrorCode.NONE

    def _drop_group(self, group: ClassicGroup) -> None:
        gid = group.group_id
        group.transition_to(DEAD, self._now())
        self.groups.pop(gid, None)
        self.offsets.pop(gid, None)
        self._forget_pending_txn_offsets(gid)
        self.timer.cancel(self._join_key(gid))
        self.timer.cancel(self._sync_key(gid))

    # -- offsets ------------------------------------------------------------------------------

    def commit_offsets(self, req: CommitRequest) -> dict[tuple[str, int], int]:
        """Per (topic, partition) error codes; the records are in the log before this returns."""
        keys = [(t, p) for t, p, *_ in req.partitions]
        if not req.group_id:
            return dict.fromkeys(keys, ErrorCode.INVALID_GROUP_ID)
        try:
            group = self._validate_offset_commit(req)
            rejected = self._stale_partitions(req)
        except GroupError as e:
            return dict.fromkeys(keys, e.error_code)
        if rejected:
            req = replace(req, partitions=[p for p in req.partitions if (p[0], p[1]) not in rejected])
        if group is not None and group.is_in(STABLE, PREPARING):  # a commit from a member keeps its session alive
            self._reschedule_heartbeat(group, group.member(req.member_id))
        now = self._now()
        expire = now + req.retention_ms if req.retention_ms != -1 else -1
        results, records, updates = self._offset_records(req, now, expire)
        results.update(rejected)
        if records:
            try:
                append_offset = self._write(req.group_id, records)
            except KafkaError as e:
                code = offset_append_error(e)
                return {k: (code if k in updates else v) for k, v in results.items()}
            self.offsets.setdefault(req.group_id, {}).update(
                {k: replace(om, append_offset=append_offset) for k, om in updates.items()})
        return results

    def _offset_records(self, req: CommitRequest | TxnCommitRequest, now: int, expire: int) -> tuple[
            dict[tuple[str, int], int], list[Record], dict[tuple[str, int], OffsetAndMetadata]]:
        """Per partition of an (Txn)OffsetCommit: OFFSET_METADATA_TOO_LARGE, or NONE with its record and its
        new offset. ``expire`` (-1: none) is stored only by value version 1, as Kafka writes it."""
        version = OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if expire != -1 else OFFSET_COMMIT_VALUE_VERSION
        results: dict[tuple[str, int], int] = {}
        records: list[Record] = []
        updates: dict[tuple[str, int], OffsetAndMetadata] = {}
        for topic, partition, offset, leader_epoch, metadata in req.partitions:
            if metadata is not None and len(metadata) > self.config.offset_metadata_max_bytes:
                results[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            om = OffsetAndMetadata(offset, leader_epoch, metadata or "", now, expire)
            records.append((encode_offset_commit_key(req.group_id, topic, partition),
                            encode_offset_commit_value(OffsetCommitValue(om.offset, om.leader_epoch, om.metadata,
                                                                         om.commit_timestamp, om.expire_timestamp),
                                                       version)))
            updates[(topic, partition)] = om
            results[(topic, partition)] = ErrorCode.NONE
        return results, records, updates

    def _validate_offset_commit(self, req: CommitRequest | TxnCommitRequest) -> ClassicGroup | None:
        """Kafka's ``validateOffsetCommit``; the transactional differences (``isTransactional``): a commit
        without member id from a non-empty group is allowed (TxnOffsetCommit before v3 has no member fields),
        an unknown group with a generation is UNKNOWN_MEMBER_ID (Kafka creates the Empty group first, in which
        every member is unknown; not kept here), and a Completing group is not asked to wait."""
        transactional = isinstance(req, TxnCommitRequest)
        consumer_group = self.consumer_group(req.group_id)
        if consumer_group is not None:
            self._validate_consumer_offset_commit(consumer_group, req)
            return None
        group = self.groups.get(req.group_id)
        if group is None:
            if req.generation_id < 0:
                # A consumer without group management (or an admin client, or a producer committing for a
                # group without group management): a "simple" group.
                log.info("creating simple consumer group %s via a %s offset commit", req.group_id,
                         "transactional" if transactional else "manual")
                group = ClassicGroup(req.group_id, self._now())
                self.groups[req.group_id] = group
                return group
            if transactional:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            if isinstance(req, CommitRequest) and req.api_version >= GROUP_ID_NOT_FOUND_COMMIT_VERSION:
                raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND)
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        if group.is_in(DEAD):
            raise GroupError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if req.generation_id < 0 and group.is_in(EMPTY):
            return group
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            group.validate_member(req.member_id, req.group_instance_id)
            if req.generation_id != group.generation:
                raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        elif not transactional and not group.is_in(EMPTY):
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if not transactional and group.is_in(COMPLETING):
            # The member has the new generation but not its assignment yet: let it retry after SyncGroup.
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
        return group

    @staticmethod
    def _validate_consumer_offset_commit(group: ConsumerGroup, req: CommitRequest | TxnCommitRequest) -> None:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``: the generation is the member epoch.

        An epoch below 0 commits only to an empty group (an admin or a consumer without group management);
        otherwise the member must exist at no newer an epoch than its current one (STALE_MEMBER_EPOCH for a
        consumer-protocol member, ILLEGAL_GENERATION for a classic one or a transactional commit; an older one
        is judged per partition by :meth:`_stale_partitions`), and a consumer-protocol member must use
        OffsetCommit v9+.
        """
        transactional = isinstance(req, TxnCommitRequest)
        if req.generation_id < 0 and not group.members:
            return
        if transactional and req.generation_id < 0 and not req.member_id:
            return  # TxnOffsetCommit before v3 carries no member (Kafka lets it through the same way)
        member = group.members.get(req.member_id)
        if member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if isinstance(req, CommitRequest) and not member.uses_classic_protocol \
                and req.api_version < GROUP_ID_NOT_FOUND_COMMIT_VERSION:
            raise GroupError(ErrorCode.UNSUPPORTED_VERSION)
        if req.generation_id > member.member_epoch or req.generation_id < 0:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION if transactional or member.uses_classic_protocol
                             else ErrorCode.STALE_MEMBER_EPOCH)

    def _stale_partitions(self, req: CommitRequest | TxnCommitRequest) -> dict[tuple[str, int], int]:
        """Kafka 4.3's assignment-epoch check (KIP-1251) for a consumer group member's commit at an epoch
        older than its current one: each partition must be held by the member (assigned or pending
        revocation) since that epoch or earlier, else it is rejected alone; a zombie's commit for a partition
        that moved on is fenced, a member's commit racing an epoch bump that did not touch it is not."""
        group = self.consumer_group(req.group_id)
        member = group.members.get(req.member_id) if group is not None else None
        if member is None or req.generation_id < 0 or req.generation_id == member.member_epoch:
            return {}
        code = ErrorCode.ILLEGAL_GENERATION if isinstance(req, TxnCommitRequest) or member.uses_classic_protocol \
            else ErrorCode.STALE_MEMBER_EPOCH
        rejected: dict[tuple[str, int], int] = {}
        for topic, partition, *_ in req.partitions:
            found = self.consumer.topics.topic(topic)
            epoch = member.assignment_epoch(found[0], partition) if found is not None else None
            if epoch is None or req.generation_id < epoch:
                rejected[(topic, partition)] = code
        return rejected

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> None:
        """OffsetFetch v9+ from a member (Kafka's ``validateOffsetFetch``): an admin (no member, epoch -1)
        may always read; a consumer group's member must exist at its current epoch."""
        group = self.consumer_group(group_id)
        if group is None or (member_id is None and member_epoch < 0) or (not member_id and member_epoch < 0):
            return
        member = group.members.get(member_id or "")
        if member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if member_epoch != member.member_epoch:
            raise GroupError(ErrorCode.STALE_MEMBER_EPOCH)

    # -- transactional offsets (TxnOffsetCommit and the transaction markers) ----------------------

    def commit_txn_offsets(self, req: TxnCommitRequest) -> tuple[dict[tuple[str, int], int], int]:
        """Kafka's ``handleTxnCommitOffsets``: (per (topic, partition) error codes, the batch's append offset).

        The offsets are written as one transactional batch of the request's producer and are then
        pending until that producer's transaction ends (:meth:`complete_txn_offset_commits`). The
        append offset is NO_APPEND_OFFSET when nothing was written.
        """
        keys = [(t, p) for t, p, *_ in req.partitions]
        if not req.group_id:
            return dict.fromkeys(keys, ErrorCode.INVALID_GROUP_ID), NO_APPEND_OFFSET
        try:
            self._validate_offset_commit(req)
            rejected = self._stale_partitions(req)
        except GroupError as e:
            return dict.fromkeys(keys, e.error_code), NO_APPEND_OFFSET
        if rejected:
            req = replace(req, partitions=[p for p in req.partitions if (p[0], p[1]) not in rejected])
        results, records, updates = self._offset_records(req, self._now(), -1)
        results.update(rejected)
        if not records:
            return results, NO_APPEND_OFFSET
        # Kafka's storeOffsets: without a producer id there is no transaction, and the commit is a plain one
        # (any negative id: the log would not track a transaction for it, so no marker could ever end it).
        transactional = req.producer_id >= 0
        try:
            append_offset = self._write(req.group_id, records,
                                        (req.producer_id, req.producer_epoch) if transactional else None)
        except KafkaError as e:
            code = txn_offset_append_error(int(e.error_code))
            return {k: (code if k in updates else v) for k, v in results.items()}, NO_APPEND_OFFSET
        if not transactional:
            self.offsets.setdefault(req.group_id, {}).update(
                {k: replace(om, append_offset=append_offset) for k, om in updates.items()})
            return results, append_offset
        pending = self.pending_txn_offsets.setdefault(req.group_id, {}).setdefault(req.producer_id, {})
        pending.update({k: replace(om, append_offset=append_offset) for k, om in updates.items()})
        self.open_groups_for_producer.setdefault(req.producer_id, set()).add(req.group_id)
        return results, append_offset

    def fail_txn_offset_commit(self, group_id: str, producer_id: int, append_offset: int) -> None:
        """Kafka's ``failPendingTxnOffsetCommit``: the batch at ``append_offset`` was not replicated in time
        and the producer is told so; it retries (possibly elsewhere), so its offsets are no longer pending
        here. Offsets a later commit of the same producer replaced are kept."""
        by_producer = self.pending_txn_offsets.get(group_id, {})
        pending = by_producer.get(producer_id)
        if pending is None:
            return
        for key in [k for k, om in pending.items() if om.append_offset == append_offset]:
            del pending[key]
        if not pending:
            del by_producer[producer_id]
            if not by_producer:
                del self.pending_txn_offsets[group_id]
            self._remove_producer_group(producer_id, group_id)

    def complete_txn_offset_commits(self, producer_id: int, commit: bool, which: Callable[[str], bool]) -> int:
        """Kafka's ``handleTxnCompletion``: ``producer_id``'s transaction ended with a marker in the partition
        of the groups ``which`` selects. Returns how many groups had pending offsets from it.

        A commit makes the pending offsets committed unless a plain commit of the same partition was
        appended after them (Kafka's ``completePendingTxnOffsetCommit``); an abort drops them.
        """
        gids = [g for g in self.open_groups_for_producer.get(producer_id, ()) if which(g)]
        for gid in gids:
            group = self.groups.get(gid)
            if group is not None and group.is_in(DEAD):
                continue
            self._complete_pending_txn_offset_commit(gid, producer_id, commit)
        return len(gids)

    def _complete_pending_txn_offset_commit(self, group_id: str, producer_id: int, commit: bool) -> None:
        by_producer = self.pending_txn_offsets.get(group_id)
        pending = by_producer.pop(producer_id, None) if by_producer is not None else None
        if by_producer is not None and not by_producer:
            del self.pending_txn_offsets[group_id]
        self._remove_producer_group(producer_id, group_id)
        if not commit or not pending:
            if pending:
                log.debug("aborted transactional offsets of producer %d in group %s: %s", producer_id, group_id,
                          sorted(pending))
            return
        if group_id not in self.groups:
            # Only replay leaves pending offsets without their group (a tombstone read after them); Kafka's
            # loader creates the group for the offsets, as it does for any offsets without group metadata.
            self.groups[group_id] = ClassicGroup(group_id, self._now())
        stored = self.offsets.setdefault(group_id, {})
        for key, om in pending.items():
            current = stored.get(key)
            if current is None or current.older_than(om):
                stored[key] = om
            else:
                log.debug("transactional offset %s of producer %d for group %s %s-%d committed, but a later plain "
                          "commit (%d) is kept", om.offset, producer_id, group_id, key[0], key[1], current.offset)

    def has_pending_txn_offsets(self, group_id: str, key: tuple[str, int] | None = None) -> bool:
        """Kafka's ``hasPendingOffsetCommitsForTopicPartition`` (``key``), or ``hasOffsets``' pending half."""
        by_producer = self.pending_txn_offsets.get(group_id, {})
        if key is None:
            return any(by_producer.values())
        return any(key in pending for pending in by_producer.values())

    def _remove_pending_txn_offsets(self, group_id: str, keys: Iterable[tuple[str, int]]) -> None:
        """Kafka's ``removeOffsets`` reaches the pending transactional offsets of those partitions too."""
        by_producer = self.pending_txn_offsets.get(group_id)
        if not by_producer:
            return
        for key in keys:
            for pending in by_producer.values():
                pending.pop(key, None)

    def _forget_pending_txn_offsets(self, group_id: str) -> None:
        """The group is gone (deleted, expired or unloaded): a later marker has nothing to complete in it."""
        for producer_id in self.pending_txn_offsets.pop(group_id, {}):
            self._remove_producer_group(producer_id, group_id)

    def _remove_producer_group(self, producer_id: int, group_id: str) -> None:
        groups = self.open_groups_for_producer.get(producer_id)
        if groups is not None:
            groups.discard(group_id)
            if not groups:
                del self.open_groups_for_producer[producer_id]

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                      require_stable: bool = False) -> list[tuple[str, list[Response]]]:
        """(topic, partitions) with the committed offset or -1; ``topics`` None means every committed one.

        ``require_stable`` (OffsetFetch v7+, KIP-447): a partition with a pending transactional offset
        answers UNSTABLE_OFFSET_COMMIT instead, and the client retries until the transaction ended.
        """
        if not group_id:
            raise GroupError(ErrorCode.INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        live = (group is not None and not group.is_in(DEAD)) or self.consumer_group(group_id) is not None
        stored = self.offsets.get(group_id, {}) if live else {}
        unstable = require_stable and live and self.has_pending_txn_offsets(group_id)

        def entry(partition: int, om: OffsetAndMetadata | None, topic: str) -> Response:
            if unstable and self.has_pending_txn_offsets(group_id, (topic, partition)):
                return {"partition_index": partition, "committed_offset": -1, "committed_leader_epoch": -1,
                        "metadata": "", "error_code": ErrorCode.UNSTABLE_OFFSET_COMMIT}
            if om is None:
                return {"partition_index": partition, "committed_offset": -1, "committed_leader_epoch": -1,
                        "metadata": "", "error_code": ErrorCode.NONE}
            return {"partition_index": partition, "committed_offset": om.offset,
                    "committed_leader_epoch": om.leader_epoch, "metadata": om.metadata, "error_code": ErrorCode.NONE}

        if topics is None:
            by_topic: dict[str, list[Response]] = {}
            for (topic, partition), om in sorted(stored.items()):
                by_topic.setdefault(topic, []).append(entry(partition, om, topic))
            return list(by_topic.items())
        return [(topic, [entry(p, stored.get((topic, p)), topic) for p in partitions]) for topic, partitions in topics]

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]
                       ) -> tuple[int, list[tuple[str, list[tuple[int, int]]]]]:
        """OffsetDelete: (group error, [(topic, [(partition, error)])])."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        group: ClassicGroup | ConsumerGroup | None = self.consumer_group(group_id)
        if group is None:
            group = self.groups.get(group_id)
            if group is None or group.is_in(DEAD):
                return ErrorCode.GROUP_ID_NOT_FOUND, []
            if group.is_in(STABLE, PREPARING, COMPLETING) and not group.uses_consumer_protocol():
                return ErrorCode.NON_EMPTY_GROUP, []
        stored = self.offsets.get(group_id, {})
        out: list[tuple[str, list[tuple[int, int]]]] = []
        records: list[Record] = []
        doomed: list[tuple[str, int]] = []
        eligible: list[tuple[str, int]] = []
        for topic, partitions in topics:
            if group.is_subscribed_to_topic(topic):
                out.append((topic, [(p, GROUP_SUBSCRIBED_TO_TOPIC) for p in partitions]))
                continue
            for p in partitions:
                eligible.append((topic, p))
                if (topic, p) in stored:
                    records.append((encode_offset_commit_key(group_id, topic, p), None))
                    doomed.append((topic, p))
            out.append((topic, [(p, ErrorCode.NONE) for p in partitions]))
        if records:
            try:
                self._write(group_id, records)
            except KafkaError as e:
                return group_append_error(e), []
            for key in doomed:
                stored.pop(key, None)
        self._remove_pending_txn_offsets(group_id, eligible)
        return ErrorCode.NONE, out

    def on_topic_deleted(self, topic: str) -> int:
        """Kafka's ``onPartitionsDeleted``: tombstone every group's offsets of a deleted topic.

        Without it a topic recreated under the same name would hand consumers offsets of the old data.
        Returns how many offsets were removed.
        """
        removed = 0
        for by_producer in self.pending_txn_offsets.values():
            for pending in by_producer.values():
                for key in [k for k in pending if k[0] == topic]:
                    del pending[key]
        for gid, stored in list(self.offsets.items()):
            doomed = [key for key in stored if key[0] == topic]
            if not doomed:
                continue
            try:
                self._write(gid, [(encode_offset_commit_key(gid, t, p), None) for t, p in doomed])
            except KafkaError as e:
                log.warning("failed to remove offsets of deleted topic %s for group %s: %s", topic, gid, e)
                continue
            for key in doomed:
                stored.pop(key, None)
            removed += len(doomed)
        return removed

    def expire_offsets(self) -> int:
        """Drop offsets past ``offsets.retention``, and empty groups left without any; returns how many."""
        now = self._now()
        retention = self.config.offsets_retention_ms
        removed = 0
        for gid, group in list(self.groups.items()):
            stored = self.offsets.get(gid, {})
            base: Callable[[OffsetAndMetadata], int] | None
            if group.protocol_type:
                if group.is_in(EMPTY):
                    since = group.current_state_timestamp

                    def base(om: OffsetAndMetadata, since: int | None = since) -> int:
                        return since if since is not None else om.commit_timestamp
                elif group.uses_consumer_protocol() and group.subscribed is not None and group.is_in(STABLE):
                    def base(om: OffsetAndMetadata) -> int:
                        return om.commit_timestamp
                else:
                    base = None
            else:
                def base(om: OffsetAndMetadata) -> int:
                    return om.commit_timestamp
            if base is None:
                continue
            expired = []
            all_expired = True
            for (topic, partition), om in stored.items():
                if group.is_subscribed_to_topic(topic):
                    all_expired = False
                    continue
                due = now >= om.expire_timestamp if om.expire_timestamp >= 0 else now - base(om) >= retention
                if due:
                    expired.append((topic, partition))
                else:
                    all_expired = False
            records: list[Record] = [(encode_offset_commit_key(gid, t, p), None) for t, p in expired]
            # Kafka's ``hasOffsets`` counts pending transactional offsets: their transaction may still commit.
            delete_group = all_expired and group.is_empty and not group.pending_join \
                and not self.has_pending_txn_offsets(gid)
            if delete_group:
                records.append((encode_group_metadata_key(gid), None))
            if not records or not self._write_expiry(gid, records, expired, stored):
                continue
            removed += len(expired)
            if delete_group:
                self._drop_group(group)
                log.info("group %s expired: empty and without offsets", gid)
        return removed + self._expire_consumer_group_offsets(now, retention)

    def _write_expiry(self, group_id: str, records: list[Record], expired: list[tuple[str, int]],
                      stored: dict[tuple[str, int], OffsetAndMetadata]) -> bool:
        """Write an expiry's tombstones; the offsets are forgotten only once they are in the log."""
        try:
            self._write(group_id, records)
        except KafkaError as e:
            log.warning("failed to expire offsets of group %s: %s", group_id, e)
            return False
        for key in expired:
            stored.pop(key, None)
        return True

    def _expire_consumer_group_offsets(self, now: int, retention: int) -> int:
        """Consumer groups: an offset of a topic no member subscribes to expires ``retention`` after its
        commit (Kafka's ``ConsumerGroup.offsetExpirationCondition``); an empty group left without offsets
        is deleted with them."""
        removed = 0
        for gid, group in list(self.consumer.groups.items()):
            stored = self.offsets.get(gid, {})
            subscribed = group.subscribed_topic_names()
            expired = [(t, p) for (t, p), om in stored.items() if t not in subscribed and (
                now >= om.expire_timestamp if om.expire_timestamp >= 0 else now - om.commit_timestamp >= retention)]
            delete_group = not group.members and len(expired) == len(stored) and not self.has_pending_txn_offsets(gid)
            records: list[Record] = [(encode_offset_commit_key(gid, t, p), None) for t, p in expired]
            if delete_group:
                records += self.consumer.encode(self.consumer.group_tombstones(group))
            if (not expired and not delete_group) or not self._write_expiry(gid, records, expired, stored):
                continue
            removed += len(expired)
            if delete_group:
                self.consumer.unload(lambda g, gid=gid: g == gid)  # type: ignore[misc]
                self.offsets.pop(gid, None)
                log.info("consumer group %s expired: empty and without offsets", gid)
        return removed

    # -- loading and unloading ----------------------------------------------------------------

    def replay(self, key: bytes | None, value: bytes | None, batch_offset: int = NO_APPEND_OFFSET,
               producer_id: int = NO_PRODUCER_ID) -> None:
        """Apply one ``__consumer_offsets`` record read back from the log (last write per key wins).

        ``batch_offset`` is the base offset of the record's batch; ``producer_id`` is set for a record of
        a transactional batch, whose offsets stay pending until :meth:`replay_txn_marker`.
        """
        if key is None:
            return
        k = decode_key(key)
        if isinstance(k, OffsetCommitKey):
            tp = (k.topic, k.partition)
            if producer_id != NO_PRODUCER_ID:
                self._replay_txn_offset(k.group, tp, value, batch_offset, producer_id)
                return
            if value is None:
                stored = self.offsets.get(k.group)
                if stored is not None:
                    stored.pop(tp, None)
                return
            v = decode_offset_commit_value(value)
            if k.group not in self.groups and k.group not in self.consumer.groups:  # without membership: simple
                self.groups[k.group] = ClassicGroup(k.group, self._now())
            self.offsets.setdefault(k.group, {})[tp] = OffsetAndMetadata(
                v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp, batch_offset)
        elif isinstance(k, GroupMetadataKey):
            if value is None:
                self.groups.pop(k.group, None)
                return
            self.groups[k.group] = self._group_from_record(k.group, decode_group_metadata_value(value))
        else:
            modern = modern_records.decode_key(key)
            if modern is None:
                return  # share or streams group records: not coordinated here
            if isinstance(modern, CONSUMER_GROUP_KEYS):
                self.consumer.apply(modern, None if value is None
                                    else modern_records.decode_value(modern.RECORD_TYPE, value))
            else:  # share-group records (types 10-15)
                self.share.apply(modern, None if value is None
                                 else modern_records.decode_value(modern.RECORD_TYPE, value))
                if value is not None and modern.group_id in self.groups and not self.groups[modern.group_id].members:
                    self.groups.pop(modern.group_id, None)  # an offsets-only group the consumer group replaced

    def _replay_txn_offset(self, group_id: str, tp: tuple[str, int], value: bytes | None, batch_offset: int,
                           producer_id: int) -> None:
        """As Kafka's loader: a transactional offset is pending for its producer (a tombstone unstages it)."""
        if value is None:
            by_producer = self.pending_txn_offsets.get(group_id)
            if by_producer is not None and producer_id in by_producer:
                by_producer[producer_id].pop(tp, None)
            return
        v = decode_offset_commit_value(value)
        if group_id not in self.groups and group_id not in self.consumer.groups:  # as for plain offsets
            self.groups[group_id] = ClassicGroup(group_id, self._now())
        self.pending_txn_offsets.setdefault(group_id, {}).setdefault(producer_id, {})[tp] = OffsetAndMetadata(
            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp, batch_offset)
        self.open_groups_for_producer.setdefault(producer_id, set()).add(group_id)

    def replay_txn_marker(self, producer_id: int, commit: bool, which: Callable[[str], bool]) -> None:
        """A COMMIT or ABORT marker of ``producer_id`` read back from the partition of the groups ``which``
        selects: complete its pending offsets there exactly as the live marker does."""
        for gid in [g for g in self.open_groups_for_producer.get(producer_id, ()) if which(g)]:
            self._complete_pending_txn_offset_commit(gid, producer_id, commit)

    def _group_from_record(self, group_id: str, v: GroupMetadataValue) -> ClassicGroup:
        group = ClassicGroup(group_id, self._now(), state=STABLE if v.members else EMPTY, generation=v.generation,
                             protocol_type=v.protocol_type or None, protocol_name=v.protocol, leader_id=v.leader,
                             current_state_timestamp=None if v.current_state_timestamp == -1
                             else v.current_state_timestamp)
        for m in v.members:
            group.add(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                             m.session_timeout if m.rebalance_timeout == -1 else m.rebalance_timeout,
                             m.session_timeout, v.protocol_type, ((v.protocol or "", m.subscription),),
                             m.assignment))
        group.subscribed = group.compute_subscribed_topics()
        return group

    def on_loaded(self, group_ids: set[str] | None = None) -> None:
        """After replay: loaded members must heartbeat within their session timeout or be removed."""
        self.consumer.on_loaded(group_ids)
        self.share.on_loaded(group_ids)
        for group in [g for g in self.groups.values() if group_ids is None or g.group_id in group_ids]:
            for m in list(group.members.values()):
                self._reschedule_heartbeat(group, m)
            if group.is_in(STABLE) and len(group.members) > self.config.max_size:
                self._prepare_rebalance(group, f"freshly-loaded group is over capacity ({self.config.max_size})")
        log.info("loaded %d groups, %d committed offsets and %d pending transactional offsets", len(self.groups),
                 sum(len(o) for o in self.offsets.values()),
                 sum(len(p) for by_producer in self.pending_txn_offsets.values() for p in by_producer.values()))

    def unload_groups(self, which: Callable[[str], bool]) -> int:
        """Another broker coordinates these groups now (Kafka's ``removeGroupsForPartition``): parked
        requests get NOT_COORDINATOR, their timers stop, their state is forgotten here."""
        doomed = [gid for gid in set(self.groups) | set(self.offsets) | set(self.pending_txn_offsets)
                  | set(self.consumer.groups) | set(self.share.groups) if which(gid)]
        self.consumer.unload(which)
        self.share.unload(which)
        for gid in doomed:
            group = self.groups.pop(gid, None)
            if group is not None:
                group.complete_all(ErrorCode.NOT_COORDINATOR)
                for member_id in list(group.members):
                    self.timer.cancel(self._heartbeat_key(gid, member_id))
                self.timer.cancel(self._join_key(gid))
                self.timer.cancel(self._sync_key(gid))
            self.offsets.pop(gid, None)
            self._forget_pending_txn_offsets(gid)
        return len(doomed)

    def unload(self) -> None:
        """Coordinator shutdown: parked requests get NOT_COORDINATOR and every timer stops."""
        self.timer.cancel_all()
        for group in list(self.groups.values()):
            group.complete_all(ErrorCode.NOT_COORDINATOR)
        self.groups.clear()
        self.consumer.unload(lambda _gid: True)
        self.share.unload(lambda _gid: True)
        self.offsets.clear()
        self.pending_txn_offsets.clear()
        self.open_groups_for_producer.clear()


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current

