"""``strata dump-log``, ``strata demo`` and ``strata serve`` config errors, as subprocesses.

The logs are written through the real log layer (``load_partition_log`` + ``append_as_leader``), then
damaged on disk the ways a crash or a bad disk damages them.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from strata.config import LogConfig
from strata.log.producer_state import AppendOrigin
from strata.protocol.records import BatchBuilder, CompressionType, ControlRecordType, build_control_batch

SRC = Path(__file__).resolve().parents[2] / "src"
SEGMENT = "00000000000000000000"
T0 = 1_700_000_000_000
# An index entry for every batch but the first (an entry is written once more than 1 byte went by).
CONFIG = LogConfig(index_interval_bytes=1)


def strata(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "strata", *map(str, args)], capture_output=True, text=True,
                            timeout=120, env=env, cwd=cwd)
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout
    return result


@dataclass
class Batch:
    base_offset: int
    last_offset: int
    position: int
    size: int


BATCH_LINE = re.compile(
    r"^baseOffset: (?P<base>\d+) lastOffset: (?P<last>\d+) count: (?P<count>\d+) .* "
    r"position: (?P<position>\d+) CreateTime: (?P<ts>\d+) size: (?P<size>\d+) magic: 2 "
    r"compresscodec: (?P<codec>\w+) crc: (?P<crc>\d+) isvalid: (?P<valid>true|false)$"
)


def batch_lines(stdout: str) -> list[re.Match[str]]:
    return [m for line in stdout.splitlines() if (m := BATCH_LINE.match(line))]


def write_log(open_log, clock, counts=(3, 2, 4, 1, 5)) -> tuple[Path, list[Batch]]:
    """One segment of uncompressed batches with known offsets, timestamps, keys and headers."""
    plog = open_log(CONFIG)
    batches = []
    position = offset = 0
    for i, n in enumerate(counts):
        builder = BatchBuilder()
        for j in range(n):
            headers = [("h1", b"x")] if j == 0 else []
            builder.append(f"value-{offset + j}".encode(), key=f"k{offset + j}".encode(), headers=headers,
                           timestamp=T0 + 10 * i + j)
        data = builder.build()
        info = plog.append_as_leader(data, leader_epoch=0)
        assert (info.first_offset, info.last_offset) == (offset, offset + n - 1)
        batches.append(Batch(offset, offset + n - 1, position, len(data)))
        position += len(data)
        offset += n
    plog.close()
    return plog.dir, batches


@pytest.fixture
def segment(open_log, clock) -> tuple[Path, list[Batch]]:
    return write_log(open_log, clock)


# -- .log --------------------------------------------------------------------------------------


def test_batches_with_exact_offsets_and_positions(segment):
    directory, batches = segment
    result = strata("dump-log", directory / f"{SEGMENT}.log")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"Dumping {directory / f'{SEGMENT}.log'}"
    assert lines[1] == "Log starting offset: 0"
    found = batch_lines(result.stdout)
    assert [(int(m["base"]), int(m["last"]), int(m["position"]), int(m["size"])) for m in found] == [
        (b.base_offset, b.last_offset, b.position, b.size) for b in batches
    ]
    assert all(m["valid"] == "true" and m["codec"] == "none" for m in found)
    assert [int(m["ts"]) for m in found] == [T0 + 10 * i + (b.last_offset - b.base_offset)
                                             for i, b in enumerate(batches)]
    assert found[0].group(0).startswith(
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: "
    )
    assert not [line for line in lines if line.startswith("|")]  # no records without --records


def test_records_lines(segment):
    directory, _ = segment
    result = strata("dump-log", "--records", directory / f"{SEGMENT}.log")
    assert result.returncode == 0, result.stdout
    records = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert len(records) == 15
    assert records[0] == (f"| offset: 0 CreateTime: {T0} keySize: 2 valueSize: 7 sequence: -1 headerKeys: [h1] "
                          f"key: k0 payload: value-0")
    assert records[1] == (f"| offset: 1 CreateTime: {T0 + 1} keySize: 2 valueSize: 7 sequence: -1 headerKeys: [] "
                          f"key: k1 payload: value-1")
    assert [int(r.split()[2]) for r in records] == list(range(15))
    deep = strata("dump-log", "--deep-iteration", directory / f"{SEGMENT}.log")
    deep_records = [line for line in deep.stdout.splitlines() if line.startswith("| ")]
    assert len(deep_records) == 15 and "payload:" not in deep.stdout and "key:" not in deep.stdout


def test_flipped_byte_marks_only_that_batch_invalid(segment):
    directory, batches = segment
    log_path = directory / f"{SEGMENT}.log"
    data = bytearray(log_path.read_bytes())
    data[batches[2].position + 61 + 3] ^= 0x01  # inside the records: covered by the CRC
    log_path.write_bytes(data)
    result = strata("dump-log", log_path)
    assert result.returncode == 1
    found = batch_lines(result.stdout)
    assert len(found) == len(batches)  # framing intact: the scan goes on past the bad batch
    assert [m["valid"] for m in found] == ["true", "true", "false", "true", "true"]
    assert f"Corrupt batch at position {batches[2].position}" in result.stdout


def test_flipped_leader_epoch_is_outside_the_crc(segment):
    """Kafka's layout: the partition leader epoch is patched on append, so it is not covered by the CRC."""
    directory, batches = segment
    log_path = directory / f"{SEGMENT}.log"
    data = bytearray(log_path.read_bytes())
    data[batches[1].position + 15] ^= 0x01
    log_path.write_bytes(data)
    result = strata("dump-log", log_path)
    assert result.returncode == 0
    assert all(m["valid"] == "true" for m in batch_lines(result.stdout))
    assert "partitionLeaderEpoch: 1 " in result.stdout


def test_truncated_tail_is_reported_as_invalid_bytes(segment):
    directory, batches = segment
    log_path = directory / f"{SEGMENT}.log"
    last = batches[-1]
    with open(log_path, "r+b") as f:
        f.truncate(last.position + 20)
    result = strata("dump-log", log_path)
    assert result.returncode == 1
    assert len(batch_lines(result.stdout)) == len(batches) - 1
    assert f"Found 20 invalid bytes at the end of {SEGMENT}.log (position {last.position})" in result.stdout
    # A tail shorter than the 12-byte framing is reported the same way.
    with open(log_path, "r+b") as f:
        f.truncate(last.position + 5)
    result = strata("dump-log", log_path)
    assert result.returncode == 1
    assert f"Found 5 invalid bytes at the end of {SEGMENT}.log (position {last.position})" in result.stdout


def test_zero_tail_is_named(segment):
    directory, batches = segment
    log_path = directory / f"{SEGMENT}.log"
    end = log_path.stat().st_size
    with open(log_path, "ab") as f:
        f.write(bytes(4096))  # e.g. a length extended by a crash before the data reached the disk
    result = strata("dump-log", log_path)
    assert result.returncode == 1
    assert len(batch_lines(result.stdout)) == len(batches)
    assert f"Found 4096 invalid bytes at the end of {SEGMENT}.log (position {end}): all zero bytes" in result.stdout


def test_garbage_log_never_tracebacks(tmp_path):
    path = tmp_path / f"{SEGMENT}.log"
    path.write_bytes(os.urandom(300))
    result = strata("dump-log", "--records", path)
    assert result.returncode == 1
    assert f"Found 300 invalid bytes at the end of {SEGMENT}.log (position 0)" in result.stdout


def test_max_bytes_stops_at_a_batch_boundary(segment):
    directory, batches = segment
    limit = batches[2].position + batches[2].size + 10  # mid-way into the fourth batch
    result = strata("dump-log", "--max-bytes", str(limit), directory / f"{SEGMENT}.log")
    assert result.returncode == 0
    assert [int(m["base"]) for m in batch_lines(result.stdout)] == [b.base_offset for b in batches[:3]]
    assert "invalid bytes" not in result.stdout


# -- indexes -----------------------------------------------------------------------------------


def test_index_entries_are_listed_and_verified(segment):
    directory, batches = segment
    index = directory / f"{SEGMENT}.index"
    result = strata("dump-log", index)
    assert result.returncode == 0, result.stdout
    entries = re.findall(r"^offset: (\d+) position: (\d+)$", result.stdout, re.M)
    # Kafka 4.x keys each entry by the batch's last offset and points at its start.
    assert [(int(o), int(p)) for o, p in entries] == [(b.last_offset, b.position) for b in batches[1:]]
    assert f"Index {index} is consistent ({len(batches) - 1} entries)" in result.stdout
    sanity = strata("dump-log", "--index-sanity-check", index)
    assert sanity.returncode == 0 and f"{index} passed sanity check." in sanity.stdout
    assert "position:" not in sanity.stdout.replace("Index offset", "")  # entries verified, not listed


@pytest.mark.parametrize("bogus", ["inside-batch", "past-end", "other-batch"])
def test_corrupt_index_entry_is_a_mismatch(segment, bogus):
    directory, batches = segment
    index = directory / f"{SEGMENT}.index"
    raw = bytearray(index.read_bytes())
    position = {"inside-batch": batches[2].position + 7, "past-end": 1 << 20, "other-batch": batches[3].position}[bogus]
    struct.pack_into(">i", raw, 8 + 4, position)  # entry 1 (for batches[2]): its position field
    index.write_bytes(raw)
    result = strata("dump-log", index)
    assert result.returncode == 1
    assert f"Mismatches in :{index}" in result.stdout
    if bogus == "other-batch":
        assert f"  Index offset: {batches[2].last_offset}, log offset: {batches[3].last_offset}" in result.stdout
    else:
        assert f"  Index offset: {batches[2].last_offset}, position: {position}:" in result.stdout
    assert "is consistent" not in result.stdout


def test_time_index_is_verified(segment):
    directory, batches = segment
    path = directory / f"{SEGMENT}.timeindex"
    result = strata("dump-log", path)
    assert result.returncode == 0, result.stdout
    assert re.findall(r"^timestamp: (\d+) offset: (\d+)$", result.stdout, re.M)
    assert f"Time index {path} is consistent" in result.stdout
    raw = bytearray(path.read_bytes())
    struct.pack_into(">q", raw, 0, T0 + 999_999)  # first entry now claims a later timestamp
    path.write_bytes(raw)
    result = strata("dump-log", path)
    assert result.returncode == 1
    assert f"Mismatches in :{path}" in result.stdout and "log timestamp:" in result.stdout


def test_live_log_with_preallocated_indexes(open_log, clock):
    """A partition in use (not closed): the active segment's indexes are preallocated, zero-filled."""
    plog = open_log(LogConfig(index_interval_bytes=1, segment_index_bytes=800))
    for i in range(6):
        plog.append_as_leader(_one_record_batch(i), leader_epoch=0)
    plog.flush()
    index = plog.dir / f"{SEGMENT}.index"
    assert index.stat().st_size == 800
    result = strata("dump-log", plog.dir)
    assert result.returncode == 0, result.stdout
    assert "95 unused (zero) slots at the end of 00000000000000000000.index" in result.stdout
    assert f"Index {index} is consistent (5 entries)" in result.stdout
    plog.close()


def _one_record_batch(i: int) -> bytes:
    builder = BatchBuilder()
    builder.append(b"value", key=b"key", timestamp=T0 + i)
    return builder.build()


def test_index_without_log_is_a_problem(segment):
    directory, _ = segment
    (directory / f"{SEGMENT}.log").unlink()
    result = strata("dump-log", directory / f"{SEGMENT}.index")
    assert result.returncode == 1
    assert f"No log file {SEGMENT}.log" in result.stdout


def test_missing_and_unreadable_files(tmp_path):
    result = strata("dump-log", tmp_path / f"{SEGMENT}.log")
    assert result.returncode == 1 and "No such file" in result.stdout
    bad = tmp_path / f"{SEGMENT}.snapshot"
    bad.write_bytes(b"\x00\x01garbage")
    result = strata("dump-log", bad)
    assert result.returncode == 1 and f"Cannot dump {bad}" in result.stdout


# -- directories, transactions, JSON ----------------------------------------------------------


def write_transactional_log(open_log, clock) -> Path:
    """Two segments: data from every codec, an aborted transaction with its marker, a leader change."""
    plog = open_log(LogConfig(segment_bytes=1024, index_interval_bytes=256))
    for i in range(12):
        builder = BatchBuilder(compression=list(CompressionType)[i % 5])
        for _ in range(4):
            builder.append(b"v" * 40, key=b"k", timestamp=T0 + i)
        plog.append_as_leader(builder.build(), leader_epoch=0)
    for seq in (0, 3):
        builder = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=seq, transactional=True)
        for _ in range(3):
            builder.append(b"txn", timestamp=T0 + 100)
        plog.append_as_leader(builder.build(), leader_epoch=1)
    marker = build_control_batch(ControlRecordType.ABORT, producer_id=7, producer_epoch=0, coordinator_epoch=5,
                                 timestamp=T0 + 200)
    info = plog.append_as_leader(marker, leader_epoch=1, origin=AppendOrigin.COORDINATOR)
    assert info.first_offset == 54
    plog.close()
    return plog.dir


def test_directory_dump_covers_every_file(open_log, clock):
    directory = write_transactional_log(open_log, clock)
    result = strata("dump-log", "--records", directory)
    assert result.returncode == 0, result.stdout
    dumped = re.findall(r"^Dumping (.*)$", result.stdout, re.M)
    names = [Path(p).name for p in dumped]
    logs = [n for n in names if n.endswith(".log")]
    assert len(logs) >= 2 and logs == sorted(logs)
    assert names.index(logs[0]) < names.index(logs[0].replace(".log", ".index"))
    for suffix in (".index", ".timeindex", ".txnindex", ".snapshot"):
        assert any(n.endswith(suffix) for n in names), suffix
    assert "leader-epoch-checkpoint" in names
    assert "| offset: 54 CreateTime: " in result.stdout
    assert "endTxnMarker: ABORT coordinatorEpoch: 5" in result.stdout
    assert re.search(r"^version: 0 producerId: 7 firstOffset: 48 lastOffset: 54 lastStableOffset: 55$",
                     result.stdout, re.M)
    assert "epoch: 0 startOffset: 0\nepoch: 1 startOffset: 48" in result.stdout
    assert "isvalid: false" not in result.stdout and "Mismatches" not in result.stdout


def test_txn_index_entry_must_end_at_its_abort_marker(open_log, clock):
    directory = write_transactional_log(open_log, clock)
    (path,) = directory.glob("*.txnindex")
    raw = bytearray(path.read_bytes())
    struct.pack_into(">q", raw, 2 + 8 + 8, 53)  # lastOffset: a data batch's offset, not the marker's
    path.write_bytes(raw)
    result = strata("dump-log", path)
    assert result.returncode == 1
    assert f"Mismatches in :{path}" in result.stdout
    assert "  Aborted transaction of producer 7 ending at offset 53: no batch starts at that offset" in result.stdout


def test_json_output(open_log, clock):
    directory = write_transactional_log(open_log, clock)
    result = strata("dump-log", "--json", "--records", directory)
    assert result.returncode == 0, result.stdout
    files = json.loads(result.stdout)
    assert isinstance(files, list) and all(f["valid"] for f in files)
    logs = [f for f in files if f["type"] == "log"]
    batches = [b for f in logs for b in f["batches"]]
    assert [b["base_offset"] for b in batches] == sorted(b["base_offset"] for b in batches)
    assert sum(b["count"] for b in batches) == 55
    assert {b["compression"] for b in batches} == {"none", "gzip", "snappy", "lz4", "zstd"}
    control = [b for b in batches if b["is_control"]]
    assert len(control) == 1 and control[0]["records"][0]["control_type"] == "ABORT"
    txn = [f for f in files if f["type"] == "txnindex"]
    assert txn[0]["entries"] == [{"version": 0, "producer_id": 7, "first_offset": 48, "last_offset": 54,
                                  "last_stable_offset": 55}]


def test_json_reports_problems(segment):
    directory, batches = segment
    log_path = directory / f"{SEGMENT}.log"
    data = bytearray(log_path.read_bytes())
    data[batches[0].position + 61] ^= 0xFF
    log_path.write_bytes(data[: batches[-1].position + 30])
    result = strata("dump-log", "--json", log_path)
    assert result.returncode == 1
    (dump,) = json.loads(result.stdout)
    assert dump["valid"] is False
    assert [b["is_valid"] for b in dump["batches"]] == [False, True, True, True]
    assert dump["invalid_bytes"] == {"count": 30, "position": batches[-1].position}


# -- usage, version, demo -----------------------------------------------------------------------


@pytest.mark.parametrize("args", [[], ["dump-log"], ["dump-log", "--max-bytes", "0", "x.log"], ["nope"],
                                  ["dump-log", "--bogus", "x.log"]])
def test_usage_errors_exit_2(args):
    result = strata(*args)
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_verbose_logging_goes_to_stderr(tmp_path):
    quiet = strata("demo", "--dir", tmp_path / "quiet")
    assert quiet.returncode == 0 and quiet.stderr == ""
    loud = strata("-v", "demo", "--dir", tmp_path / "loud")
    assert loud.returncode == 0
    assert re.search(r"^\d{4}-\d\d-\d\d [\d:,]+ INFO strata\.log\.\S+ ", loud.stderr, re.M), loud.stderr


def test_version():
    result = strata("version")
    assert result.returncode == 0
    assert re.fullmatch(r"strata \d+\.\d+\.\d+\S*\n", result.stdout)


def test_demo(tmp_path):
    target = tmp_path / "demo"
    result = strata("demo", "--dir", target)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"(\d+) batches, (\d+) records in (\d+) segments under (.+); "
                     r"inspect with: strata dump-log (.+) --records", summary)
    assert m, summary
    batches, records, segments = int(m[1]), int(m[2]), int(m[3])
    assert records >= 200 and segments >= 3 and batches >= 20
    assert Path(m[4]) == target and Path(m[5]) == target
    out = result.stdout
    assert "isvalid: false" not in out and "Mismatches" not in out
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert f"compresscodec: {codec} " in out
    assert "endTxnMarker: ABORT" in out and "endTxnMarker: COMMIT" in out
    partition = target / "demo-0"
    assert len(list(partition.glob("*.log"))) == segments
    assert list(partition.glob("*.txnindex")) and list(partition.glob("*.snapshot"))
    # The suggested command works, and a second run replaces the first.
    assert strata("dump-log", target, "--records").returncode == 0
    assert strata("demo", "--dir", target).returncode == 0


def test_demo_refuses_to_wipe_a_foreign_directory(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    result = strata("demo", "--dir", tmp_path)
    assert result.returncode == 1
    assert (tmp_path / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize(("args", "named"), [
    (["--set", "log.segmnt.bytes=1"], "log.segmnt.bytes"),
    (["--set", "num.partitions=many"], "num.partitions"),
    (["--set", "listeners=FOO://127.0.0.1:0"], "listeners"),
    (["--set", "listeners=SSL://127.0.0.1:0"], "ssl.keystore.location"),
    (["--set", "noequals"], "KEY=VALUE"),
    (["--set", "remote.log.storage.system.enable=true", "--set", "remote.log.storage.manager.class.name=no.Such"],
     "remote.log.storage.manager.class.name"),
    (["--set", "remote.log.storage.system.enable=true", "--set", "remote.log.storage.manager.class.name=s3"],
     "s3.bucket.name"),
    (["--set", "remote.log.storage.system.enable=true",
      "--set", "rlmm.config.remote.log.metadata.topic.num.partitions=0"], "remote.log.metadata.topic.num.partitions"),
    (["--set", "remote.log.reader.threads=0"], "remote.log.reader.threads"),
    # a protocol the coordinator does not speak (streams groups), or no classic: refused
    (["--set", "group.coordinator.rebalance.protocols=classic,streams"], "group.coordinator.rebalance.protocols"),
    (["--set", "group.coordinator.rebalance.protocols=consumer"], "group.coordinator.rebalance.protocols"),
])
def test_serve_refuses_bad_config_naming_the_key(tmp_path, args, named):
    result = strata("serve", "--set", f"log.dirs={tmp_path}", "--set", "listeners=PLAINTEXT://127.0.0.1:0", *args)
    assert result.returncode == 2
    assert named in result.stderr
    assert "ready" not in result.stderr


def test_serve_reports_a_missing_config_file(tmp_path):
    result = strata("serve", "--config", tmp_path / "nope.properties")
    assert result.returncode == 2 and "nope.properties" in result.stderr


def test_serve_refuses_a_changed_metadata_partition_count(tmp_path):
    """``remote.log.metadata.topic.num.partitions`` must never change (Kafka fails initialisation)."""
    base = ["serve", "--set", f"log.dirs={tmp_path}", "--set", "listeners=PLAINTEXT://127.0.0.1:0",
            "--set", "remote.log.storage.system.enable=true"]
    first = subprocess.Popen([sys.executable, "-m", "strata", *base,
                              "--set", "rlmm.config.remote.log.metadata.topic.num.partitions=3"],
                             stderr=subprocess.PIPE, text=True)
    try:
        for line in first.stderr:  # bounded by the test timeout
            if "broker ready" in line:
                break
    finally:
        first.terminate()
        first.wait(30)
        first.stderr.close()
    result = strata(*base, "--set", "rlmm.config.remote.log.metadata.topic.num.partitions=4")
    assert result.returncode == 1
    assert "remote log metadata" in result.stderr and "ready" not in result.stderr
