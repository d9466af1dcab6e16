"""``strata bucket verify`` on buckets a real broker wrote (issue 29, part 3).

The acceptance test of the issue, on format v2 with the local-directory store: a healthy bucket reports nothing
(exit 0); after deleting one object, flipping one byte of another, adding an orphan and removing a manifest it
reports exactly those four findings (exit 1); ``--repair --grace-period-ms 0`` removes the orphan and only it.
Then the same healthy/orphan/repair round on S3 (SeaweedFS), and ``--bootstrap-server``: a complete, valid
segment that ``__remote_log_metadata`` does not list is an orphan (and only then).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from tests.support.keys import v2_broker_props
from tests.support.seaweedfs import SeaweedFS
from tests.tiered.harness import WAIT_S, S3TieredBroker, TieredBroker, wait_until
from tests.tiered.test_kafka_scenarios import kv

from strata.tiered.api import uuid_to_str

TOPIC = "audited"
SEGMENT_BYTES = 32 * 1024


def write_config(b: TieredBroker, path: Path) -> Path:
    """The broker's own properties, as an operator would pass them to ``strata bucket``."""
    path.write_text("".join(f"{k}={v}\n" for k, v in b.broker.props.items()))
    return path


def verify(config: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """``strata bucket verify --json``: (exit status, the JSON document)."""
    run = subprocess.run([sys.executable, "-m", "strata", "bucket", "verify", "--config", str(config), "--json",
                          *args], capture_output=True, text=True, timeout=180)
    assert run.returncode in (0, 1), (run.returncode, run.stdout[-2000:], run.stderr[-2000:])
    return run.returncode, json.loads(run.stdout)


def verify_text(config: Path, *args: str) -> tuple[int, str]:
    run = subprocess.run([sys.executable, "-m", "strata", "bucket", "verify", "--config", str(config), *args],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode in (0, 1), (run.returncode, run.stdout[-2000:], run.stderr[-2000:])
    return run.returncode, run.stdout


def findings(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(f["kind"], f["key"]) for f in doc["findings"]}


def produce(b: TieredBroker, count: int) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "none",
                  "batch.size": SEGMENT_BYTES // 4})
    errors: list[object] = []
    for i in range(count):
        p.produce(TOPIC, key=b"key-%06d" % i, value=b"value-%06d " % i + b"lorem ipsum dolor sit amet " * 8,
                  partition=0, on_delivery=lambda err, _: errors.append(err) if err else None)
    assert p.flush(WAIT_S) == 0
    assert not errors, errors[:3]


def settled_segments(b: TieredBroker, at_least: int) -> list[str]:
    """The stems of the topic's segments once at least ``at_least`` are in the store and no copy ran for a while
    (every closed segment copied: the bucket then stays as it is)."""
    def stems() -> list[str]:
        return sorted(p.relative_to(b.remote_dir).as_posix()[:-4] for p in b.remote_dir.rglob("*.log")
                      if p.parent.parent.name.startswith(f"{TOPIC}-"))

    seen: list[list[str]] = []

    def stable() -> bool:
        seen.append(stems())
        return len(seen) >= 4 and len(seen[-1]) >= at_least and seen[-1] == seen[-4]
    wait_until(f"{at_least} segments of {TOPIC} copied, and no more copies", stable, interval_s=0.5)
    return seen[-1]


def test_verify_reports_exactly_the_damage_and_repair_removes_only_the_orphan(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **v2_broker_props(tmp_path / "keys")).start()
    try:
        b.create_topic(TOPIC, max_batches_per_segment=10_000, segment_bytes=str(SEGMENT_BYTES))
        produce(b, 1200)
        stems = settled_segments(b, at_least=4)
        config = write_config(b, tmp_path / "broker.properties")
        code, doc = verify(config)  # the broker still running
        assert (code, doc["findings"]) == (0, []), doc
        summary = doc["summary"]
        assert summary["segments"] == summary["v2_segments"] == summary["content_checked"] == len(stems)
        assert summary["bytes_read"] >= sum(p.stat().st_size for p in b.remote_dir.rglob("*.log"))
    finally:
        b.stop()

    deleted, flipped, unmanifested = (b.remote_dir / stems[i] for i in range(3))
    Path(f"{deleted}.index").unlink()
    log = Path(f"{flipped}.log")
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0x01
    log.write_bytes(bytes(data))
    Path(f"{unmanifested}.manifest").unlink()
    partition_dir, start = Path(stems[3]).parent, Path(stems[3]).name[:20]
    orphan = f"{partition_dir}/{start}-{uuid_to_str(uuid.uuid4())}.timeindex"  # an index whose segment is gone
    (b.remote_dir / orphan).write_bytes(b"\0" * 24)
    damage = {("missing", f"{stems[0]}.index"), ("corrupt", f"{stems[1]}.log"),
              ("missing-manifest", f"{stems[2]}.manifest"), ("orphan", orphan)}

    code, doc = verify(config)
    assert code == 1 and findings(doc) == damage, doc["findings"]
    assert doc["summary"]["findings_by_kind"] == {"missing": 1, "corrupt": 1, "orphan": 1, "missing-manifest": 1}
    code, text = verify_text(config)
    lines = text.splitlines()
    assert code == 1 and len(lines) == 5, text
    assert lines[-1].startswith(f"{len(stems)} segments checked ({len(stems)} v2, 0 v1; every byte)"), lines[-1]
    assert "4 findings: missing 1, corrupt 1, orphan 1, missing-manifest 1" in lines[-1]
    assert any(line.startswith("corrupt ") and "SHA-256" in line for line in lines)

    before = sorted(p for p in b.remote_dir.rglob("*") if p.is_file() and p.name != ".events.jsonl")
    code, doc = verify(config, "--repair", "--grace-period-ms", "0")
    assert code == 1 and doc["removed"] == [orphan], doc  # the other three remain: still exit 1
    after = sorted(p for p in b.remote_dir.rglob("*") if p.is_file() and p.name != ".events.jsonl")
    assert set(before) - set(after) == {b.remote_dir / orphan} and set(after) <= set(before)
    assert log.read_bytes() == bytes(data)  # the damaged object is reported, never changed

    code, doc = verify(config)
    assert code == 1 and findings(doc) == damage - {("orphan", orphan)}, doc["findings"]


def test_verify_and_repair_on_s3(tmp_path: Path, seaweedfs: SeaweedFS) -> None:
    prefix = f"verify-{uuid.uuid4().hex[:8]}/"
    b = S3TieredBroker(tmp_path, seaweedfs, key_prefix=prefix).start()  # format v1: plain Kafka batches
    try:
        b.create_topic("t", max_batches_per_segment=2)
        b.produce("t", 0, kv(0, 7))
        b.wait_offloaded("t", 0, [0, 2, 4])
        b.wait_earliest_local("t", 0, 6)
        s3 = seaweedfs.boto3_client()
        s3.put_object(Bucket=seaweedfs.bucket, Key=f"{prefix}diskless/wal/0000000000001-0-{uuid.uuid4().hex}",
                      Body=b"a WAL object")
        config = write_config(b, tmp_path / "broker.properties")
        code, doc = verify(config)
        assert (code, doc["findings"]) == (0, []), doc
        assert (doc["summary"]["v1_segments"], doc["summary"]["skipped_diskless"]) == (3, 1)

        log_key = next(k for k in seaweedfs.list_keys(prefix) if k.endswith(".log"))
        partition_dir = log_key[len(prefix):].rsplit("/", 1)[0]
        orphan = f"{partition_dir}/{0:020d}-{uuid_to_str(uuid.uuid4())}.index"
        s3.put_object(Bucket=seaweedfs.bucket, Key=f"{prefix}{orphan}", Body=b"\0" * 16)
        code, doc = verify(config)
        assert code == 1 and findings(doc) == {("orphan", orphan)}, doc
        code, doc = verify(config, "--repair")  # an hour's grace by default: kept
        assert code == 1 and doc["removed"] == [] and [k["key"] for k in doc["kept"]] == [orphan]
        code, doc = verify(config, "--repair", "--grace-period-ms", "0")
        assert (code, doc["removed"]) == (0, [orphan]), doc
        assert f"{prefix}{orphan}" not in seaweedfs.list_keys(prefix)
        assert any("/diskless/wal/" in f"/{k}" for k in seaweedfs.list_keys(prefix))  # skipped, so kept
        code, doc = verify(config)
        assert (code, doc["findings"]) == (0, [])
    finally:
        b.stop()


def test_a_segment_the_metadata_does_not_list_is_an_orphan(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path).start()  # format v1: a copy of a segment under a new id is a valid segment
    try:
        b.create_topic("t", max_batches_per_segment=2)
        b.produce("t", 0, kv(0, 7))
        b.wait_offloaded("t", 0, [0, 2, 4])
        b.wait_earliest_local("t", 0, 6)
        config = write_config(b, tmp_path / "broker.properties")
        source = sorted(b.remote_dir.rglob("*.log"))[1]
        old_stem = source.name[:-4]
        ghost = f"{old_stem[:21]}{uuid_to_str(uuid.uuid4())}"  # same start offset, a segment id nobody knows
        suffixes = sorted(p.name[len(old_stem) + 1:] for p in source.parent.glob(f"{old_stem}.*"))
        for suffix in suffixes:
            shutil.copyfile(source.parent / f"{old_stem}.{suffix}", source.parent / f"{ghost}.{suffix}")
        ghost_stem = f"{source.parent.relative_to(b.remote_dir).as_posix()}/{ghost}"

        code, doc = verify(config)  # from the bucket alone it is a healthy segment
        assert (code, doc["findings"]) == (0, []), doc
        assert doc["summary"]["segments"] == 4

        code, doc = verify(config, "--bootstrap-server", b.bootstrap)
        assert code == 1, doc
        assert findings(doc) == {("orphan", f"{ghost_stem}.{{{','.join(suffixes)}}}")}, doc["findings"]
        assert "__remote_log_metadata does not list" in doc["findings"][0]["detail"]
        assert doc["summary"]["with_metadata"] and doc["summary"]["segments"] == 3

        code, doc = verify(config, "--bootstrap-server", b.bootstrap, "--repair", "--grace-period-ms", "0")
        assert code == 0 and sorted(doc["removed"]) == sorted(f"{ghost_stem}.{s}" for s in suffixes), doc
        assert not list(source.parent.glob(f"{ghost}.*")) and list(source.parent.glob(f"{old_stem}.*"))
        code, doc = verify(config, "--bootstrap-server", b.bootstrap)
        assert (code, doc["findings"]) == (0, []), doc
        assert [o for o, _, _ in b.consume("t", 0, 0, 7)] == list(range(7))  # every record still readable
    finally:
        b.stop()
