"""The SQLite coordinator's schema, its canonical dump, and snapshot/restore.

The tables follow Inkless's Postgres schema (``logs``, ``files``, ``batches``, ``producer_state``) plus
the transaction state Kafka's partition leader keeps and Inkless lacks: ``producers`` (the current
producer and coordinator epochs), ``ongoing_txns`` (producer -> first offset, whose minimum is the last
stable offset) and ``aborted_txns`` (what read_committed fetches filter out, Kafka's ``.txnindex``).

Every replica of ``__diskless_metadata`` materialises this database by replaying the same commands;
:func:`dump` renders it canonically so replicas (and the in-memory implementation) can be compared by
digest, and :func:`snapshot`/:func:`restore` move a whole database through the object store.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 2
"""2: ``logs.leader_epoch`` (the epoch of a switched partition's diskless batches)."""

# topic_id is the UUID's canonical text: it sorts like the UUID and reads well in a debugging session.
DDL = """
CREATE TABLE journal (                          -- the __diskless_metadata offset this state has applied
    id INTEGER PRIMARY KEY CHECK (id = 0),
    applied_offset INTEGER NOT NULL             -- -1: nothing applied yet
);
INSERT INTO journal (id, applied_offset) VALUES (0, -1);
CREATE TABLE logs (
    topic_id TEXT NOT NULL,
    partition INTEGER NOT NULL,
    topic_name TEXT NOT NULL,
    log_start_offset INTEGER NOT NULL,
    high_watermark INTEGER NOT NULL,            -- the next offset to assign; also the log end offset
    byte_size INTEGER NOT NULL,                 -- sum of the partition's batch sizes (size retention)
    diskless_start_offset INTEGER NOT NULL DEFAULT 0,
    remote_log_start_offset INTEGER,            -- cross-tier earliest offset; only moves forward
    earliest_batch_timestamp INTEGER,           -- effective timestamp of the first batch row, NULL if none
    leader_epoch INTEGER NOT NULL DEFAULT 0,    -- stamped on its diskless batches (a switch's: the seal's epoch)
    PRIMARY KEY (topic_id, partition)
) WITHOUT ROWID;

CREATE TABLE files (
    file_id INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: ids are never reused, on every replica
    object_key TEXT NOT NULL UNIQUE,
    format INTEGER NOT NULL,
    reason TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('uploaded', 'deleting')),
    uploader_broker_id INTEGER NOT NULL,
    committed_at INTEGER NOT NULL,
    marked_for_deletion_at INTEGER,
    size INTEGER NOT NULL
);
CREATE INDEX files_deleting ON files (marked_for_deletion_at) WHERE state = 'deleting';

CREATE TABLE batches (
    batch_id INTEGER PRIMARY KEY AUTOINCREMENT, -- commit order
    magic INTEGER NOT NULL,
    topic_id TEXT NOT NULL,
    partition INTEGER NOT NULL,
    base_offset INTEGER NOT NULL,               -- absolute, inclusive
    last_offset INTEGER NOT NULL,
    file_id INTEGER NOT NULL REFERENCES files (file_id) ON DELETE RESTRICT,
    byte_offset INTEGER NOT NULL,
    byte_size INTEGER NOT NULL,
    timestamp_type INTEGER NOT NULL,
    log_append_timestamp INTEGER NOT NULL,      -- the committing broker's clock
    batch_max_timestamp INTEGER NOT NULL,
    FOREIGN KEY (topic_id, partition) REFERENCES logs (topic_id, partition)
);
CREATE INDEX batches_by_last_offset ON batches (topic_id, partition, last_offset);
CREATE INDEX batches_by_file ON batches (file_id);

CREATE TABLE producers (
    topic_id TEXT NOT NULL,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    producer_epoch INTEGER NOT NULL,            -- raised by batches and by markers (fencing)
    coordinator_epoch INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id)
) WITHOUT ROWID;

CREATE TABLE producer_state (                   -- the idempotence window: last 5 batches of the epoch
    topic_id TEXT NOT NULL,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    row_id INTEGER NOT NULL,                    -- position in the window, oldest first
    producer_epoch INTEGER NOT NULL,
    base_sequence INTEGER NOT NULL,
    last_sequence INTEGER NOT NULL,
    assigned_offset INTEGER NOT NULL,
    batch_timestamp INTEGER NOT NULL,           -- answered to a duplicate
    PRIMARY KEY (topic_id, partition, producer_id, row_id)
) WITHOUT ROWID;

CREATE TABLE ongoing_txns (
    topic_id TEXT NOT NULL,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id)
) WITHOUT ROWID;
CREATE INDEX ongoing_by_first_offset ON ongoing_txns (topic_id, partition, first_offset);

-- Key columns first in every WITHOUT ROWID table: SQLite 3.40's integrity_check misreports NOT NULL
-- columns that precede a key column as NULL, and restore() runs that check.
CREATE TABLE aborted_txns (
    topic_id TEXT NOT NULL,
    partition INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,               -- the ABORT marker's offset: unique per partition
    producer_id INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset)
) WITHOUT ROWID;
"""

# The effective timestamp of a batch row (``api.effective_timestamp``) in SQL.
EFFECTIVE_TS = "CASE WHEN timestamp_type = 1 THEN log_append_timestamp ELSE batch_max_timestamp END"

_DUMP_QUERIES = {
    "logs": "SELECT * FROM logs ORDER BY topic_id, partition",
    "files": "SELECT file_id, object_key, format, reason, state, uploader_broker_id, committed_at, "
             "marked_for_deletion_at, size FROM files ORDER BY file_id",
    "batches": "SELECT batch_id, magic, topic_id, partition, base_offset, last_offset, file_id, byte_offset, "
               "byte_size, timestamp_type, log_append_timestamp, batch_max_timestamp FROM batches ORDER BY batch_id",
    "producers": "SELECT * FROM producers ORDER BY topic_id, partition, producer_id",
    "producer_state": "SELECT * FROM producer_state ORDER BY topic_id, partition, producer_id, row_id",
    "ongoing_txns": "SELECT * FROM ongoing_txns ORDER BY topic_id, partition, producer_id",
    "aborted_txns": "SELECT topic_id, partition, producer_id, first_offset, last_offset FROM aborted_txns "
                    "ORDER BY topic_id, partition, last_offset",
}


def open_database(path: str) -> sqlite3.Connection:
    """Open (creating if needed) a coordinator database in autocommit mode: every command opens its
    own ``BEGIN IMMEDIATE`` transaction, so one command is one SQLite transaction."""
    conn = sqlite3.connect(path, isolation_level=None)
    configure(conn, wal=path != ":memory:")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == 0:
        conn.executescript(f"BEGIN; {DDL} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
    elif version in _MIGRATIONS:
        migrate(conn)
    elif version != SCHEMA_VERSION:
        conn.close()
        raise RuntimeError(f"diskless coordinator database {path} has schema {version}, expected {SCHEMA_VERSION}")
    return conn


_MIGRATIONS = {1: "ALTER TABLE logs ADD COLUMN leader_epoch INTEGER NOT NULL DEFAULT 0;"}


def migrate(conn: sqlite3.Connection) -> None:
    """Bring an older database (or snapshot) to :data:`SCHEMA_VERSION`, one step at a time."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    while version in _MIGRATIONS:
        conn.executescript(f"BEGIN; {_MIGRATIONS[version]} PRAGMA user_version = {version + 1}; COMMIT;")
        version += 1


def configure(conn: sqlite3.Connection, *, wal: bool) -> None:
    conn.execute("PRAGMA foreign_keys = ON")
    if wal:
        # The replicated command log is the source of truth, so a lost tail after a power cut is
        # replayed again: NORMAL sync is enough.
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")


def dump(conn: sqlite3.Connection) -> dict[str, list[tuple[object, ...]]]:
    """Every table's rows in key order, plus the id sequences (they decide the next ids)."""
    tables = {name: [tuple(r) for r in conn.execute(q)] for name, q in _DUMP_QUERIES.items()}
    seqs = dict(conn.execute("SELECT name, seq FROM sqlite_sequence").fetchall())
    tables["sequences"] = [("batches", seqs.get("batches", 0)), ("files", seqs.get("files", 0))]
    return tables


def snapshot(conn: sqlite3.Connection) -> bytes:
    """The whole database as bytes (SQLite's serialize API, which reads through the pager, so pages
    still in the WAL are included), e.g. to upload to the object store.

    A file-backed replica runs in WAL mode, and its header says so (format versions 2 at bytes 18-19);
    SQLite cannot open such an image in memory, so the snapshot is marked as a rollback-journal database.
    """
    data = bytearray(conn.serialize())
    if data[18:20] == b"\x02\x02":
        data[18:20] = b"\x01\x01"
    return bytes(data)


def restore(conn: sqlite3.Connection, data: bytes) -> None:
    """Replace the database behind ``conn`` with a snapshot, through SQLite's backup API so it works
    for file-backed databases too. The snapshot's schema version is checked before anything changes."""
    scratch = sqlite3.connect(":memory:")
    try:
        scratch.deserialize(data)
        migrate(scratch)
        version = scratch.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise ValueError(f"snapshot has schema {version}, expected {SCHEMA_VERSION}")
        if scratch.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            raise ValueError("snapshot fails SQLite's integrity check")
        scratch.backup(conn)
    except sqlite3.DatabaseError as e:
        raise ValueError(f"not a coordinator snapshot: {e}") from e
    finally:
        scratch.close()
