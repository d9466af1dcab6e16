"""Incremental fetch sessions (KIP-227), Kafka's ``FetchSession``/``FetchManager`` on the serving side.

A fetcher that keeps a session sends only the partitions whose fetch position changed and is answered only
the partitions with something new: records, a moved high watermark, last stable or log start offset, or an
error. A follower of a broker that leads a hundred mostly idle partitions (``__consumer_offsets``,
``__share_group_state``) no longer has every one of them encoded, decoded and answered on every round trip of
an ``acks=all`` produce.

The request's ``session_id``/``session_epoch`` say what it is (Kafka's ``FetchMetadata``):

- id 0, epoch -1: sessionless, a full fetch answered in full with session id 0 (librdkafka, kafka-python).
- epoch 0: a full fetch that opens a session (after closing the one named by a non-zero id); the answer
  carries the new session's id, or 0 when ``max.incremental.fetch.session.cache.slots`` leaves no room.
- epoch -1 with an id: closes that session, then a sessionless fetch.
- epoch > 0: the next request of session ``id``, which must expect exactly this epoch (else
  INVALID_FETCH_SESSION_EPOCH; unknown id: FETCH_SESSION_ID_NOT_FOUND; a session opened with topic names
  continued with topic ids or back: FETCH_SESSION_TOPIC_ID_ERROR). Its partitions update or join the session,
  ``forgotten_topics_data`` leave it, and the fetch reads every partition of the session.

Partitions answered in an incremental response move to the end of the session's order, so a response that
runs out of ``max_bytes`` does not starve the partitions after them next time (Kafka does the same).

Eviction (Kafka's ``FetchSessionCache.tryEvict``): when the cache is full, a session unused for
``EVICTION_MS`` goes first (least recently used); otherwise a follower's session may evict the least recently
used consumer's; otherwise no session is made and the fetcher carries on sessionless.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from strata.common.metrics import Meter, Registry, prometheus_name
from strata.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0
MAX_EPOCH = 2**31 - 1
EVICTION_MS = 120_000  # Kafka's min.incremental.fetch.session.eviction.ms default
NUM_SESSIONS = prometheus_name("kafka.server:type=FetchSessionCache,name=NumIncrementalFetchSessions")
NUM_PARTITIONS = prometheus_name("kafka.server:type=FetchSessionCache,name=NumIncrementalFetchPartitionsCached")
EVICTIONS = prometheus_name("kafka.server:type=FetchSessionCache,name=IncrementalFetchSessionEvictionsPerSec")

PartitionKey = tuple[Any, int]  # (topic name, or topic id from Fetch v13 on; partition)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: what the fetcher last asked (its attributes are a request partition's, so
    the fetch reads it like one) and what the last response told it (None: never told, or told an error)."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    told_log_start_offset: int | None = None

    def update_request(self, p: Any) -> None:
        self.fetch_offset = p.fetch_offset
        self.partition_max_bytes = p.partition_max_bytes
        self.log_start_offset = getattr(p, "log_start_offset", -1)
        self.current_leader_epoch = getattr(p, "current_leader_epoch", -1)
        self.last_fetched_epoch = getattr(p, "last_fetched_epoch", -1)

    def must_respond(self, out: dict[str, Any]) -> bool:
        """Kafka's ``maybeUpdateResponseData``: whether the response must carry this partition, remembering
        what it tells."""
        respond = bool(out["records"]) or out.get("preferred_read_replica", -1) >= 0
        if out["error_code"]:
            self.high_watermark = None  # sent again once the error is gone
            return True
        if out.get("diverging_epoch") is not None:
            respond = True
        for name, told in (("high_watermark", "high_watermark"), ("last_stable_offset", "last_stable_offset"),
                           ("log_start_offset", "told_log_start_offset")):
            if getattr(self, told) != out[name]:
                setattr(self, told, out[name])
                respond = True
        return respond


def _cached(p: Any) -> CachedPartition:
    cp = CachedPartition(p.partition, p.fetch_offset, p.partition_max_bytes)
    cp.update_request(p)
    return cp


@dataclass(slots=True)
class SessionTopic:
    """A topic of a session as a request topic: what the fetch handler iterates."""

    topic: str | None
    topic_id: UUID | None
    partitions: list[CachedPartition]


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's: may evict consumers' sessions
    uses_topic_ids: bool
    epoch: int = 1
    last_used_ms: int = 0
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)

    def topics(self) -> list[SessionTopic]:
        """The session's partitions grouped by topic, in the session's order (each topic at its first place)."""
        out: dict[Any, SessionTopic] = {}
        for (topic, _), cp in self.partitions.items():
            st = out.get(topic)
            if st is None:
                st = out[topic] = SessionTopic(None if self.uses_topic_ids else topic,
                                               topic if self.uses_topic_ids else None, [])
            st.partitions.append(cp)
        return list(out.values())

    def update(self, topics: Iterable[Any], forgotten: Iterable[Any]) -> None:
        for t in forgotten:
            topic = t.topic_id if self.uses_topic_ids else t.topic
            for p in t.partitions:
                self.partitions.pop((topic, p), None)
        for t in topics:
            topic = t.topic_id if self.uses_topic_ids else t.topic
            for p in t.partitions:
                cp = self.partitions.get((topic, p.partition))
                if cp is None:
                    self.partitions[(topic, p.partition)] = _cached(p)
                else:
                    cp.update_request(p)

    def filter(self, responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """An incremental response: only the partitions that must be told, which move to the end of the order."""
        out = []
        for t in responses:
            topic = t["topic_id"] if self.uses_topic_ids else t["topic"]
            kept = []
            for part in t["partitions"]:
                key = (topic, part["partition_index"])
                cp = self.partitions.get(key)
                if cp is None or cp.must_respond(part):
                    kept.append(part)
                    if cp is not None:
                        self.partitions[key] = self.partitions.pop(key)
            if kept:
                out.append({**t, "partitions": kept})
        return out

    def remember(self, responses: list[dict[str, Any]]) -> None:
        """A full response: what it told each partition."""
        for t in responses:
            topic = t["topic_id"] if self.uses_topic_ids else t["topic"]
            for part in t["partitions"]:
                cp = self.partitions.get((topic, part["partition_index"]))
                if cp is not None:
                    cp.must_respond(part)


@dataclass(slots=True)
class FetchContext:
    """How one Fetch request is served: ``topics`` to read, then ``finish`` on the responses.

    ``error``: a session error answered at the top level with no partitions. ``session``: the session an
    incremental fetch continues. ``create``: a full fetch that opens a session once answered."""

    topics: list[Any]
    error: int = ErrorCode.NONE
    session: FetchSession | None = None
    create: bool = False
    privileged: bool = False
    uses_topic_ids: bool = False


class FetchSessionCache:
    """The sessions of this broker (``max.incremental.fetch.session.cache.slots`` of them at most)."""

    def __init__(self, max_slots: int, eviction_ms: int = EVICTION_MS, seed: int | None = None) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._sessions: dict[int, FetchSession] = {}
        self._random = random.Random(seed)
        self.evictions: Meter | None = None

    def register_metrics(self, registry: Registry) -> None:
        """Kafka's FetchSessionCache metrics (read from the metrics endpoint's thread: whole-dict snapshots)."""
        registry.gauge(NUM_SESSIONS, "Incremental fetch sessions cached.", fn=lambda: len(self._sessions))
        registry.gauge(NUM_PARTITIONS, "Partitions in the cached incremental fetch sessions.",
                       fn=lambda: sum(len(s.partitions) for s in list(self._sessions.values())))
        self.evictions = registry.meter(EVICTIONS, "Incremental fetch sessions evicted to make room for another.")

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def context(self, request: Any, version: int, privileged: bool, now_ms: int) -> FetchContext:
        """Kafka's ``FetchManager.newContext``."""
        session_id = int(getattr(request, "session_id", 0) or 0)
        epoch = int(getattr(request, "session_epoch", FINAL_EPOCH))
        ids = version >= 13
        topics = list(request.topics)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            return FetchContext(topics, create=epoch == INITIAL_EPOCH and self.max_slots > 0,
                                privileged=privileged, uses_topic_ids=ids)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext([], error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext([], error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != ids:
            self._sessions.pop(session_id, None)
            return FetchContext([], error=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(topics, getattr(request, "forgotten_topics_data", None) or [])
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        if not session.partitions:  # Kafka: an emptied session is closed, the fetch answered sessionless
            self._sessions.pop(session_id, None)
            return FetchContext([], uses_topic_ids=ids)
        return FetchContext(session.topics(), session=session, uses_topic_ids=ids)

    def finish(self, ctx: FetchContext, responses: list[dict[str, Any]],
               now_ms: int) -> tuple[int, list[dict[str, Any]]]:
        """(the response's session id, its partitions) once the fetch has read them."""
        if ctx.session is not None:
            return ctx.session.id, ctx.session.filter(responses)
        if not ctx.create or not self._make_room(ctx.privileged, now_ms):
            return INVALID_SESSION_ID, responses
        session = FetchSession(self._new_id(), ctx.privileged, ctx.uses_topic_ids, last_used_ms=now_ms)
        session.update(ctx.topics, [])
        session.remember(responses)
        self._sessions[session.id] = session
        return session.id, responses

    def close(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def _new_id(self) -> int:
        while True:  # at most max_slots of 2**31 - 1 ids are taken
            candidate = self._random.randint(1, MAX_EPOCH)
            if candidate not in self._sessions:
                return candidate

    def _make_room(self, privileged: bool, now_ms: int) -> bool:
        if len(self._sessions) < self.max_slots:
            return True
        victim = self._lru(s for s in self._sessions.values() if now_ms - s.last_used_ms >= self.eviction_ms)
        if victim is None and privileged:
            victim = self._lru(s for s in self._sessions.values() if not s.privileged)
        if victim is None:
            return False
        del self._sessions[victim.id]
        if self.evictions is not None:
            self.evictions.mark()
        return True

    @staticmethod
    def _lru(sessions: Iterator[FetchSession]) -> FetchSession | None:
        return min(sessions, key=lambda s: s.last_used_ms, default=None)
