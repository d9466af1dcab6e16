"""Incremental fetch sessions (KIP-227): the serving cache and the fetching handler, alone and together."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from strata.broker.fetch_sessions.cache import FetchSessionCache
from strata.client.fetch_session import FetchSessionHandler
from strata.errors import ErrorCode


def _request(topics: list[dict[str, Any]], session_id: int = 0, epoch: int = -1,
             forgotten: list[dict[str, Any]] | None = None) -> SimpleNamespace:
    """A Fetch request as kio decodes it (attributes), from the dicts a fetcher sends."""
    return SimpleNamespace(
        session_id=session_id, session_epoch=epoch,
        topics=[SimpleNamespace(topic=t["topic"], partitions=[SimpleNamespace(**p) for p in t["partitions"]])
                for t in topics],
        forgotten_topics_data=[SimpleNamespace(**f) for f in forgotten or []])


def _part(partition: int, offset: int) -> dict[str, int]:
    return {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "log_start_offset": 0,
            "current_leader_epoch": 0, "last_fetched_epoch": 0}


def _answer(topic: str, partition: int, hw: int, records: bytes = b"", error: int = 0) -> dict[str, Any]:
    return {"topic": topic, "topic_id": None, "partitions": [{
        "partition_index": partition, "error_code": error, "high_watermark": hw, "last_stable_offset": hw,
        "log_start_offset": 0, "preferred_read_replica": -1, "records": records}]}


def _answers(ctx: Any, hws: dict[tuple[str, int], int], records: dict[tuple[str, int], bytes] | None = None
             ) -> list[dict[str, Any]]:
    """What the fetch handler would answer for every partition the context reads."""
    out = []
    for t in ctx.topics:
        parts = [_answer(t.topic, p.partition, hws[(t.topic, p.partition)],
                         (records or {}).get((t.topic, p.partition), b""))["partitions"][0] for p in t.partitions]
        out.append({"topic": t.topic, "topic_id": None, "partitions": parts})
    return out


def _told(responses: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(t["topic"], p["partition_index"]) for t in responses for p in t["partitions"]}


def test_a_full_fetch_opens_a_session_and_the_next_one_answers_only_what_changed() -> None:
    cache = FetchSessionCache(10, seed=1)
    hws = {("t", p): 5 for p in range(4)}
    ctx = cache.context(_request([{"topic": "t", "partitions": [_part(p, 5) for p in range(4)]}], epoch=0), 12,
                        True, 0)
    session_id, answered = cache.finish(ctx, _answers(ctx, hws), 0)
    assert session_id != 0 and _told(answered) == set(hws)

    # nothing moved: an incremental fetch with no partitions reads all four, answers none
    ctx = cache.context(_request([], session_id, 1), 12, True, 1)
    assert [p.partition for t in ctx.topics for p in t.partitions] == [0, 1, 2, 3]
    assert cache.finish(ctx, _answers(ctx, hws), 1) == (session_id, [])

    # partition 2 has records, partition 3's high watermark moved
    hws[("t", 3)] = 6
    ctx = cache.context(_request([], session_id, 2), 12, True, 2)
    _, answered = cache.finish(ctx, _answers(ctx, hws, {("t", 2): b"batch"}), 2)
    assert _told(answered) == {("t", 2), ("t", 3)}
    # ... and were moved to the end of the session's order, so a size-bounded answer serves the others first
    ctx = cache.context(_request([{"topic": "t", "partitions": [_part(2, 6)]}], session_id, 3), 12, True, 3)
    assert [p.partition for t in ctx.topics for p in t.partitions] == [0, 1, 2, 3]
    assert [p.fetch_offset for t in ctx.topics for p in t.partitions if p.partition == 2] == [6]


def test_an_error_is_always_answered_and_the_partition_again_once_it_is_gone() -> None:
    cache = FetchSessionCache(10, seed=1)
    ctx = cache.context(_request([{"topic": "t", "partitions": [_part(0, 5)]}], epoch=0), 12, False, 0)
    session_id, _ = cache.finish(ctx, [_answer("t", 0, 5)], 0)
    for epoch in (1, 2):
        ctx = cache.context(_request([], session_id, epoch), 12, False, 0)
        _, answered = cache.finish(ctx, [_answer("t", 0, -1, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)], 0)
        assert _told(answered) == {("t", 0)}
    ctx = cache.context(_request([], session_id, 3), 12, False, 0)
    _, answered = cache.finish(ctx, [_answer("t", 0, 5)], 0)  # the same watermark as before the error
    assert _told(answered) == {("t", 0)}


def test_session_errors() -> None:
    cache = FetchSessionCache(10, seed=1)
    ctx = cache.context(_request([{"topic": "t", "partitions": [_part(0, 0)]}], epoch=0), 12, False, 0)
    session_id, _ = cache.finish(ctx, [_answer("t", 0, 0)], 0)
    assert cache.context(_request([], session_id + 1, 1), 12, False, 0).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.context(_request([], session_id, 2), 12, False, 0).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # opened with topic names, continued with topic ids: refused, and the session is gone
    assert cache.context(_request([], session_id, 1), 13, False, 0).error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    assert cache.get(session_id) is None


def test_forgetting_every_partition_closes_the_session_and_epoch_minus_one_closes_it_too() -> None:
    cache = FetchSessionCache(10, seed=1)
    for close in ("forget", "final"):
        ctx = cache.context(_request([{"topic": "t", "partitions": [_part(0, 0), _part(1, 0)]}], epoch=0), 12,
                            False, 0)
        session_id, _ = cache.finish(ctx, _answers(ctx, {("t", 0): 0, ("t", 1): 0}), 0)
        if close == "forget":
            ctx = cache.context(_request([], session_id, 1, forgotten=[{"topic": "t", "partitions": [0, 1]}]), 12,
                                False, 0)
        else:
            ctx = cache.context(_request([{"topic": "t", "partitions": [_part(0, 0)]}], session_id, -1), 12, False, 0)
        assert ctx.session is None and cache.get(session_id) is None
        assert cache.finish(ctx, [], 0)[0] == 0
    assert len(cache) == 0


def test_a_full_cache_evicts_a_stale_session_a_follower_evicts_a_consumer_and_a_consumer_nobody() -> None:
    cache = FetchSessionCache(2, eviction_ms=1000, seed=1)

    def opened(privileged: bool, now: int) -> int:
        ctx = cache.context(_request([{"topic": "t", "partitions": [_part(0, 0)]}], epoch=0), 12, privileged, now)
        return cache.finish(ctx, [_answer("t", 0, 0)], now)[0]

    consumer = opened(False, 0)
    follower = opened(True, 10)
    assert opened(False, 20) == 0  # full, nothing stale: sessionless
    assert opened(True, 30) != 0 and cache.get(consumer) is None  # a follower's evicts the consumer's
    assert len(cache) == 2
    assert opened(False, 5000) != 0 and cache.get(follower) is None  # stale (unused 1 s): evicted for anyone
    assert FetchSessionCache(0).finish(FetchSessionCache(0).context(
        _request([{"topic": "t", "partitions": [_part(0, 0)]}], epoch=0), 12, True, 0), [], 0)[0] == 0


def test_the_handler_sends_only_changed_partitions_and_starts_over_after_a_lost_answer() -> None:
    h = FetchSessionHandler()
    wanted = {("t", p): _part(p, 0) for p in range(3)}
    session_id, epoch, topics, forgotten = h.build(wanted)
    assert (session_id, epoch, forgotten) == (0, 0, []) and len(topics[0]["partitions"]) == 3
    h.handle_response(0, 77)
    wanted[("t", 1)] = _part(1, 4)
    del wanted[("t", 2)]
    assert h.build(wanted) == (77, 1, [{"topic": "t", "partitions": [_part(1, 4)]}],
                               [{"topic": "t", "partitions": [2]}])
    # that answer never came (the connection dropped): the next fetch is a full one, closing session 77
    session_id, epoch, topics, _ = h.build(wanted)
    assert (session_id, epoch, len(topics[0]["partitions"])) == (77, 0, 2)
    h.handle_response(0, 78)
    assert h.build(wanted)[:2] == (78, 1)
    h.handle_response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert h.build(wanted)[:2] == (0, 0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sets(st.integers(0, 5)), st.dictionaries(st.integers(0, 5), st.integers(0, 3)),
                          st.sets(st.integers(0, 5)), st.booleans()), min_size=1, max_size=25))
def test_both_sides_together_keep_the_same_session_and_tell_every_change(steps: list[Any]) -> None:
    """Random rounds of: the partitions wanted, fetch offsets moved, partitions with records, and sometimes a
    lost answer. After each round the leader's session holds exactly what the fetcher wants at the offsets it
    sent, and every partition whose watermark moved or had records since it was last told is told."""
    cache, h = FetchSessionCache(4, seed=3), FetchSessionHandler()
    offsets = dict.fromkeys(range(6), 0)
    hws = dict.fromkeys(range(6), 0)
    known_hw: dict[int, int] = {}  # what the fetcher last heard of each partition's high watermark
    for wanted_set, moves, with_records, lost in steps:
        for p, n in moves.items():
            offsets[p] += n
            hws[p] += n
        wanted = {("t", p): _part(p, offsets[p]) for p in sorted(wanted_set)}
        if not wanted:
            continue
        session_id, epoch, topics, forgotten = h.build(wanted)
        ctx = cache.context(_request(topics, session_id, epoch, forgotten), 12, True, 0)
        assert not ctx.error
        read = {(t.topic, p.partition): p.fetch_offset for t in ctx.topics for p in t.partitions}
        if ctx.session is not None or epoch == 0:
            assert read == {k: v["fetch_offset"] for k, v in wanted.items()}
        answers = _answers(ctx, {k: hws[k[1]] for k in read}, {k: b"r" for k in read if k[1] in with_records})
        new_id, told = cache.finish(ctx, answers, 0)
        if lost:
            continue
        h.handle_response(0, new_id)
        heard = {(t["topic"], p["partition_index"]): p["high_watermark"] for t in told for p in t["partitions"]}
        for (_, p), hw in heard.items():
            known_hw[p] = hw
        for key in read:
            assert known_hw.get(key[1]) == hws[key[1]], (key, known_hw, hws)
            if key[1] in with_records:
                assert key in heard
