"""The fetching side of an incremental fetch session (KIP-227): Kafka's client ``FetchSessionHandler``.

The first fetch (epoch 0) lists every partition and asks the leader for a session. While the leader keeps it,
each later fetch carries the session's id and next epoch and lists only the partitions that are new or whose
fetch data changed (its fetch offset moved, its leader epoch or log start changed); partitions no longer
wanted go in ``forgotten_topics_data``. The answer lists only the partitions with something new: a partition
missing from it had no records, and its watermarks did not move.

A session error (FETCH_SESSION_ID_NOT_FOUND: the leader restarted or evicted it; INVALID_FETCH_SESSION_EPOCH)
or a request whose answer never came (a lost connection) makes the next fetch a full one again, which also
closes the old session on the leader.
"""

from __future__ import annotations

from typing import Any

from strata.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0
MAX_EPOCH = 2**31 - 1
SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                            ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR})

PartitionKey = tuple[str, int]
PartitionData = dict[str, Any]  # a Fetch request partition: partition, fetch_offset, ... as sent


class FetchSessionHandler:
    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._sent: dict[PartitionKey, PartitionData] = {}  # the leader's view of our session
        self._in_flight = False
        self.full_fetches = 0
        self.incremental_fetches = 0

    def build(self, wanted: dict[PartitionKey, PartitionData]) -> tuple[int, int, list[dict[str, Any]],
                                                                          list[dict[str, Any]]]:
        """(session id, epoch, topics to send, forgotten topics) of the next Fetch for ``wanted``."""
        if self._in_flight:  # the last request's answer never came: the leader's view of the session is unknown
            self.epoch = INITIAL_EPOCH
        self._in_flight = True
        if self.epoch == INITIAL_EPOCH:
            self._sent = dict(wanted)
            self.full_fetches += 1
            return self.session_id, INITIAL_EPOCH, _by_topic(wanted.items()), []
        send = [(k, v) for k, v in wanted.items() if self._sent.get(k) != v]
        forgotten = [k for k in self._sent if k not in wanted]
        for k in forgotten:
            del self._sent[k]
        for k, v in send:
            self._sent[k] = v
        self.incremental_fetches += 1
        by_topic: dict[str, list[int]] = {}
        for topic, partition in forgotten:
            by_topic.setdefault(topic, []).append(partition)
        return (self.session_id, self.epoch, _by_topic(send),
                [{"topic": t, "partitions": ps} for t, ps in by_topic.items()])

    def handle_response(self, error_code: int, session_id: int) -> None:
        """After an answer: where the session stands for the next fetch."""
        self._in_flight = False
        if error_code:
            # A session error, or any other top-level error: start over with a full fetch (which also closes the
            # session on the leader when it still has it)
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            return
        if self.epoch == INITIAL_EPOCH:
            self.session_id = session_id
            self.epoch = 1 if session_id != INVALID_SESSION_ID else INITIAL_EPOCH
        else:
            self.epoch = 1 if self.epoch >= MAX_EPOCH else self.epoch + 1

    def reset(self) -> None:
        """The connection is gone: the next fetch is a full one (closing the old session, if the leader kept it)."""
        self.epoch = INITIAL_EPOCH
        self._in_flight = False


def _by_topic(items: Any) -> list[dict[str, Any]]:
    out: dict[str, list[PartitionData]] = {}
    for (topic, _), data in items:
        out.setdefault(topic, []).append(data)
    return [{"topic": t, "partitions": ps} for t, ps in out.items()]
