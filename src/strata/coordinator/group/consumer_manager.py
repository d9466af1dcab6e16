"""KIP-848 consumer groups driven by ConsumerGroupHeartbeat (Kafka's ``GroupMetadataManager``, consumer part).

Every change is a record first. A heartbeat computes, from the group as it is, the records its
outcome needs (member metadata, group epoch, target assignment, current assignment; tombstones when a
member goes), appends them as one batch to the group's ``__consumer_offsets`` partition, and only
then applies them, through the same :meth:`ConsumerGroupManager.apply` that replays them when a
coordinator loads the partition. So what a member was told is exactly what a new coordinator
rebuilds after a failover, and a failed append changes nothing (the member retries).

Timers: a session timer per member (the group's ``consumer.session.timeout.ms``, re-armed by each
heartbeat) fences a member that stops heartbeating; a rebalance timer (the member's
``RebalanceTimeoutMs``, armed while it is asked to revoke) fences one that does not give partitions up.
Fencing removes the member and bumps the group epoch, so the others receive its partitions.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID, uuid4

from strata.config.group_config import ConsumerGroupConfig, GroupSettings
from strata.coordinator.group import modern_records as mr
from strata.coordinator.group.assignors import MemberSpec, assignor
from strata.coordinator.group.classic import GroupError
from strata.coordinator.group.consumer import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    FencedMember,
    MemberState,
    ResolvedRegex,
    is_subset,
    normalized,
    reconcile,
    topic_metadata_hash,
)
from strata.coordinator.group.records import (
    decode_assignment_partitions,
    decode_subscription,
    encode_assignment,
    encode_group_metadata_key,
)
from strata.errors import CorruptRecordError, ErrorCode, KafkaError

if TYPE_CHECKING:
    from strata.common import Clock
    from strata.coordinator.group.timer import Timer

log = logging.getLogger("strata.coordinator.group")

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
REGEX_MIN_REFRESH_MS = 10_000  # Kafka resolves a group's regular expressions at most this often

Record = tuple[bytes, bytes | None]
Change = tuple[Any, Any]  # (key record, value record or None for a tombstone)
Response = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ClassicGroupTombstone:
    """The classic group record of an empty classic group this consumer group replaces (offline upgrade)."""

    group_id: str


class TopicsView(Protocol):
    """What the coordinator needs of the broker's topics: names to ids and sizes, and back."""

    def topic(self, name: str) -> tuple[UUID, int] | None: ...

    def name_of(self, topic_id: UUID) -> str | None: ...

    def names(self) -> Iterable[str]: ...


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    # A classic member joining a consumer group (JoinGroup): its protocols and session timeout. Its epoch is
    # not checked (the generation answers for it) and it joins the existing group only.
    classic: ClassicMemberMetadata | None = None
    unknown_member: bool = False  # JoinGroup without a member id (a static member may replace its old self)


def to_topic_partitions(assignment: Assignment) -> tuple[mr.TopicPartitions, ...]:
    return tuple(mr.TopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if ps)


def to_topic_partitions_with_epochs(assignment: Assignment,
                                    epochs: Mapping[tuple[UUID, int], int]) -> tuple[mr.TopicPartitions, ...]:
    """Type 8's TopicPartitions with Kafka 4.3's AssignmentEpochs (KIP-1251)."""
    out = []
    for t, ps in sorted(assignment.items()):
        if ps:
            ordered = tuple(sorted(ps))
            out.append(mr.TopicPartitions(t, ordered, tuple(epochs[(t, p)] for p in ordered)))
    return tuple(out)


def epochs_from_topic_partitions(*lists: Iterable[mr.TopicPartitions]) -> dict[tuple[UUID, int], int]:
    """The assignment epochs a type-8 record carries (none for a record of a Kafka before 4.3)."""
    return {(tp.topic_id, p): e for tps in lists for tp in tps if tp.assignment_epochs is not None
            for p, e in zip(tp.partitions, tp.assignment_epochs, strict=True)}


def from_topic_partitions(tps: Iterable[mr.TopicPartitions]) -> dict[UUID, frozenset[int]]:
    out: dict[UUID, frozenset[int]] = {}
    for tp in tps:
        out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def compile_regex(regex: str) -> re.Pattern[str]:
    """A subscription regex as the client meant it: matched against whole topic names (Kafka uses RE2J's
    ``matches``). Python's syntax is a superset of RE2's for what clients send; raises GroupError
    INVALID_REGULAR_EXPRESSION for one that does not compile."""
    try:
        return re.compile(regex)
    except re.error as e:
        raise GroupError(ErrorCode.INVALID_REGULAR_EXPRESSION, f"Invalid regular expression {regex!r}: {e}") from e


UNRELEASED_HEARTBEAT_FLOOR_MS = 50


class ConsumerGroupManager:
    """The consumer groups of this coordinator; shares the id namespace and offsets with the classic ones."""

    def __init__(self, config: ConsumerGroupConfig, timer: Timer, clock: Clock, topics: TopicsView,
                 write: Callable[[str, list[Record]], Any],
                 settings: Callable[[str], GroupSettings] | None = None,
                 classic_groups: Callable[[], Mapping[str, Any]] | None = None,
                 drop_classic: Callable[[str], None] | None = None,
                 downgrade: Callable[[ConsumerGroup, set[str]], bool] | None = None,
                 classic_max_size: int = 2**31 - 1) -> None:
        self.config = config
        self.timer = timer
        self.clock = clock
        self.topics = topics
        self._write = write
        self._settings = settings or (lambda _group_id: GroupSettings(config.session_timeout_ms,
                                                                       config.heartbeat_interval_ms))
        self._classic_groups = classic_groups or (dict)
        self._drop_classic = drop_classic or (lambda _group_id: None)
        self._downgrade = downgrade or (lambda _group, _leaving: False)
        self._is_share_group: Callable[[str], bool] = lambda _group_id: False  # set by the owner
        self.classic_max_size = classic_max_size
        self.groups: dict[str, ConsumerGroup] = {}
        self.rebalances = 0  # group epoch bumps, for the metrics
        # (group, member) -> the member epoch last sent to the member, and when (ms): in memory only (after a
        # failover a member is moved on silently again once it has heartbeated; see _advance_unchanged)
        self._told: dict[tuple[str, str], int] = {}
        self._heard: dict[tuple[str, str], int] = {}

    # -- ids and lookups ------------------------------------------------------------------------

    def _now(self) -> int:
        return self.clock.milliseconds()

    @staticmethod
    def _session_key(group_id: str, member_id: str) -> Hashable:
        return ("consumer-session", group_id, member_id)

    @staticmethod
    def _rebalance_key(group_id: str, member_id: str) -> Hashable:
        return ("consumer-rebalance", group_id, member_id)

    def settings(self, group_id: str) -> GroupSettings:
        return self._settings(group_id)

    def topic_ids(self, names: Iterable[str]) -> set[UUID]:
        out = set()
        for name in names:
            found = self.topics.topic(name)
            if found is not None:
                out.add(found[0])
        return out

    # -- ConsumerGroupHeartbeat --------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest, can_describe: Callable[[str], bool] = lambda _t: True) -> Response:
        """One heartbeat's answer; raises GroupError with the error the client must see."""
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(req)
        changes: list[Change] = []
        joining = req.member_epoch == 0 or req.classic is not None
        group = self._group_for_heartbeat(req.group_id, req.member_epoch == 0, changes)
        if req.member_id not in group.members and len(group.members) >= self.config.max_size:
            raise GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                             f"The consumer group has reached its maximum capacity of {self.config.max_size} members.")
        member, replaced = self._member_for_heartbeat(group, req, joining, changes)
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names)))
            if req.subscribed_topic_names is not None else member.subscribed_topic_names,
            subscribed_topic_regex=req.subscribed_topic_regex if req.subscribed_topic_regex is not None
            else member.subscribed_topic_regex,
            client_id=req.client_id, client_host=req.client_host, classic=req.classic)
        if updated.subscribed_topic_regex == "":
            updated = replace(updated, subscribed_topic_regex=None)
        new_member = req.member_id not in group.members
        if new_member or not updated.metadata_equals(member):
            changes.append(self._member_metadata(group.group_id, updated))
        names_changed = updated.subscribed_topic_names != member.subscribed_topic_names
        regexes, regex_bump, regex_refresh = self._regexes_after(group, member, updated, changes)
        regex_changed = updated.subscribed_topic_regex != member.subscribed_topic_regex
        subscription_changed = names_changed or regex_changed

        # The group as it will be: the members' subscriptions decide the epoch and the assignment.
        members = dict(group.members)
        if replaced is not None:
            members.pop(replaced, None)
        members[updated.member_id] = updated
        subscribed_names = self._subscribed_names(members.values(), regexes)
        metadata_hash = self._metadata_hash(subscribed_names)
        group_epoch = group.group_epoch
        bumped = False
        if (group_epoch == 0 and req.classic is None) or names_changed or regex_bump \
                or metadata_hash != group.metadata_hash:
            group_epoch += 1
            bumped = True
            changes.append((mr.ConsumerGroupMetadataKey(group.group_id),
                            mr.ConsumerGroupMetadataValue(epoch=group_epoch, metadata_hash=metadata_hash)))
            log.info("consumer group %s epoch %d (member %s%s)", group.group_id, group_epoch, updated.member_id,
                     " joined" if new_member else "")

        targets = dict(group.target)
        if replaced is not None:  # a static member replaced: it inherits the old target
            targets[updated.member_id] = targets.pop(replaced, {})
        target_epoch = group.assignment_epoch
        if group_epoch > group.assignment_epoch:
            targets = self._assign(group, members, regexes, targets, changes)
            target_epoch = group_epoch
            changes.append((mr.ConsumerGroupTargetAssignmentMetadataKey(group.group_id),
                            mr.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=target_epoch)))
            changes.extend(self._advance_unchanged(group, members, targets, target_epoch, updated.member_id))

        subscribed_ids = self.topic_ids(self._member_names(updated, regexes))
        try:
            reconciled = updated if not subscription_changed and updated.is_reconciled_to(target_epoch) else reconcile(
                updated, target_epoch, targets.get(updated.member_id, {}), subscribed_ids,
                group.current_partition_epoch, req.owned, subscription_changed)
        except FencedMember as e:
            raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH, str(e)) from e
        assignment_changed = not reconciled.assignment_equals(member) or new_member
        if assignment_changed:
            changes.append(self._current_assignment(group.group_id, reconciled))

        self._commit(group.group_id, changes)
        if regex_refresh:  # only once written: the resolution reads the group as this heartbeat left it
            self._schedule_regex_refresh(group.group_id, can_describe)
        self.rebalances += bumped
        group = self.groups[group.group_id]
        self._after_reconcile(group, reconciled, assignment_changed)
        self._schedule_session_timeout(group.group_id, reconciled.member_id)
        if replaced is not None:
            self.timer.cancel(self._session_key(group.group_id, replaced))
            self.timer.cancel(self._rebalance_key(group.group_id, replaced))
        if any(isinstance(key, ClassicGroupTombstone) for key, _ in changes):  # upgraded: its members' sessions
            for m in group.members.values():
                if m.classic is not None and m.member_id != reconciled.member_id:
                    self._schedule_session_timeout(group.group_id, m.member_id)
        key = (group.group_id, reconciled.member_id)
        self._told[key] = reconciled.member_epoch
        self._heard[key] = self._now()
        response: Response = {"member_id": reconciled.member_id, "member_epoch": reconciled.member_epoch,
                              "heartbeat_interval": self._heartbeat_interval(group.group_id, reconciled),
                              "assignment": None}
        full = req.rebalance_timeout_ms != -1 and (req.subscribed_topic_names is not None
                                                   or req.subscribed_topic_regex is not None) \
            and req.owned is not None
        if joining or full or normalized(reconciled.assigned) != normalized(member.assigned) or new_member \
                or req.member_epoch != reconciled.member_epoch:
            response["assignment"] = {"topic_partitions": [
                {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(reconciled.assigned.items()) if ps]}
        return response

    def _heartbeat_interval(self, group_id: str, member: ConsumerGroupMember) -> int:
        """The group's heartbeat interval; a tenth of it (at least 50 ms) while the member waits for partitions
        another member is still releasing: it receives them within a short poll of their release instead of a
        whole interval later. Clients take the interval of every response (librdkafka, the Java client)."""
        interval = self.settings(group_id).heartbeat_interval_ms
        if member.state is MemberState.UNRELEASED_PARTITIONS:
            return min(interval, max(interval // 10, UNRELEASED_HEARTBEAT_FLOOR_MS))
        return interval

    def _advance_unchanged(self, group: ConsumerGroup, members: Mapping[str, ConsumerGroupMember],
                           targets: Mapping[str, Assignment], target_epoch: int, heartbeating: str) -> list[Change]:
        """Members whose new target is exactly what they hold move to the target epoch now, without waiting
        for their next heartbeat: the group is Stable as soon as the members that do change have reconciled.

        Only a consumer-protocol member that is STABLE at the previous assignment epoch and was told its
        current epoch (this coordinator answered it since; after a failover, once it heartbeats) moves. Its
        next heartbeat still carries the epoch it knows, now the previous one, and is accepted because its
        assignment has not changed since (``knows_its_assignment_at``); a commit at that epoch is accepted
        because every partition's assignment epoch (KIP-1251) is at or below it."""
        out: list[Change] = []
        for mid, m in members.items():
            if mid == heartbeating or m.uses_classic_protocol or not m.is_reconciled_to(group.assignment_epoch) \
                    or self._told.get((group.group_id, mid)) != m.member_epoch \
                    or normalized(targets.get(mid, {})) != normalized(m.assigned):
                continue
            advanced = replace(m.with_epoch(target_epoch), assignment_epochs=m.held_epochs())
            out.append(self._current_assignment(group.group_id, advanced))
        return out

    def _group_for_heartbeat(self, group_id: str, create: bool, changes: list[Change]) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None and not group.dead:
            return group
        if self._is_share_group(group_id):
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        classic = self._classic_groups().get(group_id)
        if classic is not None and not classic.is_empty and create:
            return self._upgrade(classic, changes)
        if classic is not None and not classic.is_empty:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if not create:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        if classic is not None:
            # An empty classic group (or one that only holds committed offsets) becomes a consumer group;
            # its offsets stay (Kafka's offline migration).
            changes.append((ClassicGroupTombstone(group_id), None))
        return ConsumerGroup(group_id)

    def _member_for_heartbeat(self, group: ConsumerGroup, req: HeartbeatRequest, joining: bool,
                              changes: list[Change]) -> tuple[ConsumerGroupMember, str | None]:
        """The member as it is (a new one when joining) and the id of a static member it replaces."""
        if req.classic is not None:
            return self._classic_member(group, req, changes)
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                if not joining:
                    raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {req.member_id} is not a member of group {group.group_id}.")
                log.info("member %s joins consumer group %s", req.member_id, group.group_id)
                return ConsumerGroupMember(req.member_id), None
            self._check_epoch(member, req)
            return member, None
        existing = group.static_member(req.instance_id)
        if joining:
            if existing is None:
                member = group.members.get(req.member_id)
                return (member if member is not None else ConsumerGroupMember(req.member_id)), None
            if existing.member_id == req.member_id:
                return existing, None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and not existing.uses_classic_protocol:
                raise GroupError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                 f"Static member {existing.member_id} with instance id {req.instance_id} is still "
                                 f"active in group {group.group_id}; the new member {req.member_id} cannot use it.")
            return self._replace_static(group, existing, req.member_id, changes), existing.member_id
        member = self._known_static(existing, req)
        self._check_epoch(member, req)
        return member, None

    def _replace_static(self, group: ConsumerGroup, existing: ConsumerGroupMember, member_id: str,
                        changes: list[Change]) -> ConsumerGroupMember:
        """Kafka's ``replaceMember``: the static member's new id takes over its old self and its target."""
        log.info("static member %s of consumer group %s rejoins as %s", existing.instance_id, group.group_id,
                 member_id)
        changes.extend(self._member_tombstones(group.group_id, existing.member_id))
        changes.append((mr.ConsumerGroupTargetAssignmentMemberKey(group.group_id, member_id),
                        mr.ConsumerGroupTargetAssignmentMemberValue(
                            topic_partitions=to_topic_partitions(group.target_of(existing.member_id)))))
        return replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)

    @staticmethod
    def _known_static(existing: ConsumerGroupMember | None, req: HeartbeatRequest) -> ConsumerGroupMember:
        """The static member a heartbeat or JoinGroup names with its own member id."""
        if existing is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != req.member_id:
            raise GroupError(ErrorCode.FENCED_INSTANCE_ID,
                             f"Static member {req.member_id} with instance id {req.instance_id} was replaced by "
                             f"{existing.member_id}.")
        return existing

    def _classic_member(self, group: ConsumerGroup, req: HeartbeatRequest,
                        changes: list[Change]) -> tuple[ConsumerGroupMember, str | None]:
        """Kafka's member lookup for a classic JoinGroup to a consumer group: created when new, a static member
        replacing its old self (no UNRELEASED_INSTANCE_ID: one of them speaks the classic protocol)."""
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                log.info("member %s joins consumer group %s with the classic protocol", req.member_id, group.group_id)
                return ConsumerGroupMember(req.member_id), None
            return member, None
        existing = group.static_member(req.instance_id)
        if req.unknown_member:
            if existing is None:
                return ConsumerGroupMember(req.member_id), None
            return self._replace_static(group, existing, req.member_id, changes), existing.member_id
        return self._known_static(existing, req), None

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, req: HeartbeatRequest) -> None:
        """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid`` (4.2: epoch 0 always rejoins)."""
        epoch = req.member_epoch
        if epoch == 0:
            return
        if epoch > member.member_epoch:
            raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The consumer group member has a greater member epoch ({epoch}) than the one known "
                             f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                             "partitions and rejoin.")
        if epoch < member.member_epoch and (epoch != member.previous_member_epoch or not (
                is_subset(req.owned, member.assigned)
                or (req.owned is None and member.knows_its_assignment_at(epoch)))):
            raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The consumer group member has a smaller member epoch ({epoch}) than the one known "
                             f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                             "partitions and rejoin.")

    # -- online upgrade: a classic group with members becomes a consumer group ----------------------------

    def _upgrade(self, classic: Any, changes: list[Change]) -> ConsumerGroup:
        """Kafka's ``convertToConsumerGroup``: every classic member becomes a classic-protocol member of a new
        consumer group at the classic generation, STABLE with its last assignment (its target too), so nothing
        moves until the joining member's epoch bump. The records (classic tombstone first) are added to
        ``changes``; the group returned is what applying them will build, for the rest of the heartbeat.
        Raises GROUP_ID_NOT_FOUND when the group cannot be upgraded (policy, protocol, size, custom assignor)."""
        gid = classic.group_id
        if self.config.migration_policy not in ("bidirectional", "upgrade"):
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid} to consumer group "
                                                           "because online upgrade is disabled.")
        if not classic.uses_consumer_protocol():
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid} to consumer group "
                                                           "because the group does not use the consumer embedded "
                                                           "protocol.")
        if len(classic.members) > self.config.max_size:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid} to consumer group "
                                                           "because the group size exceeds the consumer group "
                                                           "maximum size.")
        generation = classic.generation
        converted: list[Change] = [(ClassicGroupTombstone(gid), None),
                                   (mr.ConsumerGroupMetadataKey(gid), mr.ConsumerGroupMetadataValue(epoch=generation)),
                                   (mr.ConsumerGroupTargetAssignmentMetadataKey(gid),
                                    mr.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=generation))]
        for m in classic.members.values():
            try:
                subscription = decode_subscription(m.metadata(classic.protocol_name))
                assigned = decode_assignment_partitions(m.assignment) if m.assignment else {}
            except (CorruptRecordError, ValueError) as e:
                raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND,
                                 f"Cannot upgrade classic group {gid} to consumer group: {e}") from None
            ids: dict[UUID, frozenset[int]] = {}
            for topic, partitions in assigned.items():
                found = self.topics.topic(topic)
                if found is not None and partitions:
                    ids[found[0]] = frozenset(partitions)
            member = ConsumerGroupMember(
                m.member_id, instance_id=m.group_instance_id, rack_id=subscription.rack_id, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)),
                member_epoch=generation, previous_member_epoch=generation, assigned=ids)
            converted += [self._member_metadata(gid, member),
                          (mr.ConsumerGroupTargetAssignmentMemberKey(gid, m.member_id),
                           mr.ConsumerGroupTargetAssignmentMemberValue(topic_partitions=to_topic_partitions(ids))),
                          self._current_assignment(gid, member)]
        group = ConsumerGroup(gid)
        for key, value in converted[1:]:
            apply_to(group, key, value)
        changes.extend(converted)
        log.info("classic group %s (generation %d, %d members) is converted to a consumer group", gid, generation,
                 len(classic.members))
        return group

    # -- classic members of a consumer group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) ---------------

    @staticmethod
    def _join_key(group_id: str, member_id: str) -> Hashable:
        return ("consumer-classic-join", group_id, member_id)

    @staticmethod
    def _sync_key(group_id: str, member_id: str) -> Hashable:
        return ("consumer-classic-sync", group_id, member_id)

    def classic_join(self, group_id: str, member_id: str, instance_id: str | None, protocol_type: str,
                     protocols: tuple[tuple[str, bytes], ...], session_timeout_ms: int, rebalance_timeout_ms: int,
                     client_id: str, client_host: str, requires_known_member_id: bool) -> Response:
        """Kafka's ``classicGroupJoinToConsumerGroup``: answered at once (no join phase), with the member epoch
        as the generation and no leader: the coordinator assigns, the member only syncs."""
        group = self.groups[group_id]
        if self.config.migration_policy == "disabled":
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"Cannot join the consumer group {group_id} with the classic protocol because the "
                             "group migration is disabled.")
        unknown = member_id == ""
        if unknown:
            member_id = str(uuid4())
        if member_id not in group.members and len(group.members) >= self.config.max_size:
            raise GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                             f"The consumer group has reached its maximum capacity of {self.config.max_size} members.")
        if protocol_type != "consumer" or not protocols:
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"The classic member's protocol type {protocol_type!r} is not 'consumer'.")
        if unknown and instance_id is None and requires_known_member_id:
            return {"error_code": ErrorCode.MEMBER_ID_REQUIRED, "member_id": member_id}
        try:
            subscription = decode_subscription(protocols[0][1])
        except CorruptRecordError as e:
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Unreadable consumer subscription: {e}") from None
        owned: dict[UUID, frozenset[int]] = {}
        for topic, partitions in subscription.owned_partitions:
            found = self.topics.topic(topic)
            if found is not None and partitions:
                owned[found[0]] = owned.get(found[0], frozenset()) | frozenset(partitions)
        answer = self.heartbeat(HeartbeatRequest(
            group_id=group_id, member_id=member_id, member_epoch=-3, instance_id=instance_id,
            rack_id=subscription.rack_id, rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=subscription.topics, subscribed_topic_regex="", owned=owned,
            client_id=client_id, client_host=client_host,
            classic=ClassicMemberMetadata(session_timeout_ms, tuple(protocols)), unknown_member=unknown))
        self.timer.cancel(self._join_key(group_id, member_id))
        self._schedule_classic_sync_timeout(group_id, member_id, rebalance_timeout_ms)
        return {"error_code": ErrorCode.NONE, "member_id": member_id, "generation_id": answer["member_epoch"],
                "protocol_type": "consumer", "protocol_name": protocols[0][0]}

    def _classic_member_of(self, group_id: str, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
        group = self.groups[group_id]
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member with instance id {instance_id} is not a member of group {group_id}.")
            if member.member_id != member_id:
                raise GroupError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                                               f"{instance_id} was replaced.")
        if member.classic is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} does not use the classic protocol.")
        return member

    def classic_sync(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
                     protocol_type: str | None, protocol_name: str | None) -> bytes:
        """Kafka's ``classicGroupSyncToConsumerGroup``: the member's current assignment, as ConsumerProtocol bytes."""
        group = self.groups[group_id]
        member = self._classic_member_of(group_id, member_id, instance_id)
        if generation != member.member_epoch:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION, f"The generation id {generation} is not equal to the "
                                                           f"member epoch {member.member_epoch}.")
        assert member.classic is not None
        names = [name for name, _ in member.classic.protocols]
        if (protocol_type is not None and protocol_type != "consumer") or (
                protocol_name is not None and protocol_name not in names[:1]):
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "The protocol type or name does not match.")
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._schedule_classic_join_timeout(group_id, member_id, member.rebalance_timeout_ms)
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS,
                             f"A new rebalance is triggered in group {group_id} and member {member_id} should "
                             "rejoin to catch up.")
        self.timer.cancel(self._sync_key(group_id, member_id))
        self._schedule_session_timeout(group_id, member_id)
        partitions: dict[str, list[int]] = {}
        for topic_id, ps in member.assigned.items():
            name = self.topics.name_of(topic_id)
            if name is not None and ps:
                partitions[name] = sorted(ps)
        try:
            version = decode_subscription(member.classic.protocols[0][1]).version
        except CorruptRecordError:
            version = 0
        return encode_assignment(partitions, version)

    def classic_heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> int:
        """Kafka's ``classicGroupHeartbeatToConsumerGroup``: REBALANCE_IN_PROGRESS when the member must rejoin
        (a new group epoch, partitions to revoke, or released partitions now waiting for it)."""
        group = self.groups[group_id]
        member = self._classic_member_of(group_id, member_id, instance_id)
        if generation != member.member_epoch:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION, f"The generation id {generation} is not equal to the "
                                                           f"member epoch {member.member_epoch}.")
        self._schedule_session_timeout(group_id, member_id)
        if member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS or (
                member.state is MemberState.UNRELEASED_PARTITIONS and not self._waiting_on_unreleased(group, member)):
            self._schedule_classic_join_timeout(group_id, member_id, member.rebalance_timeout_ms)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    @staticmethod
    def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """Kafka's ``waitingOnUnreleasedPartition``: a partition of its target still held by another member."""
        for topic_id, partitions in group.target_of(member.member_id).items():
            mine = member.assigned.get(topic_id, frozenset())
            if any(p not in mine and group.current_partition_epoch(topic_id, p) != -1 for p in partitions):
                return True
        return False

    def classic_leave(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> list[Response]:
        """Kafka's ``classicGroupLeaveToConsumerGroup``: ``members`` are (member id, instance id); an admin may name
        a static member by instance id alone. The valid ones are fenced together."""
        group = self.groups[group_id]
        results: list[Response] = []
        leaving: list[str] = []
        for member_id, instance_id in members:
            code: int = ErrorCode.NONE
            if instance_id is None:
                if member_id in group.members:
                    leaving.append(member_id)
                else:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                m = group.static_member(instance_id)
                if m is None:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id and member_id != m.member_id:
                    code = ErrorCode.FENCED_INSTANCE_ID
                else:
                    leaving.append(m.member_id)
            results.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": code})
        if leaving:
            self.fence_members(group, leaving)
        return results

    def _schedule_classic_join_timeout(self, group_id: str, member_id: str, timeout_ms: int) -> None:
        key = self._join_key(group_id, member_id)
        if not self.timer.is_scheduled(key):
            self.timer.schedule(key, max(timeout_ms, 0), lambda: self._classic_timeout(group_id, member_id, "join"))

    def _schedule_classic_sync_timeout(self, group_id: str, member_id: str, timeout_ms: int) -> None:
        self.timer.schedule(self._sync_key(group_id, member_id), max(timeout_ms, 0),
                            lambda: self._classic_timeout(group_id, member_id, "sync"))

    def _classic_timeout(self, group_id: str, member_id: str, what: str) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return
        log.info("classic member %s of consumer group %s did not %s within its rebalance timeout, fencing it",
                 member_id, group_id, "rejoin" if what == "join" else "sync")
        try:
            self.fence_members(group, [member_id])
        except KafkaError as e:
            log.warning("could not fence member %s of consumer group %s: %s", member_id, group_id, e)

    # -- regular expressions ------------------------------------------------------------------------

    def _regexes_after(self, group: ConsumerGroup, old: ConsumerGroupMember, new: ConsumerGroupMember,
                       changes: list[Change]) -> tuple[dict[str, ResolvedRegex], bool, bool]:
        """Kafka's ``maybeUpdateRegularExpressions``: (the group's resolved regexes once this heartbeat is
        applied, whether the member's regex changed to one already resolved or was dropped (the epoch must
        bump), whether a resolution should be started).

        Resolution is asynchronous, as in Kafka: a regex no member used before matches nothing until
        :meth:`_refresh_regexes` (started after the heartbeat's records are written) has resolved it and
        bumped the group epoch, and the member gets those partitions on a later heartbeat. A regex its last
        subscriber dropped is tombstoned here.
        """
        old_regex, new_regex = old.subscribed_topic_regex, new.subscribed_topic_regex
        others = [m.subscribed_topic_regex for m in group.members.values()
                  if m.member_id != old.member_id and m.subscribed_topic_regex]
        regexes = group.resolved_regexes
        bump = False
        if old_regex != new_regex:
            if old_regex and old_regex not in others and old_regex in regexes:
                regexes = {r: v for r, v in regexes.items() if r != old_regex}
                changes.append((mr.ConsumerGroupRegularExpressionKey(group.group_id, old_regex), None))
            if new_regex:
                compile_regex(new_regex)
                bump = new_regex in regexes
            elif old_regex:
                bump = True
        in_use = set(others) | ({new_regex} if new_regex else set())
        return regexes, bump, bool(in_use) and self._regexes_stale(group, in_use)

    def _regexes_stale(self, group: ConsumerGroup, in_use: set[str]) -> bool:
        """Whether the group's regexes should be resolved again: one is unresolved, the topics changed since
        (checked at most every 10 s, Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS), or the last resolution is
        older than ``group.consumer.regex.refresh.interval.ms``."""
        if self.timer.is_scheduled(self._regex_key(group.group_id)):
            return False
        last = max((r.timestamp_ms for r in group.resolved_regexes.values()), default=0)
        now = self._now()
        if now <= last + REGEX_MIN_REFRESH_MS:
            return False
        if any(r not in group.resolved_regexes for r in in_use):
            return True
        version = self._topics_version()
        return any(r.version != version for r in group.resolved_regexes.values()) \
            or now > last + self.config.regex_refresh_interval_ms

    def _topics_version(self) -> int:
        """A digest of the topic names: a resolution's ``version`` (Kafka stores its metadata image's)."""
        names = sorted(n for n in self.topics.names() if not n.startswith("__"))
        digest = hashlib.blake2b("\0".join(names).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") >> 1

    @staticmethod
    def _regex_key(group_id: str) -> Hashable:
        return ("consumer-regex", group_id)

    def _schedule_regex_refresh(self, group_id: str, can_describe: Callable[[str], bool]) -> None:
        key = self._regex_key(group_id)
        if not self.timer.is_scheduled(key):
            self.timer.schedule(key, 0, lambda: self._refresh_regexes(group_id, can_describe))

    def _refresh_regexes(self, group_id: str, can_describe: Callable[[str], bool]) -> None:
        """Kafka's ``refreshRegularExpressions`` + ``handleRegularExpressionsResult``: resolve every regex the
        group uses (full matches against the topic names, less the topics the member whose heartbeat started
        it may not DESCRIBE), write one record per regex and, when a topic set or the metadata hash changed,
        a group epoch bump: the members get the topics at their next heartbeats."""
        group = self.groups.get(group_id)
        if group is None or group.dead:
            return
        in_use = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}
        if not in_use:
            return
        now = self._now()
        version = self._topics_version()
        names = [n for n in self.topics.names() if not n.startswith("__")]
        changes: list[Change] = []
        regexes = dict(group.resolved_regexes)
        bump = False
        for regex in sorted(in_use):
            try:
                pattern = compile_regex(regex)
            except GroupError:
                continue
            topics = frozenset(n for n in names if pattern.fullmatch(n) and can_describe(n))
            old = regexes.get(regex)
            bump |= old is None or old.topics != topics
            regexes[regex] = ResolvedRegex(topics, version, now)
            changes.append((mr.ConsumerGroupRegularExpressionKey(group_id, regex),
                            mr.ConsumerGroupRegularExpressionValue(topics=tuple(sorted(topics)), version=version,
                                                                   timestamp=now)))
        metadata_hash = self._metadata_hash(self._subscribed_names(group.members.values(), regexes))
        if bump or metadata_hash != group.metadata_hash:
            changes.append((mr.ConsumerGroupMetadataKey(group_id),
                            mr.ConsumerGroupMetadataValue(epoch=group.group_epoch + 1, metadata_hash=metadata_hash)))
        try:
            self._commit(group_id, changes)
        except KafkaError as e:
            log.warning("could not store the regular expressions of consumer group %s: %s", group_id, e)
            return
        if bump or metadata_hash != group.metadata_hash:
            self.rebalances += 1

    # -- subscriptions, metadata, assignment ------------------------------------------------------------

    @staticmethod
    def _member_names(member: ConsumerGroupMember, regexes: Mapping[str, ResolvedRegex]) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            resolved = regexes.get(member.subscribed_topic_regex)
            if resolved is not None:
                names.update(resolved.topics)
        return names

    def _subscribed_names(self, members: Iterable[ConsumerGroupMember],
                          regexes: Mapping[str, ResolvedRegex]) -> set[str]:
        out: set[str] = set()
        for m in members:
            out |= self._member_names(m, regexes)
        return out

    def _metadata_hash(self, names: Iterable[str]) -> int:
        facts = []
        for name in names:
            found = self.topics.topic(name)
            if found is not None:
                facts.append((name, found[0], found[1]))
        return topic_metadata_hash(facts) if facts else 0

    def _assign(self, group: ConsumerGroup, members: Mapping[str, ConsumerGroupMember],
                regexes: Mapping[str, ResolvedRegex], targets: dict[str, Assignment],
                changes: list[Change]) -> dict[str, Assignment]:
        """A new target assignment for the whole group; records only for members whose target changed."""
        topics: dict[UUID, int] = {}
        specs: dict[str, MemberSpec] = {}
        # Members heard from most recently first: the uniform assignor gives the extra partitions of an uneven
        # split to the members it meets first, so a partition that must move is taken from one heard from
        # longest ago, the member that will heartbeat (and release it) soonest.
        heard = self._heard
        ordered = sorted(members.items(), key=lambda item: -heard.get((group.group_id, item[0]), 0))
        for mid, m in ordered:
            ids = set()
            for name in self._member_names(m, regexes):
                found = self.topics.topic(name)
                if found is not None:
                    ids.add(found[0])
                    topics[found[0]] = found[1]
            specs[mid] = MemberSpec(member_id=mid, instance_id=m.instance_id, rack_id=m.rack_id,
                                    subscribed_topic_ids=frozenset(ids),
                                    current={t: frozenset(ps) for t, ps in targets.get(mid, {}).items()})
        name = ConsumerGroup(group.group_id, members=dict(members)).preferred_assignor(self.config.assignors[0])
        if name not in self.config.assignors:
            name = self.config.assignors[0]
        result = assignor(name).assign(specs, topics)
        new_targets: dict[str, Assignment] = {}
        for mid in members:
            target = normalized(result.get(mid, {}))
            new_targets[mid] = target
            if normalized(targets.get(mid, {})) != target or mid not in group.target:
                changes.append((mr.ConsumerGroupTargetAssignmentMemberKey(group.group_id, mid),
                                mr.ConsumerGroupTargetAssignmentMemberValue(
                                    topic_partitions=to_topic_partitions(target))))
        return new_targets

    # -- leaving and fencing --------------------------------------------------------------------------

    def _leave(self, req: HeartbeatRequest) -> Response:
        group = self.groups.get(req.group_id)
        if group is None or group.dead:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found.")
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {req.group_id}.")
        else:
            member = group.static_member(req.instance_id)
            if member is None:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if member.member_id != req.member_id:
                raise GroupError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {req.member_id} with instance id {req.instance_id} was replaced.")
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                leaving = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
                self._commit(group.group_id, [self._current_assignment(group.group_id, leaving)])
                self.timer.cancel(self._rebalance_key(group.group_id, member.member_id))
                log.info("static member %s (%s) of consumer group %s left temporarily", member.member_id,
                         req.instance_id, group.group_id)
                return {"member_id": member.member_id, "member_epoch": LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                        "heartbeat_interval": 0, "assignment": None}
        log.info("member %s left consumer group %s", member.member_id, group.group_id)
        self.fence_members(group, [member.member_id])
        return {"member_id": req.member_id, "member_epoch": req.member_epoch, "heartbeat_interval": 0,
                "assignment": None}

    def fence_members(self, group: ConsumerGroup, member_ids: list[str]) -> None:
        """Remove members and bump the group epoch (leave, session or rebalance timeout). Raises KafkaError
        when the records cannot be written (the members then stay, and time out again).

        When only classic-protocol members remain, the group goes back to being a classic group instead
        (Kafka's online downgrade, if ``group.consumer.migration.policy`` allows it), and rebalances as one.
        """
        leaving = set(member_ids)
        remaining_members = [m for mid, m in group.members.items() if mid not in leaving]
        if remaining_members and all(m.uses_classic_protocol for m in remaining_members) \
                and self.config.migration_policy in ("bidirectional", "downgrade") \
                and len(remaining_members) <= self.classic_max_size and self._downgrade(group, leaving):
            for mid in member_ids:
                self.timer.cancel(self._session_key(group.group_id, mid))
                self.timer.cancel(self._rebalance_key(group.group_id, mid))
            return
        changes: list[Change] = []
        remaining = {mid: m for mid, m in group.members.items() if mid not in member_ids}
        for mid in member_ids:
            changes.extend(self._member_tombstones(group.group_id, mid))
        in_use = {m.subscribed_topic_regex for m in remaining.values() if m.subscribed_topic_regex}
        regexes = {r: v for r, v in group.resolved_regexes.items() if r in in_use}
        for regex in set(group.resolved_regexes) - in_use:
            changes.append((mr.ConsumerGroupRegularExpressionKey(group.group_id, regex), None))
        metadata_hash = self._metadata_hash(self._subscribed_names(remaining.values(), regexes))
        changes.append((mr.ConsumerGroupMetadataKey(group.group_id),
                        mr.ConsumerGroupMetadataValue(epoch=group.group_epoch + 1, metadata_hash=metadata_hash)))
        self._commit(group.group_id, changes)
        self.rebalances += 1
        for mid in member_ids:
            self.timer.cancel(self._session_key(group.group_id, mid))
            self.timer.cancel(self._rebalance_key(group.group_id, mid))

    def _member_tombstones(self, group_id: str, member_id: str) -> list[Change]:
        """Kafka's ``removeMember`` order: current assignment, target, then subscription."""
        return [(mr.ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
                (mr.ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
                (mr.ConsumerGroupMemberMetadataKey(group_id, member_id), None)]

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        timeout = member.classic.session_timeout_ms if member is not None and member.classic is not None \
            else self.settings(group_id).session_timeout_ms
        self.timer.schedule(self._session_key(group_id, member_id), timeout,
                            lambda: self._expire_session(group_id, member_id))

    def _expire_session(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return
        log.info("member %s of consumer group %s failed its session timeout, fencing it", member_id, group_id)
        try:
            self.fence_members(group, [member_id])
        except KafkaError as e:
            log.warning("could not fence member %s of consumer group %s: %s; retrying", member_id, group_id, e)
            self._schedule_session_timeout(group_id, member_id)

    def _after_reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember, changed: bool) -> None:
        if not changed or member.uses_classic_protocol:  # classic members have join and sync timers instead
            return
        key = self._rebalance_key(group.group_id, member.member_id)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            epoch = member.member_epoch
            gid, mid = group.group_id, member.member_id
            self.timer.schedule(key, max(member.rebalance_timeout_ms, 0),
                                lambda: self._expire_rebalance(gid, mid, epoch))
        else:
            self.timer.cancel(key)

    def _expire_rebalance(self, group_id: str, member_id: str, epoch: int) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or member.member_epoch != epoch \
                or member.state is not MemberState.UNREVOKED_PARTITIONS:
            return
        log.info("member %s of consumer group %s did not revoke its partitions within its rebalance timeout "
                 "(%d ms), fencing it", member_id, group_id, member.rebalance_timeout_ms)
        try:
            self.fence_members(group, [member_id])
        except KafkaError as e:
            log.warning("could not fence member %s of consumer group %s: %s", member_id, group_id, e)

    # -- records --------------------------------------------------------------------------------------

    @staticmethod
    def _member_metadata(group_id: str, m: ConsumerGroupMember) -> Change:
        classic = None
        if m.classic is not None:
            protocols = tuple(mr.ClassicProtocol(name, meta) for name, meta in m.classic.protocols)
            classic = mr.ClassicMemberMetadata(session_timeout_ms=m.classic.session_timeout_ms,
                                               supported_protocols=protocols)
        return (mr.ConsumerGroupMemberMetadataKey(group_id, m.member_id),
                mr.ConsumerGroupMemberMetadataValue(
                    instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                    subscribed_topic_names=m.subscribed_topic_names, subscribed_topic_regex=m.subscribed_topic_regex,
                    rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
                    classic_member_metadata=classic))

    @staticmethod
    def _current_assignment(group_id: str, m: ConsumerGroupMember) -> Change:
        epochs = m.held_epochs()
        return (mr.ConsumerGroupCurrentMemberAssignmentKey(group_id, m.member_id),
                mr.ConsumerGroupCurrentMemberAssignmentValue(
                    member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=int(m.state),
                    assigned_partitions=to_topic_partitions_with_epochs(m.assigned, epochs),
                    partitions_pending_revocation=to_topic_partitions_with_epochs(m.pending_revocation, epochs)))

    def _commit(self, group_id: str, changes: list[Change]) -> None:
        """Append the changes as one batch, then apply them; raises KafkaError and applies nothing on failure."""
        if not changes:
            return
        self._write(group_id, self.encode(changes))
        for key, value in changes:
            if isinstance(key, ClassicGroupTombstone):
                self._drop_classic(key.group_id)
            else:
                self.apply(key, value)

    def apply(self, key: Any, value: Any) -> None:
        """One consumer-group record, live or replayed (Kafka's ``GroupMetadataManager.replay``)."""
        group = self.groups.get(key.group_id)
        if group is None:
            if value is None:
                return
            group = self.groups[key.group_id] = ConsumerGroup(key.group_id)
        if isinstance(key, mr.ConsumerGroupMetadataKey) and value is None:
            self._remove_group(key.group_id)
            return
        apply_to(group, key, value)


    def _remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.dead = True
            for mid in group.members:
                self.timer.cancel(self._session_key(group_id, mid))
                self.timer.cancel(self._rebalance_key(group_id, mid))
        self.timer.cancel(self._regex_key(group_id))
        for key in [k for k in self._told if k[0] == group_id]:
            self._told.pop(key, None)
            self._heard.pop(key, None)

    def group_tombstones(self, group: ConsumerGroup) -> list[Change]:
        """Kafka's ``createGroupTombstoneRecords`` order."""
        gid = group.group_id
        out: list[Change] = [(mr.ConsumerGroupCurrentMemberAssignmentKey(gid, m), None) for m in group.members]
        out += [(mr.ConsumerGroupTargetAssignmentMemberKey(gid, m), None) for m in group.target]
        out.append((mr.ConsumerGroupTargetAssignmentMetadataKey(gid), None))
        out += [(mr.ConsumerGroupMemberMetadataKey(gid, m), None) for m in group.members]
        out += [(mr.ConsumerGroupRegularExpressionKey(gid, r), None) for r in group.resolved_regexes]
        out.append((mr.ConsumerGroupPartitionMetadataKey(gid), None))  # a 4.0 coordinator's record, if any
        out.append((mr.ConsumerGroupMetadataKey(gid), None))
        return out

    @staticmethod
    def encode(changes: list[Change]) -> list[Record]:
        return [(encode_group_metadata_key(k.group_id), None) if isinstance(k, ClassicGroupTombstone)
                else (mr.encode_key(k), None if v is None else mr.encode_value(v)) for k, v in changes]

    # -- loading --------------------------------------------------------------------------------------

    def on_loaded(self, group_ids: set[str] | None = None) -> None:
        """After replay: every member must heartbeat within its session timeout; revocations keep their timer."""
        for group in list(self.groups.values()):
            if group_ids is not None and group.group_id not in group_ids:
                continue
            if not group.members and group.group_epoch == 0:
                continue
            for member in group.members.values():
                self._schedule_session_timeout(group.group_id, member.member_id)
                self._after_reconcile(group, member, True)

    def unload(self, which: Callable[[str], bool]) -> int:
        doomed = [gid for gid in self.groups if which(gid)]
        for gid in doomed:
            group = self.groups.pop(gid)
            for mid in group.members:
                self.timer.cancel(self._session_key(gid, mid))
                self.timer.cancel(self._rebalance_key(gid, mid))
            self.timer.cancel(self._regex_key(gid))
        return len(doomed)

    # -- describing ------------------------------------------------------------------------------------

    def describe(self, group_id: str, topic_name: Callable[[UUID], str | None]) -> Response:
        group = self.groups.get(group_id)
        if group is None or group.dead:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")

        def assignment(a: Assignment) -> Response:
            return {"topic_partitions": [{"topic_id": t, "topic_name": topic_name(t) or "",
                                          "partitions": sorted(ps)} for t, ps in sorted(a.items()) if ps]}

        return {
            "error_code": ErrorCode.NONE, "error_message": None, "group_id": group_id,
            "group_state": group.state().value, "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.preferred_assignor(self.config.assignors[0]),
            "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                         "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                         "subscribed_topic_names": list(m.subscribed_topic_names),
                         "subscribed_topic_regex": m.subscribed_topic_regex,
                         "assignment": assignment(m.assigned), "target_assignment": assignment(group.target_of(
                             m.member_id)), "member_type": 0 if m.uses_classic_protocol else 1}
                        for m in group.members.values()],
        }

    def list_groups(self, states: set[str] | None) -> list[Response]:
        out = []
        for group in self.groups.values():
            state = group.state()
            if state is ConsumerGroupState.DEAD or (states and state.value.lower() not in states):
                continue
            out.append({"group_id": group.group_id, "protocol_type": "consumer", "group_state": state.value,
                        "group_type": "consumer"})
        return out



def apply_to(group: ConsumerGroup, key: Any, value: Any) -> None:
    """A consumer-group record applied to ``group`` (the group's own tombstone aside: see ``apply``)."""
    if isinstance(key, mr.ConsumerGroupMetadataKey):
        group.group_epoch = value.epoch
        group.metadata_hash = value.metadata_hash
    elif isinstance(key, mr.ConsumerGroupMemberMetadataKey):
        if value is None:
            group.remove_member(key.member_id)
            return
        old = group.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
        classic = None
        if value.classic_member_metadata is not None:
            c = value.classic_member_metadata
            classic = ClassicMemberMetadata(c.session_timeout_ms,
                                            tuple((p.name, p.metadata) for p in c.supported_protocols))
        group.put_member(replace(old, instance_id=value.instance_id, rack_id=value.rack_id,
                                 client_id=value.client_id, client_host=value.client_host,
                                 subscribed_topic_names=tuple(value.subscribed_topic_names),
                                 subscribed_topic_regex=value.subscribed_topic_regex or None,
                                 rebalance_timeout_ms=value.rebalance_timeout_ms,
                                 server_assignor=value.server_assignor, classic=classic))
    elif isinstance(key, mr.ConsumerGroupTargetAssignmentMetadataKey):
        group.assignment_epoch = value.assignment_epoch if value is not None else 0
    elif isinstance(key, mr.ConsumerGroupTargetAssignmentMemberKey):
        if value is None:
            group.target.pop(key.member_id, None)
        else:
            group.target[key.member_id] = from_topic_partitions(value.topic_partitions)
    elif isinstance(key, mr.ConsumerGroupCurrentMemberAssignmentKey):
        old = group.members.get(key.member_id)
        if value is None:
            if old is not None:
                group.put_member(replace(old, member_epoch=0, previous_member_epoch=0, state=MemberState.STABLE,
                                         assigned={}, pending_revocation={}))
            return
        group.put_member(replace(old or ConsumerGroupMember(key.member_id), member_epoch=value.member_epoch,
                                 previous_member_epoch=value.previous_member_epoch,
                                 state=MemberState.of(value.state),
                                 assigned=from_topic_partitions(value.assigned_partitions),
                                 pending_revocation=from_topic_partitions(value.partitions_pending_revocation),
                                 assignment_epochs=epochs_from_topic_partitions(
                                     value.assigned_partitions, value.partitions_pending_revocation)))
    elif isinstance(key, mr.ConsumerGroupRegularExpressionKey):
        if value is None:
            group.resolved_regexes.pop(key.regular_expression, None)
        else:
            group.resolved_regexes[key.regular_expression] = ResolvedRegex(
                frozenset(value.topics), value.version, value.timestamp)
    # ConsumerGroupPartitionMetadata (deprecated in 4.1): nothing to keep
