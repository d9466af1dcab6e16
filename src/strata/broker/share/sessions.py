"""Share sessions (KIP-932): what a member fetches from this broker, and the epoch that orders its requests.

A session lives on the partition leader and is keyed by (group id, member id) -- there is no session id.
Epoch 0 opens one (replacing any previous one) with the full partition list; every later ShareFetch or
ShareAcknowledge must carry the session's current epoch (else INVALID_SHARE_SESSION_EPOCH; no session:
SHARE_SESSION_NOT_FOUND) and moves it on by one, wrapping to 1 after INT32_MAX. Epoch -1 closes it, and the
member's acquired records go back to the share-partitions. At most ``group.share.max.share.sessions``
sessions exist (Kafka's ShareSessionCache); a new one beyond that is refused with SHARE_SESSION_LIMIT_REACHED
unless an idle session can be evicted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from uuid import UUID

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1

SessionPartition = tuple[UUID, int]  # (topic id, partition)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    connection_id: str
    epoch: int = 1
    partitions: dict[SessionPartition, str] = field(default_factory=dict)  # -> topic name
    last_used_ms: int = 0

    def update(self, added: Iterable[tuple[SessionPartition, str]], forgotten: Iterable[SessionPartition]) -> None:
        for key in forgotten:
            self.partitions.pop(key, None)
        for key, name in added:
            self.partitions[key] = name


class ShareSessionCache:
    """The sessions of this broker, by (group id, member id)."""

    def __init__(self, max_sessions: int, idle_eviction_ms: int = 120_000) -> None:
        self.max_sessions = max_sessions
        self.idle_eviction_ms = idle_eviction_ms
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str, connection_id: str, now_ms: int) -> tuple[ShareSession | None,
                                                                                          ShareSession | None]:
        """(the new session or None when the cache is full, the session it replaced or evicted)."""
        key = (group_id, member_id)
        replaced = self._sessions.pop(key, None)
        if replaced is None and len(self._sessions) >= self.max_sessions:
            replaced = self._evict_idle(now_ms)
            if replaced is None:
                return None, None
        session = ShareSession(group_id, member_id, connection_id, last_used_ms=now_ms)
        self._sessions[key] = session
        return session, replaced

    def _evict_idle(self, now_ms: int) -> ShareSession | None:
        oldest = min(self._sessions.values(), key=lambda s: s.last_used_ms, default=None)
        if oldest is None or now_ms - oldest.last_used_ms < self.idle_eviction_ms:
            return None
        return self._sessions.pop((oldest.group_id, oldest.member_id))

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def of_connection(self, connection_id: str) -> list[ShareSession]:
        return [s for s in self._sessions.values() if s.connection_id == connection_id]

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())
