"""What only the SQLite coordinator has: a database file, snapshots, digests, atomic commands."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tests.unit.diskless.cp_helpers import NOW, RC, T1, batch, commit, create, find, log_info, marker, wal

from strata.diskless.coordinator import InMemoryControlPlane, SqliteControlPlane
from strata.diskless.coordinator.api import (
    ControlPlane,
    ControlRecordType,
    DeleteRecordsRequest,
    FileAlreadyCommittedError,
    InvalidCommitError,
)


def scenario(cp: ControlPlane, key_prefix: str = "") -> None:
    """A bit of everything: coalesced rows, idempotence, an aborted and an open transaction, deletes."""
    create(cp)
    cp.commit_file(wal(batch(0, 2), batch(0, 3), batch(1, pid=1, epoch=0, seq=0), key=f"{key_prefix}a"), now_ms=NOW)
    cp.commit_file(wal(batch(0, pid=2, epoch=0, seq=0, txn=True), batch(1, pid=1, epoch=0, seq=1),
                       key=f"{key_prefix}b"), now_ms=NOW + 1)
    cp.commit_file(wal(marker(0, 2, 0, ControlRecordType.ABORT), key=f"{key_prefix}c"), now_ms=NOW + 2)
    cp.commit_file(wal(batch(1, pid=3, epoch=0, seq=0, txn=True), key=f"{key_prefix}d"), now_ms=NOW + 3)
    cp.delete_records([DeleteRecordsRequest(T1, 0, 5)], now_ms=NOW + 4)


def test_replaying_the_same_commands_gives_the_same_state_in_both_implementations(tmp_path: Path) -> None:
    replicas = [SqliteControlPlane(str(tmp_path / "a.db")), SqliteControlPlane(), InMemoryControlPlane()]
    for cp in replicas:
        scenario(cp)
    assert len({cp.state_digest() for cp in replicas}) == 1
    assert replicas[0].dump()["aborted_txns"] == [(str(T1), 0, 2, 5, 6)]
    assert replicas[0].dump()["ongoing_txns"] == [(str(T1), 1, 3, 2)]


def test_the_digest_sees_every_table(tmp_path: Path) -> None:
    a, b = SqliteControlPlane(), SqliteControlPlane()
    scenario(a)
    scenario(b)
    b.files_to_delete(now_ms=NOW + 10, grace_period_ms=0)  # a query changes nothing
    assert a.state_digest() == b.state_digest()
    commit(b, batch(1, pid=1, epoch=0, seq=1))  # a duplicate: only the file row is new
    assert a.state_digest() != b.state_digest()


@pytest.mark.parametrize("target", ["memory", "file"])
def test_snapshot_restores_the_same_state_and_replay_continues(tmp_path: Path, target: str) -> None:
    leader = SqliteControlPlane(str(tmp_path / "leader.db"))  # WAL mode: the snapshot must still open
    scenario(leader)
    replica = SqliteControlPlane(":memory:" if target == "memory" else str(tmp_path / "replica.db"))
    commit(replica, key="stale")  # whatever it had is replaced
    replica.restore(leader.snapshot())
    assert replica.state_digest() == leader.state_digest()
    assert find(replica, 0, 5, isolation=RC) == find(leader, 0, 5, isolation=RC)
    for cp in (leader, replica):  # the next commands give both the same answers and state
        assert commit(cp, batch(1, pid=1, epoch=0, seq=2), key="next")[0].assigned_base_offset == 3
    assert replica.state_digest() == leader.state_digest()
    if target == "file":
        replica.close()
        reopened = SqliteControlPlane(str(tmp_path / "replica.db"))
        assert reopened.state_digest() == leader.state_digest()


def test_a_bad_snapshot_is_refused_and_changes_nothing() -> None:
    cp = SqliteControlPlane()
    scenario(cp)
    before = cp.state_digest()
    with pytest.raises(ValueError):
        cp.restore(b"not a database" * 100)
    other = sqlite3.connect(":memory:")
    other.execute("CREATE TABLE t (x)")
    with pytest.raises(ValueError, match="schema"):
        cp.restore(other.serialize())
    assert cp.state_digest() == before


def test_a_database_of_another_schema_version_is_not_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(RuntimeError, match="schema 99"):
        SqliteControlPlane(str(path))


def test_a_failing_command_rolls_back_everything_it_did() -> None:
    cp = SqliteControlPlane()
    scenario(cp)
    before = cp.state_digest()
    with pytest.raises(FileAlreadyCommittedError):
        commit(cp, batch(0), key="a")
    with pytest.raises(InvalidCommitError):
        commit(cp, batch(0), batch(0, size=0))
    assert cp.state_digest() == before
    assert log_info(cp).high_watermark == 7
