"""``__consumer_offsets`` stays bounded by the live groups, not by how often they commit.

A real broker with small ``offsets.topic.segment.bytes`` segments and a short
``log.cleaner.backoff.ms``; simple (generation -1, no member) OffsetCommits of many groups, each
request committing every partition of one topic for one group, round after round, one request at a time
over one connection (:class:`~tests.broker.kafka_wire.WireClient`). Once the cleaner has caught up, the
``.log`` bytes of all ``__consumer_offsets`` partitions must be under :func:`size_bound`:

* ``live records x LIVE_RECORD_BYTES``: each live (group, topic, partition) key keeps one record of
  ~59 B (key: int16 version + group + topic + int32 partition; value v3: version, offset, leader
  epoch, metadata, commit timestamp; record framing), and at worst a 61 B batch header of its own;
* ``+ segment.bytes`` per ``__consumer_offsets`` partition: the active segment, which is never cleaned;
* ``+ segment.bytes`` per partition again: one rolled segment the cleaner may not have taken yet
  (``min.cleanable.dirty.ratio`` 0.5 lets a dirty tail up to the clean section's size wait).

Without the cleaner the log holds every commit (``rounds`` times the live records), so the bound fails
by an order of magnitude. After a restart every group's committed offsets are served exactly as last
committed (OffsetFetch): compaction kept the last record of each key.

The helpers here are also what ``bench/cleaner_bench.py`` uses to measure the offsets load time.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, decode_response
from tests.compaction.harness import wait_until

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_COMMIT, OFFSET_COMMIT_VERSION = 8, 8
OFFSET_FETCH, OFFSET_FETCH_VERSION = 9, 8  # v8: several groups per request
LIVE_RECORD_BYTES = 128  # a live commit record (~59 B) plus, at worst, a batch header (61 B) of its own
SEGMENT_BYTES = 16 * 1024
NUM_OFFSETS_PARTITIONS = 5
PIPELINE = 64  # OffsetCommit requests in flight on the connection (commit_rounds' default)


def broker_props(segment_bytes: int = SEGMENT_BYTES, cleaner: bool = True, backoff_ms: int = 100) -> dict[str, str]:
    return {"offsets.topic.num.partitions": str(NUM_OFFSETS_PARTITIONS),
            "offsets.topic.segment.bytes": str(segment_bytes),
            "log.cleaner.enable": "true" if cleaner else "false",
            "log.cleaner.backoff.ms": str(backoff_ms)}


def group_name(g: int) -> str:
    return f"group-{g:03d}"


def committed_offset(rnd: int, g: int, p: int) -> int:
    """What round ``rnd`` commits for group ``g``, partition ``p``: unique per (round, group, partition)."""
    return (rnd + 1) * 1_000_000 + g * 1000 + p


def expected_offsets(groups: int, partitions: int, rounds: int) -> dict[str, dict[int, int]]:
    return {group_name(g): {p: committed_offset(rounds - 1, g, p) for p in range(partitions)} for g in range(groups)}


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def commit_rounds(bootstrap: str, topic: str, groups: int, partitions: int, rounds: int,
                  first_round: int = 0, pipeline: int = PIPELINE) -> int:
    """``rounds`` rounds; in each, one OffsetCommit per group committing all ``partitions`` of ``topic``,
    up to ``pipeline`` requests in flight. Returns the commit records written (groups x partitions x rounds).
    Every partition must answer NONE."""
    pending: collections.deque[int] = collections.deque()
    records = 0
    with WireClient(bootstrap, timeout_s=120) as w:

        def answered() -> None:
            correlation = pending.popleft()
            got, body = decode_response(OFFSET_COMMIT, OFFSET_COMMIT_VERSION, w.recv_frame())
            assert got == correlation, (got, correlation)
            errors = [int(p.error_code) for t in body.topics for p in t.partitions]
            assert errors == [0] * partitions, f"OffsetCommit answered {collections.Counter(errors)}"

        for rnd in range(first_round, first_round + rounds):
            for g in range(groups):
                pending.append(w.send(
                    OFFSET_COMMIT, OFFSET_COMMIT_VERSION, group_id=group_name(g), generation_id_or_member_epoch=-1,
                    member_id="", group_instance_id=None, retention_time_ms=-1,
                    topics=[{"name": topic, "partitions": [
                        {"partition_index": p, "committed_offset": committed_offset(rnd, g, p),
                         "committed_leader_epoch": -1, "committed_metadata": ""} for p in range(partitions)]}]))
                records += partitions
                if len(pending) >= pipeline:
                    answered()
        while pending:
            answered()
    return records


def fetch_committed(bootstrap: str, topic: str, groups: int, partitions: int,
                    timeout_s: float = 30.0) -> dict[str, dict[int, int]]:
    """Every group's committed offsets of ``topic`` (one OffsetFetch v8 for all groups); -1: none."""
    with WireClient(bootstrap, timeout_s=timeout_s) as w:
        resp = w.call(OFFSET_FETCH, OFFSET_FETCH_VERSION, require_stable=False, groups=[
            {"group_id": group_name(g), "topics": [{"name": topic, "partition_indexes": list(range(partitions))}]}
            for g in range(groups)])
    out: dict[str, dict[int, int]] = {}
    for group in resp.groups:
        assert int(group.error_code) == 0, (group.group_id, int(group.error_code))
        offsets = out.setdefault(group.group_id, {})
        for t in group.topics:
            for p in t.partitions:
                assert int(p.error_code) == 0, (group.group_id, p.partition_index, int(p.error_code))
                offsets[p.partition_index] = p.committed_offset
    return out


def offsets_topic_bytes(logs_dir: Path) -> dict[str, Any]:
    """On-disk state of all ``__consumer_offsets-*`` directories: ``.log`` bytes (st_size), bytes of every
    file (st_size; the active segment's index files are preallocated), allocated bytes (st_blocks),
    segment count."""
    log_bytes = apparent = allocated = segments = 0
    for d in logs_dir.glob(f"{OFFSETS_TOPIC}-*"):
        for f in d.iterdir():
            try:
                st = f.stat()
            except FileNotFoundError:  # a segment deleted or swapped while we looked
                continue
            if not f.is_file():
                continue
            apparent += st.st_size
            allocated += st.st_blocks * 512
            if f.name.endswith(".log"):
                log_bytes += st.st_size
                segments += 1
    return {"log_bytes": log_bytes, "file_bytes": apparent, "allocated_bytes": allocated, "segments": segments}


def size_bound(live_records: int, segment_bytes: int, partitions: int = NUM_OFFSETS_PARTITIONS) -> int:
    """The module docstring's bound on the ``.log`` bytes of ``__consumer_offsets``."""
    return live_records * LIVE_RECORD_BYTES + 2 * partitions * segment_bytes


def wait_until_bounded(logs_dir: Path, bound: int, timeout_s: float) -> dict[str, Any]:
    """Poll until the ``.log`` bytes are at or under ``bound``; the last measurement on timeout."""
    last: dict[str, Any] = {}

    def bounded() -> bool:
        last.update(offsets_topic_bytes(logs_dir))
        return bool(last["log_bytes"] <= bound)

    try:
        wait_until(f"__consumer_offsets under {bound} bytes", bounded, timeout_s=timeout_s, interval_s=0.25)
    except AssertionError as e:
        raise AssertionError(f"{e}: last measured {last}") from None
    return last


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", broker_props())
    try:
        yield b
    finally:
        b.stop()


def cleaner_failures(b: BrokerProcess) -> list[str]:
    """The broker's log lines saying a cleaning failed or a cleaner thread died."""
    text = b.log_path.read_bytes().decode(errors="replace")
    return [line for line in text.splitlines()
            if "marked uncleanable" in line or ("cleaner thread" in line and "died" in line)]


def run_bounded(b: BrokerProcess, groups: int, partitions: int, rounds: int, segment_bytes: int,
                clean_timeout_s: float) -> None:
    b.start()
    create_topic(b.bootstrap, "consumed", partitions)
    # One request in flight: the broker serves a connection's buffered requests without yielding to its
    # event loop, so a deep pipeline holds off the cleaner's calls on the log thread until the commits end.
    # Committing request by request, as a consumer does, the cleaner swaps segments between the appends.
    written = commit_rounds(b.bootstrap, "consumed", groups, partitions, rounds, pipeline=1)
    assert written == groups * partitions * rounds
    logs = b.data_dir / "logs"
    live = groups * partitions
    bound = size_bound(live, segment_bytes)
    raw = written * 55  # uncompacted, each commit record takes at least 55 B (~59): the bound must be far below
    assert bound * 5 < raw, (bound, raw)
    started = time.monotonic()
    state = wait_until_bounded(logs, bound, clean_timeout_s)
    print(f"__consumer_offsets after {written} commit records of {live} keys: {state} "
          f"(bound {bound}, reached {time.monotonic() - started:.1f} s after the last commit)")
    expected = expected_offsets(groups, partitions, rounds)
    assert fetch_committed(b.bootstrap, "consumed", groups, partitions) == expected
    b.restart()
    assert fetch_committed(b.bootstrap, "consumed", groups, partitions) == expected
    # the restart loaded the compacted log: still bounded
    assert offsets_topic_bytes(logs)["log_bytes"] <= bound
    assert not cleaner_failures(b)


def test_offsets_topic_stays_bounded_by_live_groups_and_reloads_exactly(broker: BrokerProcess) -> None:
    """100,000 commit records: 20 groups x 50 partitions x 100 rounds."""
    run_bounded(broker, groups=20, partitions=50, rounds=100, segment_bytes=SEGMENT_BYTES, clean_timeout_s=40)


@pytest.mark.slow
def test_offsets_topic_bounded_after_a_million_commits(tmp_path: Path) -> None:
    """1,000,000 commit records: 100 groups x 100 partitions x 100 rounds, 256 KiB segments."""
    segment_bytes = 256 * 1024
    b = BrokerProcess(tmp_path / "broker", broker_props(segment_bytes=segment_bytes, backoff_ms=200))
    try:
        run_bounded(b, groups=100, partitions=100, rounds=100, segment_bytes=segment_bytes, clean_timeout_s=180)
    finally:
        b.stop()
