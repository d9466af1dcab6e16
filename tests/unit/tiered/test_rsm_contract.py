"""The RemoteStorageManager contract (Kafka's RemoteStorageManager javadoc), run against every backend:
a directory (LocalTieredStorage) and S3 (S3RemoteStorageManager on a real SeaweedFS server), each storing
Kafka's plain objects (format v1) and Strata's chunked, compressed and encrypted ones (format v2, issue 29).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.keys import v2_configs
from tests.support.seaweedfs import SeaweedFS
from tests.support.segments import MakeSegment, Segment

from strata.tiered.api import (
    RSM_ALIASES,
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
    load_class,
    uuid_to_str,
)
from strata.tiered.storage.local import EVENTS_FILE
from strata.tiered.storage.object_format import V2_MARKER

MiB = 1024 * 1024


@dataclass
class Backend:
    name: str
    rsm: RemoteStorageManager
    list_keys: Callable[[], list[str]]  # every stored object, relative to the configured root/prefix
    reconfigure: Callable[..., RemoteStorageManager]  # a new instance on the same store, with extra configs
    seaweedfs: SeaweedFS | None = None
    prefix: str = ""
    v2: bool = False


def _chain(key: str) -> bool:
    """A v2 partition's manifest chain entry: the store's own map, tested in test_manifest_chain.py and
    tests/tiered/test_bucket_manifests.py; the contract is about the segments' objects."""
    return "/chain/" in key


def _local(tmp_path: Path, v2: dict[str, str] | None = None) -> Backend:
    root = tmp_path / "remote"

    def new(**extra: object) -> RemoteStorageManager:
        rsm = load_class("local", RSM_ALIASES, RemoteStorageManager)()
        rsm.configure({"dir": str(root), "broker.id": 0, **(v2 or {}), **extra})
        return rsm

    def keys() -> list[str]:
        return sorted(k for p in root.rglob("*") if p.is_file() and p.name != EVENTS_FILE
                      and not _chain(k := str(p.relative_to(root))))

    return Backend("local", new(), keys, new, v2=v2 is not None)


def _s3(server: SeaweedFS, v2: dict[str, str] | None = None) -> Backend:
    prefix = f"contract-{uuid.uuid4().hex[:8]}/"

    def new(**extra: object) -> RemoteStorageManager:
        rsm = load_class("s3", RSM_ALIASES, RemoteStorageManager)()
        rsm.configure(server.rsm_config(**{"key.prefix": prefix, **(v2 or {}), **extra}))
        return rsm

    def keys() -> list[str]:
        return [k[len(prefix):] for k in server.list_keys(prefix) if not _chain(k)]

    return Backend("s3", new(), keys, new, server, prefix, v2=v2 is not None)


@pytest.fixture(params=["local", "s3", "local-v2", "s3-v2"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    v2 = v2_configs(tmp_path / "keys") if request.param.endswith("-v2") else None
    b = _local(tmp_path, v2) if request.param.startswith("local") else _s3(request.getfixturevalue("seaweedfs"), v2)
    try:
        yield b
    finally:
        b.rsm.close()


def read_all(stream) -> bytes:
    with stream:
        return stream.read()


def read_in_pieces(stream, size: int) -> bytes:
    parts = []
    with stream:
        while chunk := stream.read(size):
            parts.append(chunk)
    return b"".join(parts)


def expected_keys(seg: Segment, txn: bool = False, v2: bool = False) -> set[str]:
    md = seg.metadata
    tp = md.topic_id_partition
    stem = f"{tp.topic}-{uuid_to_str(tp.topic_id)}/{tp.partition}/{md.start_offset:020d}-" \
           f"{uuid_to_str(md.remote_log_segment_id.id)}"
    suffixes = ["log", "index", "timeindex", "snapshot", "leader_epoch_checkpoint"] + (["txnindex"] if txn else []) \
        + (["manifest"] if v2 else [])
    return {f"{stem}.{s}" for s in suffixes}


# -- copy and fetch ----------------------------------------------------------------------------------


def test_copy_then_fetch_whole_segment(backend: Backend, make_segment: MakeSegment) -> None:
    seg = make_segment()
    assert backend.rsm.copy_log_segment_data(seg.metadata, seg.data) == (V2_MARKER if backend.v2 else None)
    data = seg.log_bytes()
    assert len(data) == seg.metadata.segment_size_in_bytes > 100_000
    assert read_all(backend.rsm.fetch_log_segment(seg.metadata, 0)) == data
    assert read_in_pieces(backend.rsm.fetch_log_segment(seg.metadata, 0), 7_777) == data


@pytest.mark.parametrize(("start", "end"), [(0, 0), (0, 60), (61, 4096), (5000, 5000), (1000, None), (12345, None)])
def test_fetch_ranges_are_inclusive(backend: Backend, make_segment: MakeSegment, start: int, end: int | None) -> None:
    seg = make_segment()
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    data = seg.log_bytes()
    want = data[start:] if end is None else data[start:end + 1]
    assert read_all(backend.rsm.fetch_log_segment(seg.metadata, start, end)) == want


@pytest.mark.parametrize(("start", "end"), [(0, 0), (61, 4096), (1000, 150_000), (7, 10**9)])
def test_bounded_fetch_streams_fill_a_callers_buffer_with_readinto(backend: Backend, make_segment: MakeSegment,
                                                                  start: int, end: int) -> None:
    """The remote read path reads a ranged fetch into one preallocated buffer through ``readinto``:
    every backend's stream must fill a slice of it in place, in pieces, and stop at the range end."""
    seg = make_segment()
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    data = seg.log_bytes()
    want = data[start:end + 1]
    buf = bytearray(b"\xee" * (len(want) + 100))
    view = memoryview(buf)
    got = 0
    with backend.rsm.fetch_log_segment(seg.metadata, start, end) as stream:
        while n := stream.readinto(view[got:min(got + 50_000, len(buf))]):
            got += n
    del view
    assert got == len(want) and buf[:got] == want and buf[got:] == b"\xee" * 100
    with backend.rsm.fetch_log_segment(seg.metadata, start, end) as stream:  # read(n) in pieces, too
        assert stream.read(10) == want[:10] and stream.read() == want[10:] and stream.read(5) == b""


def test_fetch_end_past_the_segment_stops_at_its_end(backend: Backend, make_segment: MakeSegment) -> None:
    seg = make_segment()
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    data = seg.log_bytes()
    assert read_all(backend.rsm.fetch_log_segment(seg.metadata, len(data) - 10, len(data) + 1000)) == data[-10:]


def test_fetch_rejects_bad_positions(backend: Backend, make_segment: MakeSegment) -> None:
    seg = make_segment(batches=2)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    with pytest.raises(ValueError, match="start position"):
        backend.rsm.fetch_log_segment(seg.metadata, -1)
    with pytest.raises(ValueError, match="below start position"):
        backend.rsm.fetch_log_segment(seg.metadata, 10, 9)


def test_fetch_every_index(backend: Backend, make_segment: MakeSegment) -> None:
    seg = make_segment(txn=True)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    d = seg.data
    sources = {IndexType.OFFSET: d.offset_index.read_bytes(), IndexType.TIMESTAMP: d.time_index.read_bytes(),
               IndexType.PRODUCER_SNAPSHOT: d.producer_snapshot_index.read_bytes(),
               IndexType.TRANSACTION: d.transaction_index.read_bytes(), IndexType.LEADER_EPOCH: d.leader_epoch_index}
    assert len(sources[IndexType.OFFSET]) % 8 == 0 and sources[IndexType.OFFSET]  # trimmed, real entries
    assert len(sources[IndexType.TRANSACTION]) == 2 * 34
    for index_type, want in sources.items():
        assert read_all(backend.rsm.fetch_index(seg.metadata, index_type)) == want, index_type


def test_missing_transaction_index_is_not_found(backend: Backend, make_segment: MakeSegment) -> None:
    seg = make_segment(txn=False)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    with pytest.raises(RemoteResourceNotFoundError):
        backend.rsm.fetch_index(seg.metadata, IndexType.TRANSACTION)
    assert read_all(backend.rsm.fetch_index(seg.metadata, IndexType.OFFSET))  # the others are there


def test_unknown_segment_is_not_found(backend: Backend, make_segment: MakeSegment) -> None:
    seg = make_segment(batches=2)
    with pytest.raises(RemoteResourceNotFoundError):
        backend.rsm.fetch_log_segment(seg.metadata, 0)
    with pytest.raises(RemoteResourceNotFoundError):
        backend.rsm.fetch_log_segment(seg.metadata, 0, 10)
    for index_type in IndexType:
        with pytest.raises(RemoteResourceNotFoundError):
            backend.rsm.fetch_index(seg.metadata, index_type)


# -- idempotency -------------------------------------------------------------------------------------


def test_copy_twice_overwrites(backend: Backend, make_segment: MakeSegment) -> None:
    seg = make_segment(txn=True)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert read_all(backend.rsm.fetch_log_segment(seg.metadata, 0)) == seg.log_bytes()
    assert set(backend.list_keys()) == expected_keys(seg, txn=True, v2=backend.v2)
    # a third copy with different files under the same id replaces every object it writes
    other = make_segment(batches=3, txn=False)
    backend.rsm.copy_log_segment_data(seg.metadata, other.data)
    assert read_all(backend.rsm.fetch_log_segment(seg.metadata, 0)) == other.log_bytes()
    assert read_all(backend.rsm.fetch_index(seg.metadata, IndexType.OFFSET)) == other.data.offset_index.read_bytes()
    if backend.name == "local":  # an unlink costs nothing: the directory store drops the older txn index too
        with pytest.raises(RemoteResourceNotFoundError):
            backend.rsm.fetch_index(seg.metadata, IndexType.TRANSACTION)
        assert set(backend.list_keys()) == expected_keys(seg, txn=False, v2=backend.v2)
    else:  # S3 spares every copy that DELETE: the RemoteLogManager never reuses a segment id across attempts
        assert set(backend.list_keys()) == expected_keys(seg, txn=True, v2=backend.v2)


def test_delete_is_idempotent_and_complete(backend: Backend, make_segment: MakeSegment) -> None:
    seg, keep = make_segment(txn=True), make_segment()
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    backend.rsm.copy_log_segment_data(keep.metadata, keep.data)
    backend.rsm.delete_log_segment_data(seg.metadata)
    backend.rsm.delete_log_segment_data(seg.metadata)
    with pytest.raises(RemoteResourceNotFoundError):
        backend.rsm.fetch_log_segment(seg.metadata, 0)
    for index_type in IndexType:
        with pytest.raises(RemoteResourceNotFoundError):
            backend.rsm.fetch_index(seg.metadata, index_type)
    assert set(backend.list_keys()) == expected_keys(keep, v2=backend.v2)  # only the other segment's objects
    assert read_all(backend.rsm.fetch_log_segment(keep.metadata, 0)) == keep.log_bytes()


def test_delete_of_a_never_copied_segment_succeeds(backend: Backend, make_segment: MakeSegment) -> None:
    backend.rsm.delete_log_segment_data(make_segment(batches=1).metadata)


def test_retried_copy_gets_its_own_objects(backend: Backend, make_segment: MakeSegment) -> None:
    first = make_segment()
    retry = first.with_new_id()
    backend.rsm.copy_log_segment_data(first.metadata, first.data)
    backend.rsm.copy_log_segment_data(retry.metadata, retry.data)
    backend.rsm.delete_log_segment_data(first.metadata)
    assert read_all(backend.rsm.fetch_log_segment(retry.metadata, 0)) == first.log_bytes()
    assert set(backend.list_keys()) == expected_keys(retry, v2=backend.v2)


# -- layout --------------------------------------------------------------------------------------------


def test_object_key_layout(backend: Backend, make_segment: MakeSegment) -> None:
    topic_id = uuid.UUID("3162da16-4f26-4f2e-8eb0-bd9a3e8d14c6")
    seg = make_segment(topic="orders.v1", partition=7, topic_id=topic_id, txn=True)
    backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
    keys = backend.list_keys()
    assert set(keys) == expected_keys(seg, txn=True, v2=backend.v2)
    segment_b64 = uuid_to_str(seg.metadata.remote_log_segment_id.id)
    assert f"orders.v1-MWLaFk8mTy6OsL2aPo0Uxg/7/00000000000000000000-{segment_b64}.log" in keys
    if backend.seaweedfs is not None:  # the prefix sits in front of the whole key, nothing else
        raw = backend.seaweedfs.list_keys(backend.prefix)
        assert all(k.startswith(f"{backend.prefix}orders.v1-MWLaFk8mTy6OsL2aPo0Uxg/7/") for k in raw)


# -- large segments and concurrency ------------------------------------------------------------------


def test_segment_larger_than_the_part_size(backend: Backend, make_segment: MakeSegment) -> None:
    rsm = backend.reconfigure(**{"s3.multipart.upload.part.size": str(5 * MiB)})
    seg = make_segment(batches=110, records=1, value_size=100 * 1024)  # ~11 MiB: three parts of <= 5 MiB
    data = seg.log_bytes()
    assert 10 * MiB < len(data) < 15 * MiB
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    got = read_all(rsm.fetch_log_segment(seg.metadata, 0))
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    middle = 5 * MiB - 100  # a range across the first part boundary
    assert read_all(rsm.fetch_log_segment(seg.metadata, middle, middle + 199)) == data[middle:middle + 200]
    if backend.seaweedfs is not None and not backend.v2:  # (a v2 object is stored compressed and encrypted)
        key = f"{backend.prefix}{next(k for k in expected_keys(seg, v2=backend.v2) if k.endswith('.log'))}"
        head = backend.seaweedfs.boto3_client().head_object(Bucket=backend.seaweedfs.bucket, Key=key)
        assert head["ContentLength"] == len(data)
        assert head["ETag"].strip('"').endswith("-3"), head["ETag"]  # a multipart upload of 3 parts
    rsm.close()


def test_concurrent_copies_fetches_and_deletes(backend: Backend, make_segment: MakeSegment) -> None:
    segments = [make_segment(batches=10, partition=p, txn=p % 2 == 0) for p in range(8)]

    def roundtrip(seg: Segment) -> bytes:
        backend.rsm.copy_log_segment_data(seg.metadata, seg.data)
        got = read_all(backend.rsm.fetch_log_segment(seg.metadata, 0))
        assert read_all(backend.rsm.fetch_index(seg.metadata, IndexType.OFFSET)) == seg.data.offset_index.read_bytes()
        return got

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(roundtrip, segments))
    assert results == [s.log_bytes() for s in segments]
    assert set(backend.list_keys()) == set().union(*(expected_keys(s, txn=s.tp.partition % 2 == 0, v2=backend.v2)
                                                     for s in segments))
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(backend.rsm.delete_log_segment_data, [s.metadata for s in segments]))
    assert backend.list_keys() == []
