"""Remote object format v2 on a real broker (issue 29): compressed and encrypted segments that read back exactly,
no plaintext anywhere in the store, a tampered object detected and never served, and key rotation (new segments
under the new key, ``strata bucket rewrap`` moving the old ones, the old key then removable).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer
from tests.broker.kafka_wire import WireClient
from tests.broker.test_clients import fetch_partition
from tests.support.keys import v2_broker_props, write_key_pair
from tests.tiered.harness import WAIT_S, TieredBroker, wait_until

from strata.errors import ErrorCode

TOPIC = "secret"
RECORDS = 1500
SEGMENT_BYTES = 32 * 1024


def value(i: int) -> bytes:
    return b"PLAINTEXT-%06d " % i + b"the quick brown fox jumps over the lazy dog " * 5


def produce(b: TieredBroker, start: int, end: int) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "none",
                  "batch.size": SEGMENT_BYTES // 4})
    errors: list[object] = []
    for i in range(start, end):
        p.produce(TOPIC, key=b"key-%06d" % i, value=value(i), partition=0,
                  on_delivery=lambda err, _: errors.append(err) if err else None)
    assert p.flush(WAIT_S) == 0
    assert not errors, errors[:3]


def remote_files(b: TieredBroker, suffix: str) -> list[Path]:
    return sorted(p for p in b.remote_dir.rglob(f"*.{suffix}") if TOPIC in p.parent.parent.name)


def manifests(b: TieredBroker) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in remote_files(b, "manifest")]


def create(b: TieredBroker) -> None:
    b.create_topic(TOPIC, max_batches_per_segment=10_000, segment_bytes=str(SEGMENT_BYTES))


def wait_tiered(b: TieredBroker, below: int) -> None:
    """Until the segments holding offsets below ``below`` are in the store and gone from the local log."""
    wait_until(f"{TOPIC} tiered below offset {below}", lambda: b.earliest_local_offset(TOPIC, 0) >= below
               and len(remote_files(b, "manifest")) == len(remote_files(b, "log")) > 0)


def read_all(b: TieredBroker, end: int) -> None:
    got = b.consume(TOPIC, 0, 0, end)
    assert [(o, v.encode()) for o, _, v in got] == [(i, value(i)) for i in range(end)]


def test_compressed_encrypted_segments_read_back_and_no_plaintext_is_stored(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **v2_broker_props(tmp_path / "keys")).start()
    try:
        create(b)
        produce(b, 0, RECORDS)
        wait_tiered(b, RECORDS // 2)
        read_all(b, RECORDS)  # the first half (at least) only from the store
        found = manifests(b)
        assert {m["encryption"]["wrapped_key"].split(":")[0] for m in found} == {"k1"}  # type: ignore[index]
        assert {m["objects"]["log"]["compression"] for m in found} == {"zstd"}  # type: ignore[index]
        stored = sum(p.stat().st_size for p in remote_files(b, "log"))
        original = sum(m["segment_size_in_bytes"] for m in found)  # type: ignore[misc]
        assert sum(m["record_count"] for m in found) >= RECORDS // 2  # type: ignore[misc]
        assert stored < original / 3, (stored, original)  # the values repeat: zstd takes most of it
        for path in b.remote_dir.rglob("*"):  # no record's key or value, whole or in part, in any object
            if path.is_file():
                data = path.read_bytes()
                for needle in (b"PLAINTEXT-", b"quick brown fox", b"key-000"):
                    assert needle not in data, (path, needle)
    finally:
        b.stop()


def test_a_tampered_object_is_detected_and_never_served(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **v2_broker_props(tmp_path / "keys")).start()
    try:
        create(b)
        produce(b, 0, RECORDS)
        wait_tiered(b, RECORDS // 2)
        victim = min(remote_files(b, "log"), key=lambda p: p.name)  # the segment at offset 0, never read yet
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0x01
        victim.write_bytes(bytes(data))
        with WireClient(b.bootstrap) as w:
            answer = fetch_partition(w, TOPIC, 0, 0)
        assert int(answer.error_code) == ErrorCode.CORRUPT_MESSAGE, answer
        assert not answer.records
        log = b.broker.log_path.read_text()
        assert "failed authentication" in log and "is corrupt from offset 0" in log
        first_end = json.loads(victim.with_suffix(".manifest").read_text())["end_offset"]
        with WireClient(b.bootstrap) as w:  # the next segment is intact and served
            answer = fetch_partition(w, TOPIC, 0, first_end + 1)
        assert int(answer.error_code) == 0 and answer.records
    finally:
        b.stop()


def test_key_rotation_then_rewrap_then_the_old_key_removed(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    k1, k2 = write_key_pair(keys, "k1"), write_key_pair(keys, "k2")
    base = {"compression.enabled": "true", "encryption.enabled": "true", "chunk.size": "16384"}
    first = {**base, **k1, "encryption.key.pairs": "k1", "encryption.key.pair.id": "k1"}
    rotated = {**base, **k1, **k2, "encryption.key.pairs": "k1,k2", "encryption.key.pair.id": "k2"}
    only_new = {**base, **k2, "encryption.key.pairs": "k2", "encryption.key.pair.id": "k2"}

    def props(settings: dict[str, str]) -> dict[str, str]:
        return {f"rsm.config.{k}": v for k, v in settings.items()}

    b = TieredBroker(tmp_path, **props(first)).start()
    try:
        create(b)
        produce(b, 0, RECORDS)
        wait_tiered(b, RECORDS // 2)
        b.broker.stop()  # (the segments stored before the rotation: listed once nothing uploads any more)
        old = {m["segment_id"] for m in manifests(b)}
        b.broker.props.update(props(rotated))
        b.broker.start()
        produce(b, RECORDS, 2 * RECORDS)
        wait_tiered(b, RECORDS + RECORDS // 2)
        by_key = {m["segment_id"]: m["encryption"]["wrapped_key"].split(":")[0] for m in manifests(b)}  # type: ignore[index]
        assert {by_key[s] for s in old if s in by_key} == {"k1"}  # old segments stay under the old key
        assert {k for s, k in by_key.items() if s not in old} == {"k2"}  # new ones use the new key
        read_all(b, 2 * RECORDS)

        config = tmp_path / "broker.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in b.broker.props.items()))
        run = subprocess.run([sys.executable, "-m", "strata", "bucket", "rewrap", "--config", str(config)],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        # every old segment rewrapped; "of N" counts the manifests listed, which grows while the broker uploads
        counts = re.search(r"rewrapped (\d+) of (\d+) segment manifests to key pair k2", run.stdout)
        assert counts is not None, run.stdout
        assert int(counts[1]) == len(old & set(by_key)) and int(counts[2]) >= len(by_key), run.stdout
        assert {m["encryption"]["wrapped_key"].split(":")[0] for m in manifests(b)} == {"k2"}  # type: ignore[index]

        for k in [k for k in b.broker.props if k.startswith("rsm.config.encryption.")]:
            del b.broker.props[k]
        b.broker.props.update(props(only_new))
        b.broker.restart()
        read_all(b, 2 * RECORDS)  # every segment readable with k2 alone
    finally:
        b.stop()


def _serve_refuses(tmp_path: Path, settings: dict[str, str]) -> str:
    """``strata serve`` with these rsm.config.* settings: it must stop before serving; its stderr."""
    args = [sys.executable, "-m", "strata", "serve", "--set", f"log.dirs={tmp_path / 'logs'}", "--set", "listeners="
            "PLAINTEXT://127.0.0.1:0", "--set", "remote.log.storage.system.enable=true",
            "--set", "remote.log.storage.manager.class.name=local", "--set", f"rsm.config.dir={tmp_path / 'remote'}"]
    for k, v in settings.items():
        args += ["--set", f"rsm.config.{k}={v}"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    return run.stderr


def test_a_format_setting_that_cannot_be_honoured_stops_the_broker_naming_the_key(tmp_path: Path) -> None:
    assert "encryption.key.pairs" in _serve_refuses(tmp_path, {"encryption.enabled": "true"})
    assert "object.format.version" in _serve_refuses(tmp_path, {"object.format.version": "1",
                                                                 "compression.enabled": "true"})
    assert "chunk.size" in _serve_refuses(tmp_path, {"chunk.size": "100", "compression.enabled": "true"})
    missing = str(tmp_path / "nowhere.pem")
    stderr = _serve_refuses(tmp_path, {"encryption.enabled": "true", "encryption.key.pairs": "k1",
                                       "encryption.key.pair.id": "k1",
                                       "encryption.key.pairs.k1.public.key.file": missing})
    assert "encryption.key.pairs.k1.public.key.file" in stderr and "nowhere.pem" in stderr
    keys = write_key_pair(tmp_path / "keys", "k1")
    stderr = _serve_refuses(tmp_path, {"encryption.enabled": "true", "encryption.key.pairs": "k1",
                                       "encryption.key.pair.id": "k9", **keys})
    assert "encryption.key.pair.id=k9" in stderr
