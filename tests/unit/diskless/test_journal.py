"""The topic-based coordinator's journal: commands applied in log order, once committed, on every replica.

The command log here is a list with a settable high watermark (one module's unit test); the broker's
implementation over ``__diskless_metadata`` is exercised by the broker tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.unit.diskless.cp_helpers import NOW, T1, batch, wal

from strata.diskless.coordinator.api import CreatePartitionsRequest, FindBatchRequest, InvalidCommitError
from strata.diskless.coordinator.commands import KINDS, Command, decode, encode
from strata.diskless.coordinator.journal import CoordinatorUnavailableError, JournaledControlPlane
from strata.errors import ApiError, ErrorCode


class ListLog:
    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None]] = []
        self.hw = 0
        self.start = 0
        self.auto_commit = True

    async def append(self, key: bytes, value: bytes) -> int:
        self.records.append((key, value))
        if self.auto_commit:
            self.hw = len(self.records)
        return len(self.records) - 1

    async def wait_committed(self, offset: int, timeout_s: float) -> None:
        for _ in range(200):
            if self.hw > offset:
                return
            await asyncio.sleep(0.005)
        raise ApiError(ErrorCode.REQUEST_TIMED_OUT, "not committed")

    def high_watermark(self) -> int:
        return self.hw

    def log_start_offset(self) -> int:
        return self.start

    def read(self, start: int, end: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        for offset in range(max(start, self.start), min(end, len(self.records))):
            yield offset, *self.records[offset]


CREATE = [CreatePartitionsRequest(T1, "topic-1", 2)]


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_every_command_kind_round_trips() -> None:
    commit = wal(batch(0, 3, pid=4, epoch=1, seq=7, txn=True), batch(1))
    for command in [Command("commit_file", NOW, commit), Command("create_partitions", NOW, CREATE),
                    Command("noop", NOW), Command("delete_topic", NOW, T1), Command("delete_files", NOW, ["a"])]:
        assert decode(*encode(command)) == command
    assert set(KINDS) >= {"commit_file", "create_partitions", "delete_records", "enforce_retention",
                          "prune_batches", "advance_log_start", "delete_topic", "delete_files", "noop"}


def test_leader_and_follower_reach_the_same_state_and_a_restart_applies_nothing_twice(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = ListLog()
        leader = JournaledControlPlane(log, str(tmp_path / "leader.db"), lambda: NOW)
        follower = JournaledControlPlane(log, str(tmp_path / "follower.db"), lambda: NOW + 999_999)
        await leader.start()
        await follower.start()
        await leader.execute("create_partitions", CREATE)
        answers = await leader.execute("commit_file", wal(batch(0, 3), batch(1, 2)))
        assert [a.assigned_base_offset for a in answers] == [0, 0]
        answers = await leader.execute("commit_file", wal(batch(0, 1)))
        assert answers[0].assigned_base_offset == 3
        assert await follower.catch_up() == 2
        digests = [await cp.query(lambda s: s.state_digest()) for cp in (leader, follower)]
        assert digests[0] == digests[1]  # the follower's clock played no part: each command carries its own
        await follower.close()
        again = JournaledControlPlane(log, str(tmp_path / "follower.db"), lambda: NOW)
        await again.start()
        assert again.applied_offset == 2
        assert await again.catch_up() == 2 and again.commands_applied == 0
        assert await again.query(lambda s: s.state_digest()) == digests[0]
        await again.close()
        await leader.close()
    run(scenario())


def test_an_uncommitted_record_is_not_applied(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = ListLog()
        leader = JournaledControlPlane(log, str(tmp_path / "l.db"), lambda: NOW)
        await leader.start()
        await leader.execute("create_partitions", CREATE)
        log.auto_commit = False
        with pytest.raises(ApiError):
            await leader.execute("commit_file", wal(batch(0, 3)))
        found = await leader.query(lambda s: s.find_batches([FindBatchRequest(T1, 0, 0, 1 << 20)],
                                                            fetch_max_bytes=1 << 20))
        assert found[0].high_watermark == 0  # appended, never committed: not in the state
        log.hw = len(log.records)  # now the ISR has it: the next catch-up applies it
        assert await leader.catch_up() == 1
        await leader.close()
    run(scenario())


def test_an_answer_applied_by_a_concurrent_replay_still_in_its_thread_is_waited_for(tmp_path: Path) -> None:
    """The replay loop's catch-up applies a command in the coordinator's thread (which moves the applied
    offset there) and hands out the answers when it returns to the event loop. A command whose append
    returns in between (a forwarded append answered late, as an observer's is) must wait for that hand-out,
    not fail as "not applied" (seen once in the cluster suite)."""
    import time as time_module

    class RacingLog(ListLog):
        journal: JournaledControlPlane

        async def append(self, key: bytes, value: bytes) -> int:
            offset = await super().append(key, value)
            asyncio.get_running_loop().create_task(self.journal.catch_up())  # the replay loop
            while self.journal.applied_offset < offset:  # the thread applied it; the outcome is not out yet
                await asyncio.sleep(0.001)
            return offset

    async def scenario() -> None:
        log = RacingLog()
        journal = log.journal = JournaledControlPlane(log, str(tmp_path / "o.db"), lambda: NOW)
        await journal.start()
        apply_all = journal._apply_all

        def slow_after_applying(records):  # type: ignore[no-untyped-def]
            out = apply_all(records)
            time_module.sleep(0.2)  # the thread is done applying; the loop has not seen its answers
            return out
        journal._apply_all = slow_after_applying  # type: ignore[method-assign]
        await journal.execute("create_partitions", CREATE)
        answers = await journal.execute("commit_file", wal(batch(0, 3)))
        assert answers[0].assigned_base_offset == 0
        await journal.close()
    run(scenario())


def test_a_refused_commit_is_answered_on_every_replica_alike_and_replay_moves_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = ListLog()
        leader = JournaledControlPlane(log, str(tmp_path / "l.db"), lambda: NOW)
        await leader.start()
        await leader.execute("create_partitions", CREATE)
        good = wal(batch(0, 1), key="k")
        await leader.execute("commit_file", good)
        with pytest.raises(InvalidCommitError):
            await leader.execute("commit_file", good)  # the same key twice
        await leader.execute("noop")
        assert leader.applied_offset == 3
        await leader.close()
    run(scenario())


def test_a_record_this_broker_cannot_read_stops_the_replica_instead_of_diverging(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = ListLog()
        leader = JournaledControlPlane(log, str(tmp_path / "l.db"), lambda: NOW)
        await leader.start()
        await log.append(b"commit_file", b'{"v": 99}')
        await leader.catch_up()
        assert leader.applied_offset == -1
        with pytest.raises(CoordinatorUnavailableError) as e:
            await leader.execute("noop")
        assert e.value.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "offset 0" in str(e.value)
        await leader.close()
    run(scenario())


def test_a_replica_whose_commands_were_truncated_away_restores_the_snapshot_and_replays_the_rest(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        log = ListLog()
        snapshots: dict[int, bytes] = {}

        async def newest(at_least: int) -> bytes | None:
            found = [o for o in snapshots if o >= at_least]
            return snapshots[max(found)] if found else None
        leader = JournaledControlPlane(log, str(tmp_path / "l.db"), lambda: NOW, newest)
        await leader.start()
        await leader.execute("create_partitions", CREATE)
        for i in range(5):
            await leader.execute("commit_file", wal(batch(0, 2), key=f"k{i}"))
        offset, image = await leader.snapshot()
        assert offset == 5
        snapshots[offset] = image
        log.start = offset + 1  # the log is truncated below the snapshot
        await leader.execute("commit_file", wal(batch(0, 2), key="after"))
        fresh = JournaledControlPlane(log, str(tmp_path / "fresh.db"), lambda: NOW, newest)
        await fresh.start()
        assert await fresh.catch_up() == 6
        assert await fresh.query(lambda s: s.state_digest()) == await leader.query(lambda s: s.state_digest())
        lost = JournaledControlPlane(log, str(tmp_path / "lost.db"), lambda: NOW)  # no snapshot to restore
        await lost.start()
        with pytest.raises(CoordinatorUnavailableError, match="no snapshot"):
            await lost.catch_up()
        for cp in (leader, fresh, lost):
            await cp.close()
    run(scenario())
