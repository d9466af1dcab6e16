"""The broker's remote scrubber (``strata.tiered.scrubber``) against a LocalTieredStorage in a temp dir: the
per-segment check (v2: sizes, SHA-256, chunks; v1 and decoded v2: the record batch chain) from the smallest
damage that causes each finding, and a scrubber's passes: a finding logged once while it lasts, cleared when
repaired, a segment deleted while it is read not reported, a partition no longer led forgotten, the pace."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from tests.support.keys import v2_configs
from tests.support.segments import MakeSegment, Segment, flip
from tests.unit.tiered.test_remote_reader import DictRLMM

from strata.common.metrics import PartitionGauge, Registry, TopicMeter
from strata.tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from strata.tiered.scrubber import (
    RemoteScrubber,
    ScrubberMetrics,
    SegmentChecker,
    _Stopped,
    _Throttle,
)
from strata.tiered.storage.common import segment_stem
from strata.tiered.storage.local import LocalTieredStorage
from strata.tiered.storage.object_format import V2_MARKER

S = RemoteLogSegmentState


def store(root: Path, v2: bool, keys: Path | None = None) -> LocalTieredStorage:
    rsm = LocalTieredStorage()
    configs: dict[str, object] = {"dir": str(root), "broker.id": 0, "events.log.enable": "false"}
    if v2:
        configs.update(v2_configs(keys or root.parent / "keys", chunk_size=4096))
    rsm.configure(configs)
    return rsm


def copied(rsm: LocalTieredStorage, seg: Segment) -> RemoteLogSegmentMetadata:
    """Upload the segment; its metadata as the RLMM then holds it (COPY_SEGMENT_FINISHED, the RSM's custom
    metadata: the v2 marker for a v2 store)."""
    custom = rsm.copy_log_segment_data(seg.metadata, seg.data)
    return replace(seg.metadata, state=S.COPY_SEGMENT_FINISHED, custom_metadata=custom)


def path(rsm: LocalTieredStorage, md: RemoteLogSegmentMetadata, suffix: str) -> Path:
    return rsm.storage_dir / f"{segment_stem(md)}.{suffix}"



def checker(rsm: LocalTieredStorage) -> SegmentChecker:
    return SegmentChecker(rsm, rsm, RemoteScrubber.format_for(rsm), read_bytes=4096)


def found(rsm: LocalTieredStorage, md: RemoteLogSegmentMetadata) -> list[tuple[str, str]]:
    return sorted((f.kind, f.key.rsplit(".", 1)[1]) for f in checker(rsm).check(md).findings)


# -- one segment --------------------------------------------------------------------------------------------


def test_a_healthy_v2_segment_has_no_finding_and_every_stored_byte_is_read(
        tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = store(tmp_path / "remote", v2=True)
    md = copied(rsm, make_segment(txn=True))
    assert md.custom_metadata == V2_MARKER
    result = checker(rsm).check(md)
    assert result.findings == []
    objects = [p for p in rsm.storage_dir.rglob(f"*{md.start_offset:020d}-*") if p.is_file()]
    assert {p.suffix for p in objects} >= {".log", ".index", ".manifest", ".txnindex"}
    assert result.bytes_read == sum(p.stat().st_size for p in objects)


def test_a_flipped_byte_in_a_v2_object_is_a_finding_naming_the_object(
        tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = store(tmp_path / "remote", v2=True)
    a, b, c = (copied(rsm, make_segment()) for _ in range(3))
    flip(path(rsm, a, "log"), 5000)
    flip(path(rsm, b, "timeindex"), 0)
    path(rsm, c, "snapshot").unlink()
    (finding,) = checker(rsm).check(a).findings
    assert (finding.kind, finding.key) == ("corrupt", f"{segment_stem(a)}.log")
    assert "SHA-256" in finding.detail and (finding.start_offset, finding.end_offset) == (a.start_offset, a.end_offset)
    assert found(rsm, b) == [("corrupt", "timeindex")]
    assert found(rsm, c) == [("missing", "snapshot")]


def test_a_chunk_that_does_not_authenticate_is_found_even_with_a_matching_hash(
        tmp_path: Path, make_segment: MakeSegment) -> None:
    import hashlib
    import json

    rsm = store(tmp_path / "remote", v2=True)
    md = copied(rsm, make_segment())
    log = path(rsm, md, "log")
    flip(log, log.stat().st_size - 3)  # the last chunk's tag
    manifest = json.loads(path(rsm, md, "manifest").read_text())
    manifest["objects"]["log"]["sha256"] = hashlib.sha256(log.read_bytes()).hexdigest()
    path(rsm, md, "manifest").write_text(json.dumps(manifest))
    (finding,) = checker(rsm).check(md).findings
    assert finding.kind == "corrupt" and "authentication" in finding.detail


def test_a_v1_segment_with_a_flipped_byte_in_its_log_fails_the_batch_check(
        tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = store(tmp_path / "remote", v2=False)
    healthy, damaged, short = (copied(rsm, make_segment()) for _ in range(3))
    assert healthy.custom_metadata is None
    assert checker(rsm).check(healthy).findings == []  # (batches of ~5 KB fed in 4 KB pieces)
    flip(path(rsm, damaged, "log"), 7000)  # inside the second batch's records: its CRC-32C
    (finding,) = checker(rsm).check(damaged).findings
    assert (finding.kind, finding.key) == ("corrupt", f"{segment_stem(damaged)}.log")
    assert "CRC-32C" in finding.detail
    with open(path(rsm, short, "log"), "r+b") as f:
        f.truncate(path(rsm, short, "log").stat().st_size - 10)
    (finding,) = checker(rsm).check(short).findings
    assert "bytes stored, the remote log metadata says" in finding.detail


def test_a_v2_segment_without_its_manifest_and_a_segment_without_any_object(
        tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = store(tmp_path / "remote", v2=True)
    a, b = copied(rsm, make_segment()), copied(rsm, make_segment())
    path(rsm, a, "manifest").unlink()
    for p in list(path(rsm, b, "log").parent.glob(f"{path(rsm, b, 'log').stem}.*")):
        p.unlink()
    assert found(rsm, a) == [("missing", "manifest")]
    assert found(rsm, b) == [("missing", "manifest")]


# -- the passes -------------------------------------------------------------------------------------------


class ShiftingRLMM(DictRLMM):
    """Runs ``on_list`` before every listing (a deletion between the scrubber's listing and its reads)."""

    def __init__(self) -> None:
        super().__init__()
        self.on_list = lambda: None

    def list_remote_log_segments(self, tp: TopicIdPartition, leader_epoch: int | None = None):  # type: ignore[no-untyped-def]
        self.on_list()
        return super().list_remote_log_segments(tp, leader_epoch)


def metrics() -> ScrubberMetrics:
    registry = Registry()
    return ScrubberMetrics(PartitionGauge(registry, "Findings", ""), TopicMeter(registry, "Bytes", ""),
                           TopicMeter(registry, "Segments", ""))


def test_passes_log_a_finding_once_clear_it_when_repaired_and_skip_deleted_segments(
        tmp_path: Path, make_segment: MakeSegment, caplog: pytest.LogCaptureFixture) -> None:
    rsm = store(tmp_path / "remote", v2=True)
    topic_id = uuid.uuid4()
    a, b = (copied(rsm, make_segment(topic_id=topic_id)) for _ in range(2))
    tip = a.topic_id_partition
    rlmm = ShiftingRLMM()
    rlmm.segments = {md.remote_log_segment_id: md for md in (a, b)}
    led = [tip]
    m = metrics()
    scrubber = RemoteScrubber(rsm, rlmm, targets=lambda: list(led), leading=lambda t: t in led, metrics=m,
                              bytes_per_second=1 << 40, interval_ms=3_600_000, clock_ms=lambda: 1234)
    warnings = lambda: [r for r in caplog.records if r.levelno == logging.WARNING]  # noqa: E731

    async def run() -> None:
        with caplog.at_level(logging.INFO, "strata.tiered.scrubber"):
            await scrubber.scrub_pass()
            state = scrubber.state(scrubber_tp)
            assert state is not None and state.findings == {} and state.scrubbed_segments == 2
            assert state.to_json()["last_pass_ms"] == 1234
            assert m.segments.count(tip.topic) == 2 and m.bytes.count(tip.topic) > 0
            assert m.findings.value(tip.topic, tip.partition) == 0

            flip(path(rsm, a, "log"), 3000)
            for _ in range(2):  # found once, logged once
                await scrubber.scrub_pass()
                assert m.findings.value(tip.topic, tip.partition) == 1
            (warning,) = warnings()
            text = warning.getMessage()
            assert f"{tip.topic}-{tip.partition} segment " in text and f"corrupt {segment_stem(a)}.log" in text
            assert f"(offsets {a.start_offset}-{a.end_offset})" in text
            doc = scrubber.state(scrubber_tp).to_json()  # type: ignore[union-attr]
            assert doc["findings"] == 1 and doc["problems"][0]["key"] == f"{segment_stem(a)}.log"

            flip(path(rsm, a, "log"), 3000)  # repaired: the finding clears
            await scrubber.scrub_pass()
            assert m.findings.value(tip.topic, tip.partition) == 0 and len(warnings()) == 1

            # b is deleted by retention between the scrubber's listing and its reads: not a finding
            def delete_b() -> None:
                if rlmm.segments[b.remote_log_segment_id].state is S.COPY_SEGMENT_FINISHED:
                    for p in path(rsm, b, "log").parent.glob(f"{path(rsm, b, 'log').stem}.*"):
                        p.unlink()
                    rlmm.on_list = lambda: rlmm.segments.__setitem__(
                        b.remote_log_segment_id, replace(b, state=S.DELETE_SEGMENT_STARTED))
            rlmm.on_list = delete_b
            await scrubber.scrub_pass()
            assert m.findings.value(tip.topic, tip.partition) == 0 and len(warnings()) == 1

            led.clear()  # leadership moved: the partition is forgotten, its gauge removed
            await scrubber.scrub_pass()
            assert scrubber.state(scrubber_tp) is None
            await scrubber.close()

    from strata.common import TopicPartition

    scrubber_tp = TopicPartition(tip.topic, tip.partition)
    asyncio.run(run())


def test_a_rate_of_zero_never_starts_and_the_throttle_paces_reads(tmp_path: Path) -> None:
    rsm = store(tmp_path / "remote", v2=False)

    async def start_disabled() -> bool:
        scrubber = RemoteScrubber(rsm, DictRLMM(), targets=list, leading=lambda _t: True, metrics=metrics(),
                                  bytes_per_second=0, interval_ms=1)
        scrubber.start()
        running = scrubber.running
        await scrubber.close()
        return running

    assert asyncio.run(start_disabled()) is False

    stop = threading.Event()
    throttle = _Throttle(1_000_000, stop)
    started = time.monotonic()
    for _ in range(3):
        throttle.acquire(100_000)  # the first at once, each next once the one before is paid for (0.1 s)
    assert time.monotonic() - started >= 0.19
    stop.set()
    with pytest.raises(_Stopped):
        throttle.acquire(1)
