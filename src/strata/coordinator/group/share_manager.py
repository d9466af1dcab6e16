"""KIP-932 share groups driven by ShareGroupHeartbeat (Kafka's ``GroupMetadataManager``, share part).

A share group hands partitions to members like a consumer group, with three differences:

* **no revocation**: members of a share group may share a partition (the share-partition leader's
  acquisition locks keep each record with one member at a time), so a member jumps straight to the target
  at its epoch (Kafka's ``ShareGroupAssignmentBuilder``);
* **the ``simple`` assignor**, which shares a partition among several members when there are more members
  than partitions;
* **only initialized partitions are assigned.** Before a member may fetch from a partition, the share
  coordinator must hold the partition's state (its start offset). The group records the partitions it
  subscribes to in ShareGroupStatePartitionMetadata as *initializing*, asks the share coordinator to
  initialize them (``initializer``, asynchronous), and records them as *initialized* when that succeeded;
  the next heartbeat bumps the epoch and assigns them. So a new member's first heartbeat gets an empty
  assignment, as in Kafka. A restart retries initializations the log says are still pending.

As for consumer groups (:mod:`.consumer_manager`), every change is a record (types 10-15 in
``__consumer_offsets``) written first and then applied through :func:`apply_to`, the replay path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from uuid import UUID

from strata.coordinator.group import modern_records as mr
from strata.coordinator.group.assignors import SIMPLE, MemberSpec
from strata.coordinator.group.classic import GroupError
from strata.coordinator.group.consumer import Assignment, normalized, topic_metadata_hash
from strata.coordinator.group.consumer_manager import TopicsView, from_topic_partitions, to_topic_partitions
from strata.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from strata.common import Clock
    from strata.coordinator.group.timer import Timer

log = logging.getLogger("strata.coordinator.group")

LEAVE_GROUP_MEMBER_EPOCH = -1
Record = tuple[bytes, bytes | None]
Change = tuple[Any, Any]
Response = dict[str, Any]
# (group id, {topic id: partitions}, state epoch, done(succeeded: {topic id: partitions}))
Initializer = Callable[[str, dict[UUID, frozenset[int]], int, Callable[[dict[UUID, frozenset[int]]], None]], None]


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    initialize_retry_interval_ms: int = 30_000


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)

    def metadata_equals(self, other: ShareMember) -> bool:
        return (self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names) == (
            other.rack_id, other.client_id, other.client_host, other.subscribed_topic_names)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # ShareGroupStatePartitionMetadata: topic id -> (name, partitions)
    initializing: dict[UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    initialized: dict[UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    deleting: dict[UUID, str] = field(default_factory=dict)
    dead: bool = False

    def state(self) -> str:
        if self.dead:
            return "Dead"
        return "Stable" if self.members else "Empty"

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


class ShareGroupManager:
    """The share groups of this coordinator (same id namespace as classic and consumer groups)."""

    def __init__(self, settings: ShareGroupSettings, timer: Timer, clock: Clock, topics: TopicsView,
                 write: Callable[[str, list[Record]], Any], initializer: Initializer,
                 taken: Callable[[str], bool] = lambda _group_id: False,
                 group_settings: Callable[[str], tuple[int, int]] | None = None) -> None:
        self.config = settings
        # (session timeout, heartbeat interval) of a group: its share.* GROUP configs; None: the broker's
        self._group_settings = group_settings or (
            lambda _group_id: (settings.session_timeout_ms, settings.heartbeat_interval_ms))
        self.timer = timer
        self.clock = clock
        self.topics = topics
        self._write = write
        self._initializer = initializer
        self._taken = taken  # whether a classic or consumer group holds the id
        self.groups: dict[str, ShareGroup] = {}
        self._initializing_since: dict[tuple[str, UUID, int], int] = {}
        self.rebalances = 0

    def _now(self) -> int:
        return self.clock.milliseconds()

    @staticmethod
    def _session_key(group_id: str, member_id: str) -> Hashable:
        return ("share-session", group_id, member_id)

    # -- ShareGroupHeartbeat ---------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed_topic_names: tuple[str, ...] | None, client_id: str, client_host: str) -> Response:
        """One heartbeat's answer; raises GroupError with the error the client must see."""
        if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            return self._leave(group_id, member_id)
        changes: list[Change] = []
        joining = member_epoch == 0
        group = self.groups.get(group_id)
        if group is None or group.dead:
            if self._taken(group_id):
                raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
            if not joining:
                raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
            group = ShareGroup(group_id)
        if member_id not in group.members and len(group.members) >= self.config.max_size:
            raise GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                             f"The share group has reached its maximum capacity of {self.config.max_size} members.")
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of {group_id}.")
            member = ShareMember(member_id)
        elif member_epoch not in (0, member.member_epoch, member.previous_member_epoch) or (
                member_epoch > member.member_epoch):
            raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The share group member has epoch {member_epoch}, the coordinator knows "
                             f"{member.member_epoch}: it must rejoin.")
        new_member = member_id not in group.members
        updated = replace(member, rack_id=rack_id if rack_id is not None else member.rack_id,
                          subscribed_topic_names=tuple(sorted(set(subscribed_topic_names)))
                          if subscribed_topic_names is not None else member.subscribed_topic_names,
                          client_id=client_id, client_host=client_host)
        if new_member or not updated.metadata_equals(member):
            changes.append((mr.ShareGroupMemberMetadataKey(group_id, member_id),
                            mr.ShareGroupMemberMetadataValue(rack_id=updated.rack_id, client_id=client_id,
                                                             client_host=client_host,
                                                             subscribed_topic_names=updated.subscribed_topic_names)))
        members = {**group.members, member_id: updated}
        subscribed = {t for m in members.values() for t in m.subscribed_topic_names}
        metadata_hash = self._metadata_hash(subscribed)
        subscription_changed = updated.subscribed_topic_names != member.subscribed_topic_names
        group_epoch = group.group_epoch
        if group_epoch == 0 or subscription_changed or self._initialized_assignment_pending(group) \
                or metadata_hash != group.metadata_hash:
            group_epoch += 1
            changes.append((mr.ShareGroupMetadataKey(group_id),
                            mr.ShareGroupMetadataValue(epoch=group_epoch, metadata_hash=metadata_hash)))
        targets: dict[str, Assignment] = dict(group.target)
        target_epoch = group.assignment_epoch
        if group_epoch > group.assignment_epoch:
            targets = self._assign(group, members, changes)
            target_epoch = group_epoch
            changes.append((mr.ShareGroupTargetAssignmentMetadataKey(group_id),
                            mr.ShareGroupTargetAssignmentMetadataValue(assignment_epoch=target_epoch)))
        # no revocation phase: straight to the target, less the topics no longer subscribed
        wanted_ids = {self.topics.topic(t)[0] for t in updated.subscribed_topic_names  # type: ignore[index]
                      if self.topics.topic(t) is not None}
        target = {t: ps for t, ps in targets.get(member_id, {}).items() if t in wanted_ids}
        reconciled = updated
        if updated.member_epoch != target_epoch or normalized(updated.assigned) != normalized(target) \
                or subscription_changed:
            reconciled = replace(updated, member_epoch=target_epoch, previous_member_epoch=updated.member_epoch,
                                 assigned=target)
        if new_member or (reconciled.member_epoch, reconciled.previous_member_epoch,
                          normalized(reconciled.assigned)) != (member.member_epoch, member.previous_member_epoch,
                                                               normalized(member.assigned)):
            changes.append(self._current_assignment(group_id, reconciled))
        to_initialize = self._partitions_to_initialize(group, subscribed, changes)
        self._commit(group_id, changes)
        if group_epoch != group.group_epoch:
            self.rebalances += 1
        group = self.groups[group_id]
        self._schedule_session_timeout(group_id, member_id)
        if to_initialize:
            self._start_initialization(group_id, to_initialize, group.group_epoch)
        response: Response = {"member_id": member_id, "member_epoch": reconciled.member_epoch,
                              "heartbeat_interval": self._group_settings(group_id)[1], "assignment": None}
        if joining or subscribed_topic_names is not None or normalized(reconciled.assigned) != normalized(
                member.assigned):
            response["assignment"] = {"topic_partitions": [
                {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(reconciled.assigned.items()) if ps]}
        return response

    def _initialized_assignment_pending(self, group: ShareGroup) -> bool:
        """Kafka's ``initializedAssignmentPending``: an initialized, subscribed partition no target holds."""
        if not group.members:
            return False
        assigned: set[tuple[UUID, int]] = {(t, p) for a in group.target.values() for t, ps in a.items() for p in ps}
        subscribed = group.subscribed_topic_names()
        return any((t, p) not in assigned for t, (name, ps) in group.initialized.items() if name in subscribed
                   for p in ps)

    def _metadata_hash(self, names: Iterable[str]) -> int:
        facts = [(n, *found) for n in names if (found := self.topics.topic(n)) is not None]
        return topic_metadata_hash(facts) if facts else 0

    def _assign(self, group: ShareGroup, members: Mapping[str, ShareMember],
                changes: list[Change]) -> dict[str, Assignment]:
        topics: dict[UUID, int] = {}
        specs: dict[str, MemberSpec] = {}
        for mid, m in members.items():
            ids = set()
            for name in m.subscribed_topic_names:
                found = self.topics.topic(name)
                if found is not None:
                    ids.add(found[0])
                    topics[found[0]] = found[1]
            specs[mid] = MemberSpec(member_id=mid, subscribed_topic_ids=frozenset(ids),
                                    current={t: frozenset(ps) for t, ps in group.target.get(mid, {}).items()})
        assignable = {t: ps for t, (_name, ps) in group.initialized.items() if t in topics}
        result = SIMPLE.assign(specs, topics, assignable)
        out: dict[str, Assignment] = {}
        for mid in members:
            target = normalized(result.get(mid, {}))
            out[mid] = target
            if mid not in group.target or normalized(group.target[mid]) != target:
                changes.append((mr.ShareGroupTargetAssignmentMemberKey(group.group_id, mid),
                                mr.ShareGroupTargetAssignmentMemberValue(topic_partitions=to_topic_partitions(target))))
        return out

    # -- share-partition state initialization (Kafka's subscribedTopicsChangeMap) ---------------------

    def _partitions_to_initialize(self, group: ShareGroup, subscribed: set[str],
                                  changes: list[Change]) -> dict[UUID, frozenset[int]]:
        """Subscribed partitions neither initialized nor recently asked for: recorded as initializing (in
        ``changes``) and returned, for the share coordinator to initialize once the record is written."""
        now = self._now()
        todo: dict[UUID, frozenset[int]] = {}
        names: dict[UUID, str] = {}
        for name in sorted(subscribed):
            found = self.topics.topic(name)
            if found is None:
                continue
            topic_id, count = found
            done = group.initialized.get(topic_id, (name, frozenset()))[1]
            pending = group.initializing.get(topic_id, (name, frozenset()))[1]
            fresh = {p for p in pending if now - self._initializing_since.get((group.group_id, topic_id, p), 0)
                     < self.config.initialize_retry_interval_ms}
            wanted = frozenset(p for p in range(count) if p not in done and p not in fresh)
            if wanted:
                todo[topic_id] = wanted
                names[topic_id] = name
        if not todo:
            return {}
        initializing = {t: (n, ps) for t, (n, ps) in group.initializing.items()}
        for topic_id, ps in todo.items():
            name, old = initializing.get(topic_id, (names[topic_id], frozenset()))
            initializing[topic_id] = (name, old | ps)
            for p in ps:
                self._initializing_since[(group.group_id, topic_id, p)] = now
        changes.append(self._state_metadata(group.group_id, initializing, group.initialized, group.deleting))
        return todo

    def _start_initialization(self, group_id: str, todo: dict[UUID, frozenset[int]], state_epoch: int) -> None:
        self._initializer(group_id, todo, state_epoch, lambda ok: self._initialized(group_id, ok))

    def _initialized(self, group_id: str, succeeded: dict[UUID, frozenset[int]]) -> None:
        """The share coordinator initialized these partitions: move them to initialized (a failed one stays
        initializing and is asked for again after ``group.share.initialize.retry.interval.ms``)."""
        group = self.groups.get(group_id)
        if group is None or group.dead or not succeeded:
            return
        initializing = dict(group.initializing)
        initialized = dict(group.initialized)
        for topic_id, ps in succeeded.items():
            known = initializing.get(topic_id) or initialized.get(topic_id)
            name = known[0] if known is not None else (self.topics.name_of(topic_id) or "")
            left = initializing.get(topic_id, (name, frozenset()))[1] - ps
            if left:
                initializing[topic_id] = (name, left)
            else:
                initializing.pop(topic_id, None)
            initialized[topic_id] = (name, initialized.get(topic_id, (name, frozenset()))[1] | ps)
            for p in ps:
                self._initializing_since.pop((group_id, topic_id, p), None)
        try:
            self._commit(group_id, [self._state_metadata(group_id, initializing, initialized, group.deleting)])
        except KafkaError as e:
            log.warning("could not record the initialized share partitions of group %s: %s", group_id, e)

    @staticmethod
    def _state_metadata(group_id: str, initializing: Mapping[UUID, tuple[str, frozenset[int]]],
                        initialized: Mapping[UUID, tuple[str, frozenset[int]]], deleting: Mapping[UUID, str]) -> Change:
        def infos(m: Mapping[UUID, tuple[str, frozenset[int]]]) -> tuple[mr.TopicPartitionsInfo, ...]:
            return tuple(mr.TopicPartitionsInfo(t, n, tuple(sorted(ps))) for t, (n, ps) in sorted(m.items()) if ps)

        return (mr.ShareGroupStatePartitionMetadataKey(group_id), mr.ShareGroupStatePartitionMetadataValue(
            initializing_topics=infos(initializing), initialized_topics=infos(initialized),
            deleting_topics=tuple(mr.TopicInfo(t, n) for t, n in sorted(deleting.items()))))

    # -- leaving, timers --------------------------------------------------------------------------

    def _leave(self, group_id: str, member_id: str) -> Response:
        group = self.groups.get(group_id)
        if group is None or group.dead:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
        if member_id not in group.members:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of {group_id}.")
        self.fence_member(group, member_id)
        return {"member_id": member_id, "member_epoch": LEAVE_GROUP_MEMBER_EPOCH, "heartbeat_interval": 0,
                "assignment": None}

    def fence_member(self, group: ShareGroup, member_id: str) -> None:
        gid = group.group_id
        remaining = {t for mid, m in group.members.items() if mid != member_id for t in m.subscribed_topic_names}
        changes: list[Change] = [(mr.ShareGroupCurrentMemberAssignmentKey(gid, member_id), None),
                                 (mr.ShareGroupTargetAssignmentMemberKey(gid, member_id), None),
                                 (mr.ShareGroupMemberMetadataKey(gid, member_id), None),
                                 (mr.ShareGroupMetadataKey(gid), mr.ShareGroupMetadataValue(
                                     epoch=group.group_epoch + 1, metadata_hash=self._metadata_hash(remaining)))]
        self._commit(gid, changes)
        self.rebalances += 1
        self.timer.cancel(self._session_key(gid, member_id))
        log.info("member %s left share group %s", member_id, gid)

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        self.timer.schedule(self._session_key(group_id, member_id), self._group_settings(group_id)[0],
                            lambda: self._expire(group_id, member_id))

    def _expire(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return
        log.info("member %s of share group %s failed its session timeout, fencing it", member_id, group_id)
        try:
            self.fence_member(group, member_id)
        except KafkaError as e:
            log.warning("could not fence member %s of share group %s: %s", member_id, group_id, e)
            self._schedule_session_timeout(group_id, member_id)

    # -- records ---------------------------------------------------------------------------------

    @staticmethod
    def _current_assignment(group_id: str, m: ShareMember) -> Change:
        return (mr.ShareGroupCurrentMemberAssignmentKey(group_id, m.member_id),
                mr.ShareGroupCurrentMemberAssignmentValue(member_epoch=m.member_epoch,
                                                          previous_member_epoch=m.previous_member_epoch, state=0,
                                                          assigned_partitions=to_topic_partitions(m.assigned)))

    @staticmethod
    def encode(changes: list[Change]) -> list[Record]:
        return [(mr.encode_key(k), None if v is None else mr.encode_value(v)) for k, v in changes]

    def _commit(self, group_id: str, changes: list[Change]) -> None:
        if not changes:
            return
        self._write(group_id, self.encode(changes))
        for key, value in changes:
            self.apply(key, value)

    def apply(self, key: Any, value: Any) -> None:
        """One share-group record, live or replayed."""
        group = self.groups.get(key.group_id)
        if group is None:
            if value is None:
                return
            group = self.groups[key.group_id] = ShareGroup(key.group_id)
        if isinstance(key, mr.ShareGroupMetadataKey):
            if value is None:
                self.groups.pop(key.group_id, None)
                group.dead = True
                for mid in group.members:
                    self.timer.cancel(self._session_key(key.group_id, mid))
                return
            group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
        elif isinstance(key, mr.ShareGroupMemberMetadataKey):
            if value is None:
                group.members.pop(key.member_id, None)
                return
            old = group.members.get(key.member_id) or ShareMember(key.member_id)
            group.members[key.member_id] = replace(old, rack_id=value.rack_id, client_id=value.client_id,
                                                   client_host=value.client_host,
                                                   subscribed_topic_names=tuple(value.subscribed_topic_names))
        elif isinstance(key, mr.ShareGroupTargetAssignmentMetadataKey):
            group.assignment_epoch = value.assignment_epoch if value is not None else 0
        elif isinstance(key, mr.ShareGroupTargetAssignmentMemberKey):
            if value is None:
                group.target.pop(key.member_id, None)
            else:
                group.target[key.member_id] = from_topic_partitions(value.topic_partitions)
        elif isinstance(key, mr.ShareGroupCurrentMemberAssignmentKey):
            old = group.members.get(key.member_id)
            if value is None:
                if old is not None:
                    group.members[key.member_id] = replace(old, member_epoch=0, previous_member_epoch=0, assigned={})
                return
            group.members[key.member_id] = replace(
                old or ShareMember(key.member_id), member_epoch=value.member_epoch,
                previous_member_epoch=value.previous_member_epoch,
                assigned=from_topic_partitions(value.assigned_partitions))
        elif isinstance(key, mr.ShareGroupStatePartitionMetadataKey):
            if value is None:
                group.initializing, group.initialized, group.deleting = {}, {}, {}
                return
            group.initializing = {t.topic_id: (t.topic_name, frozenset(t.partitions))
                                  for t in value.initializing_topics}
            group.initialized = {t.topic_id: (t.topic_name, frozenset(t.partitions))
                                 for t in value.initialized_topics}
            group.deleting = {t.topic_id: t.topic_name for t in value.deleting_topics}

    def group_tombstones(self, group: ShareGroup) -> list[Change]:
        """Kafka's share-group tombstone order."""
        gid = group.group_id
        out: list[Change] = [(mr.ShareGroupCurrentMemberAssignmentKey(gid, m), None) for m in group.members]
        out += [(mr.ShareGroupTargetAssignmentMemberKey(gid, m), None) for m in group.target]
        out.append((mr.ShareGroupTargetAssignmentMetadataKey(gid), None))
        out += [(mr.ShareGroupMemberMetadataKey(gid, m), None) for m in group.members]
        out.append((mr.ShareGroupStatePartitionMetadataKey(gid), None))
        out.append((mr.ShareGroupMetadataKey(gid), None))
        return out

    # -- loading, describing ------------------------------------------------------------------------

    def on_loaded(self, group_ids: set[str] | None = None) -> None:
        """After replay: sessions restart, and initializations the log left pending are asked for again."""
        for group in list(self.groups.values()):
            if group_ids is not None and group.group_id not in group_ids:
                continue
            for mid in group.members:
                self._schedule_session_timeout(group.group_id, mid)
            pending = {t: ps for t, (_n, ps) in group.initializing.items() if ps}
            if pending:
                self._start_initialization(group.group_id, pending, group.group_epoch)

    def unload(self, which: Callable[[str], bool]) -> int:
        doomed = [gid for gid in self.groups if which(gid)]
        for gid in doomed:
            group = self.groups.pop(gid)
            for mid in group.members:
                self.timer.cancel(self._session_key(gid, mid))
        return len(doomed)

    def describe(self, group_id: str, topic_name: Callable[[UUID], str | None]) -> Response:
        group = self.groups.get(group_id)
        if group is None or group.dead:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        return {
            "error_code": ErrorCode.NONE, "error_message": None, "group_id": group_id, "group_state": group.state(),
            "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch, "assignor_name": "simple",
            "members": [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "subscribed_topic_names": list(m.subscribed_topic_names),
                         "assignment": {"topic_partitions": [
                             {"topic_id": t, "topic_name": topic_name(t) or "", "partitions": sorted(ps)}
                             for t, ps in sorted(m.assigned.items()) if ps]}}
                        for m in group.members.values()],
        }

    def list_groups(self, states: set[str] | None) -> list[Response]:
        return [{"group_id": g.group_id, "protocol_type": "share", "group_state": g.state(), "group_type": "share"}
                for g in self.groups.values() if not g.dead and (not states or g.state().lower() in states)]
