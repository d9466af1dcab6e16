"""Remote object format v2's segment layer (``object_format.py``): manifests, the format probe, the paths a copy
takes (in memory, through a temporary file, producer-compressed segments), the settings, a KMS plug-in.
The RSM contract (``test_rsm_contract.py``) runs the same code through both stores."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from tests.support.keys import v2_configs
from tests.support.segments import MakeSegment

from strata.protocol.records import BatchBuilder, CompressionType
from strata.tiered.api import IndexType
from strata.tiered.storage import object_format
from strata.tiered.storage.common import INDEX_SUFFIXES, LOG_SUFFIX, MANIFEST_SUFFIX
from strata.tiered.storage.object_format import (
    V2_MARKER,
    CorruptObjectError,
    ObjectFormat,
    SegmentManifest,
    is_v2,
)


def store(fmt: ObjectFormat, seg: object) -> tuple[dict[str, bytes], SegmentManifest]:
    """Encode a segment the way an RSM does; the stored objects by suffix (temporary files read back)."""
    md, data = seg.metadata, seg.data  # type: ignore[attr-defined]
    sources = {LOG_SUFFIX: data.log_segment, INDEX_SUFFIXES[IndexType.OFFSET]: data.offset_index,
               INDEX_SUFFIXES[IndexType.TIMESTAMP]: data.time_index,
               INDEX_SUFFIXES[IndexType.PRODUCER_SNAPSHOT]: data.producer_snapshot_index,
               INDEX_SUFFIXES[IndexType.LEADER_EPOCH]: bytes(data.leader_epoch_index)}
    with fmt.encode(md, sources) as encoded:
        objects = {s: (o.read_bytes() if isinstance(o, Path) else o) for s, o in encoded.objects.items()}
        temps = [o for o in encoded.objects.values() if isinstance(o, Path)]
        assert encoded.custom_metadata == V2_MARKER
    assert all(not t.exists() for t in temps)  # the temporary .log is gone once stored
    return objects, encoded.manifest


def read(fmt: ObjectFormat, objects: dict[str, bytes], md: object, suffix: str, start: int = 0,
         end: int | None = None) -> bytes:
    manifest = fmt.manifest_of(md, lambda s: objects[s])  # type: ignore[arg-type]
    assert manifest is not None
    return fmt.fetch(manifest, suffix, lambda s, a, b: objects[s][a:b], start, end).read()


def v2(tmp_path: Path, **extra: str) -> ObjectFormat:
    return ObjectFormat.from_config({**v2_configs(tmp_path / "keys"), **extra})


def test_the_manifest_describes_the_segment_and_round_trips(tmp_path: Path, make_segment: MakeSegment) -> None:
    seg = make_segment(batches=30, records=5)
    fmt = v2(tmp_path)
    objects, manifest = store(fmt, seg)
    doc = json.loads(objects[MANIFEST_SUFFIX])
    md = seg.metadata
    assert (doc["start_offset"], doc["end_offset"], doc["record_count"]) == (md.start_offset, md.end_offset, 150)
    assert doc["segment_size_in_bytes"] == md.segment_size_in_bytes == doc["objects"]["log"]["original_size"]
    assert doc["encryption"]["wrapped_key"].startswith("k1:") and doc["compression"] == "zstd"
    assert SegmentManifest.from_bytes(objects[MANIFEST_SUFFIX]) == manifest
    for suffix, obj in manifest.objects.items():  # each object's size and hash as stored
        assert obj.stored_size == len(objects[suffix]) == sum(obj.chunk_sizes)
        assert obj.sha256 == hashlib.sha256(objects[suffix]).hexdigest()
    data = seg.log_bytes()
    assert read(fmt, objects, md, LOG_SUFFIX) == data
    assert read(fmt, objects, md, LOG_SUFFIX, 20_000, 70_001) == data[20_000:70_001]
    assert read(fmt, objects, md, "index") == seg.data.offset_index.read_bytes()


def test_a_large_segment_goes_through_a_temporary_file(tmp_path: Path, make_segment: MakeSegment,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(object_format, "SPOOL_ABOVE", 10_000)
    seg = make_segment(batches=20)
    fmt = v2(tmp_path)
    objects, _ = store(fmt, seg)
    assert read(fmt, objects, seg.metadata, LOG_SUFFIX) == seg.log_bytes()


def test_a_segment_of_producer_compressed_batches_is_not_compressed_again(tmp_path: Path,
                                                                           make_segment: MakeSegment,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    built = BatchBuilder
    monkeypatch.setattr("tests.support.segments.BatchBuilder",
                        lambda *a, **kw: built(*a, **{**kw, "compression": CompressionType.LZ4}))
    seg = make_segment(batches=10)
    fmt = v2(tmp_path)
    objects, manifest = store(fmt, seg)
    assert manifest.objects["log"].compression is None and manifest.objects["index"].compression == "zstd"
    assert read(fmt, objects, seg.metadata, LOG_SUFFIX) == seg.log_bytes()


def test_metadata_tells_the_format_and_a_segment_without_it_is_probed_once(tmp_path: Path,
                                                                            make_segment: MakeSegment) -> None:
    seg = make_segment(batches=3)
    fmt = v2(tmp_path)
    objects, _ = store(fmt, seg)
    tagged = dataclasses.replace(seg.metadata, custom_metadata=V2_MARKER)
    assert is_v2(tagged) and not is_v2(seg.metadata)
    gets: list[str] = []

    def get(suffix: str) -> bytes:
        gets.append(suffix)
        return objects[suffix]
    assert fmt.manifest_of(seg.metadata, get) is not None and gets == [MANIFEST_SUFFIX]
    assert fmt.manifest_of(seg.metadata, get) is not None and gets == [MANIFEST_SUFFIX]  # cached

    v1_seg = make_segment(batches=3)

    def missing(suffix: str) -> bytes:
        gets.append(suffix)
        raise FileNotFoundError(suffix)
    assert fmt.manifest_of(v1_seg.metadata, missing) is None
    assert fmt.manifest_of(v1_seg.metadata, missing) is None and gets.count(MANIFEST_SUFFIX) == 2  # probed once
    other = dataclasses.replace(v1_seg.metadata, custom_metadata=b"someone-else")
    assert fmt.manifest_of(other, missing) is None  # another RSM's custom metadata: v1, no probe
    assert ObjectFormat().manifest_of(make_segment(batches=1).metadata, missing) is None  # a v1-only store
    assert gets.count(MANIFEST_SUFFIX) == 2


def test_a_manifest_for_another_segment_or_not_a_manifest_is_corruption(tmp_path: Path,
                                                                         make_segment: MakeSegment) -> None:
    fmt = v2(tmp_path)
    a, b = make_segment(batches=2), make_segment(batches=2)
    objects_a, _ = store(fmt, a)
    with pytest.raises(CorruptObjectError, match="describes segment"):
        fmt.manifest(b.metadata, lambda s: objects_a[s])
    with pytest.raises(CorruptObjectError, match="not a segment manifest"):
        fmt.manifest(b.metadata, lambda s: b"{}")


def test_without_the_private_key_reads_fail_naming_the_key_pair(tmp_path: Path, make_segment: MakeSegment) -> None:
    seg = make_segment(batches=2)
    objects, _ = store(v2(tmp_path), seg)
    reader = ObjectFormat.from_config({"compression.enabled": "true"})  # no key pairs at all
    with pytest.raises(CorruptObjectError, match="key pair 'k1'"):
        read(reader, objects, seg.metadata, LOG_SUFFIX)


@pytest.mark.parametrize(("settings", "key"), [
    ({"encryption.enabled": "true"}, "encryption.key.pairs"),
    ({"object.format.version": "1", "compression.enabled": "true"}, "object.format.version"),
    ({"object.format.version": "3"}, "object.format.version"),
    ({"chunk.size": "1000", "compression.enabled": "true"}, "chunk.size"),
    ({"encryption.key.manager.class": "builtins.object"}, "encryption.key.manager.class"),
])
def test_settings_that_cannot_be_honoured_name_their_key(settings: dict[str, str], key: str) -> None:
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        ObjectFormat.from_config(settings)


class XorKms:
    """A stand-in KMS for the plug-in interface: 'wraps' by XOR with a fixed pad (a test, not crypto)."""

    active = "kms-1"

    def configure(self, props: dict[str, str]) -> None:
        self.pad = bytes.fromhex(props["kms.pad"])

    def wrap(self, data_key: bytes, key_id: str | None = None) -> str:
        mixed = bytes(a ^ b for a, b in zip(data_key, self.pad, strict=True))
        return f"{self.active}:{base64.b64encode(mixed).decode()}"

    def unwrap(self, wrapped: str) -> bytes:
        return bytes(a ^ b for a, b in zip(base64.b64decode(wrapped.partition(":")[2]), self.pad, strict=True))

    def rewrap(self, wrapped: str) -> str:
        return self.wrap(self.unwrap(wrapped))


def test_a_kms_plug_in_wraps_the_data_keys(make_segment: MakeSegment) -> None:
    fmt = ObjectFormat.from_config({"encryption.enabled": "true", "kms.pad": "ab" * 32,
                                    "encryption.key.manager.class": f"{__name__}.XorKms"})
    seg = make_segment(batches=4)
    objects, manifest = store(fmt, seg)
    assert manifest.key_id == "kms-1"
    assert read(fmt, objects, seg.metadata, LOG_SUFFIX) == seg.log_bytes()


def test_consecutive_windows_decode_a_shared_chunk_once(tmp_path: Path, make_segment: MakeSegment) -> None:
    """The remote reader's windows start at batch boundaries, so one ends inside the chunk the next begins in:
    that chunk's stored bytes are fetched and decoded once."""
    seg = make_segment(batches=40)
    fmt = v2(tmp_path, **{"chunk.size": "16384"})
    objects, manifest = store(fmt, seg)
    data = seg.log_bytes()
    fetched: list[tuple[int, int]] = []

    def get_range(suffix: str, a: int, b: int) -> bytes:
        fetched.append((a, b))
        return objects[suffix][a:b]
    size = 16384
    stored = manifest.objects["log"].chunk_sizes
    first = fmt.fetch(manifest, LOG_SUFFIX, get_range, 0, size + size // 2).read()
    second = fmt.fetch(manifest, LOG_SUFFIX, get_range, size + size // 2, 3 * size).read()
    assert first + second == data[:3 * size]
    assert fetched == [(0, stored[0] + stored[1]), (stored[0] + stored[1], sum(stored[:3]))]
