"""``strata bucket verify``'s checks against a LocalTieredStorage in a temp dir (no broker): each kind of finding
from the smallest damage that causes it, nothing on a healthy bucket, --repair touching only old orphans, the
comparison with (given) remote log metadata, sampling, and the command line's exit codes."""

from __future__ import annotations

import io
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from tests.support.keys import v2_configs
from tests.support.segments import MakeSegment, Segment, flip

from strata.cli import main
from strata.tiered.api import (
    ObjectInfo,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    uuid_to_str,
)
from strata.tiered.storage.local import LocalTieredStorage
from strata.tiered.storage.manifests import TopicManifest
from strata.tiered.storage.object_format import V2_MARKER
from strata.tools.bucket_verify import (
    BatchChain,
    BucketVerifier,
    Finding,
    VerifyOptions,
    VerifyReport,
    looks_plain,
    parse_segment_key,
    print_report,
)

HOUR_MS = 3_600_000


def store(root: Path, v2: bool, keys: Path | None = None) -> LocalTieredStorage:
    rsm = LocalTieredStorage()
    configs: dict[str, object] = {"dir": str(root), "broker.id": 0, "events.log.enable": "false"}
    if v2:
        configs.update(v2_configs(keys or root.parent / "keys", chunk_size=4096))
    rsm.configure(configs)
    return rsm


@pytest.fixture
def remote(tmp_path: Path) -> tuple[LocalTieredStorage, LocalTieredStorage]:
    """(a v1 store, a v2 store) on the same directory, as a bucket written before and after the switch."""
    root = tmp_path / "remote"
    return store(root, v2=False), store(root, v2=True, keys=tmp_path / "keys")


def verify(rsm: LocalTieredStorage, metadata: Mapping[str, RemoteLogSegmentMetadata] | None = None,
           now_ms: int | None = None, **options: object) -> VerifyReport:
    opts = VerifyOptions(**{"read_bytes": 10_000, **options})  # type: ignore[arg-type]
    loader = None if metadata is None else (lambda _partitions: metadata)
    clock = (lambda: now_ms) if now_ms is not None else (lambda: int(time.time() * 1000))
    return BucketVerifier(rsm, rsm.object_format, opts, loader, err=io.StringIO(), now_ms=clock).run()  # type: ignore[arg-type]


def found(report: VerifyReport) -> list[tuple[str, str]]:
    return sorted((f.kind, f.key) for f in report.findings)


def key(rsm: LocalTieredStorage, seg: Segment, suffix: str) -> str:
    return rsm.segment_files(seg.metadata)[suffix].relative_to(rsm.storage_dir).as_posix() if suffix in \
        rsm.segment_files(seg.metadata) else f"{stem(seg)}.{suffix}"


def stem(seg: Segment) -> str:
    md = seg.metadata
    tp = md.topic_id_partition
    return (f"{tp.topic}-{uuid_to_str(tp.topic_id)}/{tp.partition}/{md.start_offset:020d}-"
            f"{uuid_to_str(md.remote_log_segment_id.id)}")


def path(rsm: LocalTieredStorage, seg: Segment, suffix: str) -> Path:
    return rsm.storage_dir / f"{stem(seg)}.{suffix}"



def sid(seg: Segment) -> str:
    return uuid_to_str(seg.metadata.remote_log_segment_id.id)


def finished(seg: Segment, v2: bool, **changes: object) -> RemoteLogSegmentMetadata:
    return replace(seg.metadata, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                   custom_metadata=V2_MARKER if v2 else None, **changes)  # type: ignore[arg-type]


def copy(rsm: LocalTieredStorage, *segments: Segment) -> None:
    """Copy as the broker does: a v2 store also gets the topic's manifest (the RemoteLogManager writes it)."""
    for seg in segments:
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        tip = seg.metadata.topic_id_partition
        if rsm.object_format.writes_v2:
            rsm.manifests.put_topic_manifest(TopicManifest(tip.topic, uuid_to_str(tip.topic_id), 4, {}))


# -- healthy --------------------------------------------------------------------------------------------


def test_a_healthy_bucket_of_v1_and_v2_segments_has_no_findings(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    v1, v2 = remote
    copy(v1, make_segment(), make_segment(txn=True))
    copy(v2, make_segment(), make_segment(txn=True, batches=1), make_segment(partition=3))
    v2.put_object("diskless/wal/0000000000001-1-abc", b"wal bytes")
    v2.put_object("diskless/coordinator/00000000000000000007.sqlite", b"snapshot")
    report = verify(v2)
    assert report.findings == []
    assert (report.segments, report.v1_segments, report.v2_segments, report.content_checked) == (5, 2, 3, 5)
    assert report.skipped == 2 and report.unrepaired == []
    files = [p for p in v2.storage_dir.rglob("*") if p.is_file() and "diskless" not in p.parts]
    v2_stems = {p.name.rsplit(".", 1)[0] for p in files if p.suffix == ".manifest"}
    read = [p for p in files  # v1: the .log only; the chains are not counted (read beside the segments)
            if p.name.rsplit(".", 1)[0] in v2_stems or p.suffix == ".log" or p.name == "topic-manifest.json"]
    assert report.bytes_read == sum(p.stat().st_size for p in read)
    assert "5 segments checked (3 v2, 2 v1; every byte)" in report.summary_line()
    assert "no findings" in report.summary_line() and "2 objects not of segments skipped" in report.summary_line()


def test_a_store_without_keys_still_hashes_encrypted_segments_and_says_it_could_not_decode(
        tmp_path: Path, remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    _, v2 = remote
    seg = make_segment()
    copy(v2, seg)
    keyless = store(tmp_path / "remote", v2=False)
    assert found(verify(keyless)) == [("unreadable", key(v2, seg, "manifest"))]
    flip(path(v2, seg, "log"), 10)
    assert found(verify(keyless)) == [("corrupt", key(v2, seg, "log")), ("unreadable", key(v2, seg, "manifest"))]


# -- each kind of finding -----------------------------------------------------------------------------------


def test_a_missing_object_of_either_format(remote: tuple[LocalTieredStorage, LocalTieredStorage],
                                           make_segment: MakeSegment) -> None:
    v1, v2 = remote
    a, b, c = make_segment(), make_segment(), make_segment(txn=True)
    copy(v1, a)
    copy(v2, b, c)
    path(v1, a, "timeindex").unlink()
    path(v2, b, "snapshot").unlink()
    path(v2, c, "txnindex").unlink()  # the manifest lists it: as missing as any other
    path(v2, c, "log").unlink()
    report = verify(v2)
    assert found(report) == sorted([("missing", f"{stem(a)}.timeindex"), ("missing", f"{stem(b)}.snapshot"),
                                    ("missing", f"{stem(c)}.txnindex"), ("missing", f"{stem(c)}.log")])
    detail = {f.key: f.detail for f in report.findings}
    assert "listed in the segment's manifest" in detail[f"{stem(b)}.snapshot"]
    assert "v1 segment" in detail[f"{stem(a)}.timeindex"]


def test_a_v2_object_whose_size_or_hash_differs_from_its_manifest(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    _, v2 = remote
    a, b, c = make_segment(), make_segment(), make_segment()
    copy(v2, a, b, c)
    flip(path(v2, a, "log"), 5000)
    flip(path(v2, b, "timeindex"), 0)
    with open(path(v2, c, "index"), "ab") as f:
        f.write(b"\0")
    report = verify(v2)
    assert found(report) == sorted([("corrupt", f"{stem(a)}.log"), ("corrupt", f"{stem(b)}.timeindex"),
                                    ("corrupt", f"{stem(c)}.index")])
    detail = {f.key: f.detail for f in report.findings}
    assert "SHA-256" in detail[f"{stem(a)}.log"] and "SHA-256" in detail[f"{stem(b)}.timeindex"]
    assert "bytes stored, the manifest says" in detail[f"{stem(c)}.index"]


def test_a_chunk_that_does_not_authenticate_is_found_even_when_the_manifest_hash_was_forged(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    import hashlib

    _, v2 = remote
    seg = make_segment()
    copy(v2, seg)
    log = path(v2, seg, "log")
    flip(log, log.stat().st_size - 3)  # the last chunk's tag
    manifest = json.loads(path(v2, seg, "manifest").read_text())
    manifest["objects"]["log"]["sha256"] = hashlib.sha256(log.read_bytes()).hexdigest()
    path(v2, seg, "manifest").write_text(json.dumps(manifest))
    report = verify(v2)
    assert found(report) == [("corrupt", f"{stem(seg)}.log")]
    assert "failed authentication" in report.findings[0].detail


def test_a_v1_log_whose_batches_fail_their_crc_or_end_short(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    v1, _ = remote
    a, b, c = make_segment(), make_segment(), make_segment()
    copy(v1, a, b, c)
    flip(path(v1, a, "log"), 100)  # in the first batch's records
    with open(path(v1, b, "log"), "r+b") as f:
        f.truncate(path(v1, b, "log").stat().st_size - 10)
    second = path(v1, c, "log").read_bytes()[8:12]
    flip(path(v1, c, "log"), 12 + int.from_bytes(second, "big"))  # the top byte of the 2nd batch's base offset
    report = verify(v1)
    assert found(report) == sorted([("corrupt", f"{stem(a)}.log"), ("corrupt", f"{stem(b)}.log"),
                                    ("corrupt", f"{stem(c)}.log")])
    detail = {f.key: f.detail for f in report.findings}
    assert "the batch at byte 0 (offsets 0-4) fails its CRC-32C" in detail[f"{stem(a)}.log"]
    assert "past the end" in detail[f"{stem(b)}.log"]
    assert "beyond the 2^31 offsets" in detail[f"{stem(c)}.log"]


def test_orphans_an_index_without_its_segment_a_stray_key_and_an_object_the_manifest_does_not_list(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    v1, v2 = remote
    a, b, c = make_segment(), make_segment(), make_segment()
    copy(v1, a)
    copy(v2, b, c)
    path(v1, a, "log").unlink()  # its indexes stay behind
    v2.put_object("notes/readme.txt", b"hello")
    v2.put_object(f"{stem(b)}.txnindex", b"\0" * 40)  # b has no aborted transactions: its manifest lists none
    v2.put_object(f"{stem(c)[:-22]}{'A' * 22}.bogus", b"x")  # segment-like, but no such suffix
    report = verify(v2)
    assert found(report) == sorted([
        ("orphan", f"{stem(a)}.{{index,leader_epoch_checkpoint,snapshot,timeindex}}"),
        ("orphan", "notes/readme.txt"), ("orphan", f"{stem(b)}.txnindex"),
        ("orphan", f"{stem(c)[:-22]}{'A' * 22}.bogus")])
    grouped = next(f for f in report.findings if f.key.startswith(stem(a)))
    assert len(grouped.objects) == 4 and "without a .log and without a .manifest" in grouped.detail
    assert report.segments == 2  # a's leftovers are no segment


def test_a_v2_segment_without_its_manifest_and_a_plain_v1_one(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    v1, v2 = remote
    a, b = make_segment(), make_segment()
    copy(v1, a)
    copy(v2, b)
    path(v2, b, "manifest").unlink()
    report = verify(v2, sample=0.01, seed=1)  # found without reading the segments' bytes
    assert found(report) == [("missing-manifest", f"{stem(b)}.manifest")]
    assert "not plain Kafka record batches" in report.findings[0].detail
    assert (report.v1_segments, report.v2_segments) == (1, 1)


def test_a_manifest_that_does_not_parse_or_describes_another_segment(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    _, v2 = remote
    a, b = make_segment(), make_segment()
    copy(v2, a, b)
    path(v2, a, "manifest").write_text("{not json")
    doc = json.loads(path(v2, b, "manifest").read_text())
    doc["segment_id"] = sid(a)
    path(v2, b, "manifest").write_text(json.dumps(doc))
    report = verify(v2)
    assert found(report) == sorted([("corrupt", f"{stem(a)}.manifest"), ("corrupt", f"{stem(b)}.manifest")])
    assert "describes segment" in next(f.detail for f in report.findings if f.key.startswith(stem(b)))


# -- sampling, progress, races --------------------------------------------------------------------------------


def test_sampling_reads_a_repeatable_fraction_and_still_checks_what_costs_no_read(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    _, v2 = remote
    segments = [make_segment(batches=2, records=2, value_size=100) for _ in range(16)]
    copy(v2, *segments)
    first = verify(v2, sample=0.5, seed=42)
    again = verify(v2, sample=0.5, seed=42)
    assert first.findings == [] and 0 < first.content_checked < 16
    assert first.content_checked == again.content_checked and first.bytes_read == again.bytes_read
    assert first.bytes_read < verify(v2).bytes_read
    assert "sample 0.5, seed 42" in first.summary_line()
    for seg in segments:  # the same damage in every segment: the sample finds it where it reads
        flip(path(v2, seg, "log"), 100)
    assert len(verify(v2, sample=0.5, seed=42).findings) == first.content_checked
    with open(path(v2, segments[0], "log"), "ab") as f:  # a size against the manifest costs no read
        f.write(b"!")
    assert ("corrupt", f"{stem(segments[0])}.log") in found(verify(v2, sample=0.01, seed=42))


def test_progress_goes_to_stderr(remote: tuple[LocalTieredStorage, LocalTieredStorage],
                                 make_segment: MakeSegment) -> None:
    _, v2 = remote
    copy(v2, make_segment(), make_segment())
    err = io.StringIO()
    BucketVerifier(v2, v2.object_format, VerifyOptions(progress_interval_s=0), err=err).run()
    assert "... 2/2 segments" in err.getvalue()


class DeletingStore:
    """An ObjectStore that deletes a segment when its first object is read: retention running meanwhile."""

    def __init__(self, inner: LocalTieredStorage, victim: str) -> None:
        self.inner = inner
        self.victim = victim
        self.object_format = inner.object_format

    def put_object(self, key: str, data: bytes) -> None:
        self.inner.put_object(key, data)

    def get_object_range(self, key: str, start: int, end: int) -> bytes:
        if key.startswith(self.victim):
            self.delete_objects([i.key for i in self.inner.list_objects(self.victim)])
        return self.inner.get_object_range(key, start, end)

    def delete_objects(self, keys: Sequence[str]) -> None:
        self.inner.delete_objects(keys)

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        return self.inner.list_objects(prefix)


def test_a_segment_deleted_while_it_is_checked_is_no_finding(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    v1, v2 = remote
    a, b = make_segment(), make_segment()
    copy(v1, a)
    copy(v2, b)
    for victim, left in ((a, 1), (b, 0)):  # a v1 segment, then a v2 one
        racing = DeletingStore(v2, stem(victim))
        report = BucketVerifier(racing, v2.object_format, VerifyOptions(), err=io.StringIO()).run()  # type: ignore[arg-type]
        assert report.findings == [] and report.segments == left
        assert not list(v2.list_objects(stem(victim)))


class LandingStore(DeletingStore):
    """An ObjectStore whose first full listing misses a segment's .log and manifest: a copy still landing."""

    def get_object_range(self, key: str, start: int, end: int) -> bytes:
        return self.inner.get_object_range(key, start, end)

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        hidden = (f"{self.victim}.log", f"{self.victim}.manifest") if prefix == "" else ()
        return (i for i in self.inner.list_objects(prefix) if i.key not in hidden)


def test_a_copy_landing_while_the_store_is_walked_is_no_finding(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    v1, v2 = remote
    a, b = make_segment(), make_segment()
    copy(v1, a)
    copy(v2, b)
    for victim in (a, b):  # its indexes alone at first: an orphan, or a v2 segment missing its .log
        landing = LandingStore(v2, stem(victim))
        report = BucketVerifier(landing, v2.object_format, VerifyOptions(), err=io.StringIO()).run()  # type: ignore[arg-type]
        assert report.findings == [] and report.segments == 2 and report.content_checked == 2


# -- repair ---------------------------------------------------------------------------------------------------


def test_repair_removes_only_orphans_older_than_the_grace_period(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    v1, v2 = remote
    a, b, c = make_segment(), make_segment(), make_segment()
    copy(v1, a)
    copy(v2, b, c)
    path(v1, a, "log").unlink()  # orphaned indexes, made old below
    v2.put_object("stray.bin", b"young")
    path(v2, b, "index").unlink()  # missing: never repaired
    flip(path(v2, c, "log"), 200)  # corrupt: never repaired
    old = time.time() - 2 * 3600
    for p in v2.storage_dir.rglob(f"{stem(a).rsplit('/', 1)[1]}.*"):
        os.utime(p, (old, old))
    report = verify(v2, repair=True, grace_period_ms=HOUR_MS)
    assert sorted(report.removed) == sorted(f"{stem(a)}.{s}" for s in
                                            ("index", "timeindex", "snapshot", "leader_epoch_checkpoint"))
    assert [k for k, _ in report.kept] == ["stray.bin"]
    assert sorted((f.kind, f.key) for f in report.unrepaired) == sorted(
        [("orphan", "stray.bin"), ("missing", f"{stem(b)}.index"), ("corrupt", f"{stem(c)}.log")])
    assert path(v2, b, "log").exists() and path(v2, c, "log").exists()
    after = verify(v2, repair=True, grace_period_ms=0)
    assert after.removed == ["stray.bin"]
    assert found(verify(v2)) == sorted([("missing", f"{stem(b)}.index"), ("corrupt", f"{stem(c)}.log")])
    out = io.StringIO()
    print_report(after, out)
    assert "removed stray.bin\n" in out.getvalue()


# -- against the metadata ----------------------------------------------------------------------------------


def test_the_bucket_against_the_remote_log_metadata(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    v1, v2 = remote
    live, unknown, gone, shifted, copying, deleting, short_v1 = (make_segment() for _ in range(7))
    copy(v1, short_v1)
    copy(v2, live, unknown, shifted, copying, deleting)
    path(v2, deleting, "log").unlink()  # half deleted: not a finding while DELETE_SEGMENT_STARTED
    metadata = {
        sid(live): finished(live, True), sid(gone): finished(gone, True),
        sid(shifted): finished(shifted, True, end_offset=shifted.metadata.end_offset + 5),
        sid(copying): copying.metadata,  # COPY_SEGMENT_STARTED
        sid(deleting): replace(finished(deleting, True), state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED),
        sid(short_v1): finished(short_v1, False, segment_size_in_bytes=short_v1.metadata.segment_size_in_bytes + 1),
    }
    report = verify(v2, metadata)
    assert found(report) == sorted([
        ("orphan", f"{stem(unknown)}.{{index,leader_epoch_checkpoint,log,manifest,snapshot,timeindex}}"),
        ("metadata-mismatch", f"{stem(gone)}.manifest"), ("metadata-mismatch", f"{stem(shifted)}.manifest"),
        ("metadata-mismatch", f"{stem(short_v1)}.log")])
    assert (report.in_flight, report.being_deleted, report.segments) == (1, 1, 3)
    orphan = next(f for f in report.findings if f.kind == "orphan")
    assert "does not list" in orphan.detail and len(orphan.objects) == 6

    later = int(time.time() * 1000) + 2 * HOUR_MS  # the copy never finished: an orphan once past the grace period
    stale = verify(v2, metadata, now_ms=later, repair=True)
    assert ("orphan", f"{stem(copying)}.{{index,leader_epoch_checkpoint,log,manifest,snapshot,timeindex}}") in \
        found(stale)
    assert not path(v2, copying, "log").exists() and not path(v2, unknown, "log").exists()
    assert path(v2, live, "log").exists() and path(v2, shifted, "log").exists()


def test_the_metadata_marks_a_segment_v2_whose_manifest_is_gone(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    """Even a v2 .log stored plain (neither compressed nor encrypted), which looks like v1 from the bucket."""
    _, v2 = remote
    seg = make_segment()
    plain_v2 = store(v2.storage_dir, v2=False)
    plain_v2.object_format.version = 2
    copy(plain_v2, seg)
    path(v2, seg, "manifest").unlink()
    assert verify(v2).findings == []  # from the bucket alone: a v1 segment
    report = verify(v2, {sid(seg): finished(seg, True)})
    assert found(report) == [("missing-manifest", f"{stem(seg)}.manifest")]


def test_repair_refuses_to_remove_segments_when_the_metadata_knows_none_of_the_bucket(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    _, v2 = remote
    seg = make_segment()
    copy(v2, seg)
    report = verify(v2, {}, repair=True, grace_period_ms=0)
    assert [f.kind for f in report.findings] == ["orphan"] and report.removed == []
    assert "is it the cluster that writes to this bucket" in report.kept[0][1]
    assert path(v2, seg, "log").exists()


# -- the pieces ---------------------------------------------------------------------------------------------


def test_segment_keys_are_parsed_exactly() -> None:
    tid, sid_ = "MWLaFk8mTy6OsL2aPo0Uxg", "tqimKeZwStOEOwRzT3L5oQ"
    parsed = parse_segment_key(f"my-topic.v2-{tid}/7/{1234:020d}-{sid_}.leader_epoch_checkpoint")
    assert parsed is not None
    ref, suffix = parsed
    assert (ref.topic, ref.topic_id, ref.partition, ref.start_offset, ref.segment_id, suffix) == \
        ("my-topic.v2", tid, 7, 1234, sid_, "leader_epoch_checkpoint")
    assert isinstance(ref.topic_id_partition, TopicIdPartition)
    for bad in (f"t-{tid}/7/{1234:020d}-{sid_}.zip", f"t-{tid}/07/{1234:020d}-{sid_}.log",
                f"t-{tid}/7/{1234:019d}-{sid_}.log", f"t-{tid}/7/{1234:020d}-{sid_[:-1]}h.log", f"{tid}/7/x.log",
                f"p/t-{tid}/7/{1234:020d}-{sid_}.log"):
        assert parse_segment_key(bad) is None, bad


def test_the_batch_chain_gives_the_same_verdict_however_the_log_is_split(make_segment: MakeSegment) -> None:
    seg = make_segment(batches=6, records=3, value_size=300)
    log = seg.log_bytes()
    for piece in (1, 7, 61, 1000, len(log)):
        chain = BatchChain(0, seg.metadata.end_offset, len(log))
        for at in range(0, len(log), piece):
            chain.feed(log[at:at + piece])
        assert chain.finish() is None and chain.batches == 6 and chain.records == 18
    short = BatchChain(0, 5, len(log))
    short.feed(log)
    assert "past the segment's end offset 5" in (short.finish() or "")
    late = BatchChain(100, None, len(log))
    late.feed(log)
    assert "below 100" in (late.finish() or "")


def test_what_looks_like_plain_batches() -> None:
    from strata.protocol.records import build_batch

    batch = bytearray(build_batch([(b"k", b"v")], base_offset=500))
    assert looks_plain(batch, 500, len(batch)) and looks_plain(batch, 400, len(batch))
    assert not looks_plain(batch, 501, len(batch))  # the first batch is below the segment's start
    assert not looks_plain(batch, 500, len(batch) - 1)  # longer than the object
    assert looks_plain(b"", 0, 0)
    batch[16] = 1
    assert not looks_plain(batch, 500, len(batch))


# -- the command line ---------------------------------------------------------------------------------------


def test_the_command_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         make_segment: MakeSegment) -> None:
    root = tmp_path / "bucket"
    config = tmp_path / "broker.properties"
    config.write_text(f"log.dirs={tmp_path / 'logs'}\nremote.log.storage.system.enable=true\n"
                      f"remote.log.storage.manager.class.name=local\nrsm.config.dir={root}\n")
    v1 = store(root, v2=False)
    seg = make_segment()
    copy(v1, seg)
    assert main(["bucket", "verify", "--config", str(config)]) == 0
    assert "1 segments checked (0 v2, 1 v1; every byte)" in capsys.readouterr().out
    v1.put_object(f"{stem(seg)[:-22]}{'B' * 21}A.index", b"idx")
    assert main(["bucket", "verify", "--config", str(config), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [(f["kind"], f["key"]) for f in doc["findings"]] == [("orphan", f"{stem(seg)[:-22]}{'B' * 21}A.index")]
    assert doc["summary"]["findings_by_kind"] == {"orphan": 1}
    assert main(["bucket", "verify", "--config", str(config), "--repair"]) == 1  # younger than the hour
    assert "kept " in capsys.readouterr().out
    assert main(["bucket", "verify", "--config", str(config), "--repair", "--grace-period-ms", "0"]) == 0
    assert "removed " in capsys.readouterr().out
    assert main(["bucket", "verify", "--config", str(config)]) == 0
    capsys.readouterr()
    for bad in (["--sample", "0"], ["--sample", "1.5"], ["--grace-period-ms", "-1"], ["--parallelism", "0"]):
        assert main(["bucket", "verify", "--config", str(config), *bad]) == 2, bad
    assert main(["bucket", "verify", "--config", str(tmp_path / "nowhere.properties")]) == 1
    assert "error: cannot read" in capsys.readouterr().err
    assert main(["bucket", "verify", "--config", str(config), "--bootstrap-server", "127.0.0.1:1"]) == 1
    assert "error: reading __remote_log_metadata from 127.0.0.1:1" in capsys.readouterr().err


def test_a_finding_line_names_kind_key_and_detail() -> None:
    f = Finding("missing", "t-x/0/a.index", "listed in the segment's manifest, not in the bucket")
    assert f.line() == "missing           t-x/0/a.index: listed in the segment's manifest, not in the bucket"


# -- the manifest chain and the topic manifest ------------------------------------------------------------


def chain_dir(rsm: LocalTieredStorage, seg: Segment) -> Path:
    return rsm.storage_dir / stem(seg).rsplit("/", 1)[0] / "chain"


def test_a_chain_entry_removed_a_manifest_replaced_and_an_unchained_segment_are_found(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    _, v2 = remote
    tid = uuid.uuid4()
    a, b, c, d = (make_segment(topic_id=tid) for _ in range(4))
    copy(v2, a, b, c, d)
    assert verify(v2).findings == []
    entries = sorted(chain_dir(v2, a).iterdir())
    assert len(entries) == 4
    entries[1].unlink()  # b's entry: the chain breaks at c's, and b is in no chain
    doc = json.loads(path(v2, c, "manifest").read_text())
    path(v2, c, "manifest").write_text(json.dumps(doc, indent=1))  # the same manifest, other bytes
    report = verify(v2, grace_period_ms=0)
    assert found(report) == sorted([
        ("chain-break", entries[2].relative_to(v2.storage_dir).as_posix()),
        ("chain-break", f"{stem(b)}.manifest"),
        ("corrupt", f"{stem(c)}.manifest")])
    assert "1 entries missing" in next(f.detail for f in report.findings if f.key.endswith(entries[2].name))
    # within the grace period an unchained segment may be a copy about to chain it: not a finding
    assert ("chain-break", f"{stem(b)}.manifest") not in found(verify(v2))


def test_a_chained_segment_gone_from_the_bucket_and_a_missing_topic_manifest_are_found(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    _, v2 = remote
    tid = uuid.uuid4()
    a, b = make_segment(topic_id=tid), make_segment(topic_id=tid)
    copy(v2, a, b)
    for p in v2.segment_files(a.metadata).values():
        p.unlink()  # gone behind the broker's back: the chain still lists it
    topic_manifest = v2.storage_dir / stem(a).split("/", 1)[0] / "topic-manifest.json"
    topic_manifest.unlink()
    assert found(verify(v2)) == sorted([("missing", f"{stem(a)}.manifest"),
                                        ("missing", topic_manifest.relative_to(v2.storage_dir).as_posix())])
    v2.delete_log_segment_data(b.metadata)  # a delete through the RSM is recorded in the chain: no finding
    assert [f for f in verify(v2).findings if stem(b) in f.key] == []


def test_a_partition_of_v2_segments_without_any_chain_is_a_finding(
        remote: tuple[LocalTieredStorage, LocalTieredStorage], make_segment: MakeSegment) -> None:
    _, v2 = remote
    a = make_segment()
    copy(v2, a)
    for p in chain_dir(v2, a).iterdir():
        p.unlink()
    report = verify(v2)
    assert [(f.kind, f.detail.split(":")[0]) for f in report.findings] == [
        ("chain-break", "1 format v2 segments and no chain")]
