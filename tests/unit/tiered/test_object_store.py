"""The ``ObjectStore`` face of the remote stores (diskless WAL objects, coordinator snapshots): one contract
run against the in-memory reference, a directory (LocalTieredStorage) and S3 (S3RemoteStorageManager on a
real SeaweedFS server); then what only the local store does (key rules, durability, living beside the
segments) and the fault injector's object operations."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import obstore
import pytest
from tests.support.seaweedfs import SeaweedFS
from tests.support.segments import MakeSegment

from strata.tiered.api import (
    IndexType,
    LogSegmentData,
    ObjectStore,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    RetriableRemoteStorageError,
)
from strata.tiered.storage import local as local_module
from strata.tiered.storage.faults import FaultInjectingRemoteStorageManager, parse_spec
from strata.tiered.storage.local import EVENTS_FILE, LocalTieredStorage
from strata.tiered.storage.memory_objects import MemoryObjectStore
from strata.tiered.storage.s3 import S3RemoteStorageManager

MiB = 1024 * 1024


@dataclass
class Backend:
    name: str
    store: Any  # an ObjectStore
    raw_keys: Callable[[], list[str]] | None = None  # what the medium itself holds (not through the store)


def _local_store(root: Path, **configs: object) -> LocalTieredStorage:
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(root), "broker.id": 0, **configs})
    return rsm


def _s3_store(server: SeaweedFS, prefix: str, **configs: object) -> S3RemoteStorageManager:
    rsm = S3RemoteStorageManager()
    rsm.configure(server.rsm_config(**{"key.prefix": prefix, **configs}))
    return rsm


def _backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "memory":
        yield Backend("memory", MemoryObjectStore())
    elif request.param == "local":
        root = tmp_path / "remote"
        local = _local_store(root)

        def files() -> list[str]:
            return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                          if p.is_file() and p.name != EVENTS_FILE)

        yield Backend("local", local, files)
        local.close()
    else:
        server: SeaweedFS = request.getfixturevalue("seaweedfs")
        prefix = f"objects-{uuid.uuid4().hex[:8]}/"  # every test on a fresh prefix: listings see its objects only
        store = _s3_store(server, prefix)

        def keys() -> list[str]:
            return [k[len(prefix):] for k in server.list_keys(prefix)]

        yield Backend("s3", store, keys)
        store.close()


@pytest.fixture(params=["memory", "local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from _backend(request, tmp_path)


@pytest.fixture(params=["local", "s3"])
def real_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The broker's stores (the reference in-memory one takes any key and range)."""
    yield from _backend(request, tmp_path)


def get(store: Any, key: str, start: int, end: int) -> bytes:
    return bytes(store.get_object_range(key, start, end))


def listed(store: Any, prefix: str) -> dict[str, int]:
    return {info.key: info.size for info in store.list_objects(prefix)}


# -- the contract -------------------------------------------------------------------------------------


def test_every_backend_is_an_object_store(backend: Backend) -> None:
    assert isinstance(backend.store, ObjectStore)


def test_put_then_ranged_gets(backend: Backend) -> None:
    store = backend.store
    data = bytes(range(256)) * 40  # 10240 bytes
    store.put_object("diskless/wal/a", data)
    assert get(store, "diskless/wal/a", 0, 100) == data[:100]  # start
    assert get(store, "diskless/wal/a", 5000, 5100) == data[5000:5100]  # middle
    assert get(store, "diskless/wal/a", 10140, 10240) == data[10140:]  # end
    assert get(store, "diskless/wal/a", 0, len(data)) == data  # whole
    assert get(store, "diskless/wal/a", 10000, 20000) == data[10000:]  # past the end: the short tail
    assert get(store, "diskless/wal/a", 10240, 10300) == b""  # starts at the end
    assert get(store, "diskless/wal/a", 20000, 30000) == b""  # starts past the end
    assert get(store, "diskless/wal/a", 7, 7) == b""  # empty range
    if backend.raw_keys is not None:
        assert backend.raw_keys() == ["diskless/wal/a"]


def test_put_overwrites(backend: Backend) -> None:
    store = backend.store
    store.put_object("diskless/snap", b"the first, longer version")
    store.put_object("diskless/snap", b"v2")
    assert get(store, "diskless/snap", 0, 100) == b"v2"
    assert listed(store, "diskless/") == {"diskless/snap": 2}


def test_get_of_a_missing_object_is_not_found(backend: Backend) -> None:
    store = backend.store
    store.put_object("diskless/present", b"x")
    for start, end in ((0, 10), (0, 0), (5, 6)):
        with pytest.raises(RemoteResourceNotFoundError):
            store.get_object_range("diskless/missing", start, end)
    with pytest.raises(RemoteResourceNotFoundError):  # a "directory" is not an object either
        store.get_object_range("diskless", 0, 10)


def test_delete_of_present_and_missing_keys(backend: Backend) -> None:
    store = backend.store
    for key in ("diskless/wal/1", "diskless/wal/2", "diskless/wal/3"):
        store.put_object(key, key.encode())
    store.delete_objects(["diskless/wal/1", "diskless/wal/never-was", "diskless/wal/2"])
    assert listed(store, "diskless/") == {"diskless/wal/3": 14}
    store.delete_objects(["diskless/wal/1"])  # again: already gone is fine
    store.delete_objects([])
    with pytest.raises(RemoteResourceNotFoundError):
        store.get_object_range("diskless/wal/1", 0, 1)
    assert get(store, "diskless/wal/3", 0, 100) == b"diskless/wal/3"
    store.delete_objects(["diskless/wal/3"])
    assert listed(store, "") == {}


def test_list_by_prefix(backend: Backend) -> None:
    store = backend.store
    sizes = {"diskless/wal/0001": 1, "diskless/wal/0002": 2, "diskless/wal-x/0003": 3,
             "diskless/snap/a/b/c": 4, "other/1": 5}
    before_ms = int(time.time() * 1000)
    for key, size in sizes.items():
        store.put_object(key, b"z" * size)
    after_ms = int(time.time() * 1000)
    assert listed(store, "") == sizes
    assert listed(store, "diskless/wal/") == {"diskless/wal/0001": 1, "diskless/wal/0002": 2}
    assert listed(store, "diskless/wal") == {"diskless/wal/0001": 1, "diskless/wal/0002": 2,
                                             "diskless/wal-x/0003": 3}  # a string prefix, not a directory
    assert listed(store, "diskless/wal/000") == {"diskless/wal/0001": 1, "diskless/wal/0002": 2}
    assert listed(store, "diskless/") == {k: v for k, v in sizes.items() if k.startswith("diskless/")}
    assert listed(store, "diskless/snap/a/b/c") == {"diskless/snap/a/b/c": 4}  # the key itself
    assert listed(store, "d") == {k: v for k, v in sizes.items() if k.startswith("d")}
    assert listed(store, "nothing/") == {}
    assert listed(store, "diskless/zz") == {}
    assert listed(store, "diskless/snap/a/b/c/d") == {}
    for info in store.list_objects(""):
        # S3 keeps seconds: allow a little on both sides
        assert before_ms - 2000 <= info.last_modified_ms <= after_ms + 2000, info


def test_an_8_mib_object_round_trips(backend: Backend) -> None:
    store = backend.store
    for key, size in (("diskless/wal/exact", 8 * MiB), ("diskless/wal/bigger", 8 * MiB + 123)):
        data = os.urandom(size)  # the larger one goes up as a multipart upload on S3 (part size 8 MiB)
        store.put_object(key, data)
        assert get(store, key, 0, size) == data
        assert get(store, key, 8 * MiB - 10, 8 * MiB + 10) == data[8 * MiB - 10:8 * MiB + 10]  # across parts
        assert get(store, key, 1234, 1234 + MiB) == data[1234:1234 + MiB]
        assert listed(store, key) == {key: size}


def test_concurrent_puts_from_threads(backend: Backend) -> None:
    store = backend.store
    payloads = {i: bytes([i]) * (64 * 1024 + i) for i in range(16)}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(payloads))

    def put(i: int) -> None:
        try:
            barrier.wait()
            store.put_object(f"diskless/wal/{i:04d}", payloads[i])
            store.put_object("diskless/shared", payloads[i])  # everyone writes this one: one wins, whole
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=put, args=(i,)) for i in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for i, data in payloads.items():
        assert get(store, f"diskless/wal/{i:04d}", 0, len(data) + 10) == data
    shared = get(store, "diskless/shared", 0, 10 * MiB)
    assert shared in payloads.values()
    assert len(listed(store, "diskless/")) == len(payloads) + 1
    if backend.raw_keys is not None:  # no temp file or part left behind
        assert len(backend.raw_keys()) == len(payloads) + 1


def test_buffers_are_accepted_as_input(backend: Backend) -> None:
    store = backend.store
    buffer = bytearray(b"0123456789" * 1000)
    store.put_object("diskless/view", memoryview(buffer)[10:5010])
    store.put_object("diskless/bytearray", buffer)
    buffer[:10] = b"XXXXXXXXXX"  # the stored objects do not follow the caller's buffer
    assert get(store, "diskless/view", 0, 10_000) == (b"0123456789" * 1000)[10:5010]
    assert get(store, "diskless/bytearray", 0, 20) == b"01234567890123456789"


# -- key checks (the real stores) ------------------------------------------------------------------

BAD_KEYS = ["", "/abs", "/", "../x", "a/../../b", "a/..", "a//b", "a/", "./a", "a/./b", "a\0b"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_are_refused(real_backend: Backend, key: str, tmp_path: Path) -> None:
    backend = real_backend
    store = backend.store
    with pytest.raises(ValueError):
        store.put_object(key, b"x")
    with pytest.raises(ValueError):
        store.get_object_range(key, 0, 1)
    with pytest.raises(ValueError):
        store.delete_objects(["diskless/fine", key])
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "b").exists()
    if backend.raw_keys is not None:
        assert backend.raw_keys() == []


def test_bad_prefixes_and_ranges_are_refused(real_backend: Backend) -> None:
    store = real_backend.store
    store.put_object("diskless/a", b"abc")
    for prefix in ("/", "/diskless", "../", "a/../", "a//b"):
        with pytest.raises(ValueError):
            list(store.list_objects(prefix))
    with pytest.raises(ValueError):
        store.get_object_range("diskless/a", -1, 2)
    with pytest.raises(ValueError):
        store.get_object_range("diskless/a", 2, 1)


# -- LocalTieredStorage ------------------------------------------------------------------------------


def test_local_objects_are_files_under_the_dir_and_reserved_names_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    store = _local_store(root)
    store.put_object("diskless/wal/0001", b"abc")
    assert (root / "diskless" / "wal" / "0001").read_bytes() == b"abc"
    for key in (EVENTS_FILE, "diskless/x.tmp-0123"):
        with pytest.raises(ValueError, match="keeps for itself"):
            store.put_object(key, b"x")
    assert (root / EVENTS_FILE).exists()  # the event log is not an object...
    assert listed(store, "") == {"diskless/wal/0001": 3}  # ...and never listed
    (root / "diskless" / "wal" / f"0002{local_module._TMP_MARK}abcdef").write_bytes(b"half written")
    (root / "diskless" / "wal" / "0003").mkdir()  # an (empty) directory is no object
    assert listed(store, "diskless/") == {"diskless/wal/0001": 3}  # a write in progress is not listed


def test_local_put_is_atomic_and_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "remote"
    store = _local_store(root)
    synced_files: list[Path] = []
    synced_dirs: list[Path] = []
    monkeypatch.setattr(local_module, "_fsync_file", lambda fd, target: synced_files.append(target))
    real_fsync_dir = local_module._fsync_dir

    def fsync_dir(directory: Path) -> None:
        synced_dirs.append(directory)
        real_fsync_dir(directory)

    monkeypatch.setattr(local_module, "_fsync_dir", fsync_dir)
    store.put_object("diskless/new/obj", b"data")
    target = root / "diskless" / "new" / "obj"
    assert synced_files == [target]
    # the new directories made durable in their parents, then the rename in its directory
    assert synced_dirs == [root, root / "diskless", target.parent]
    assert sorted(p.name for p in target.parent.iterdir()) == ["obj"]  # no temp file left


def test_local_key_conflicts_with_a_directory_are_errors(tmp_path: Path) -> None:
    store = _local_store(tmp_path / "remote")
    store.put_object("diskless/a/b", b"x")
    with pytest.raises(RemoteStorageError, match="conflicts") as info:
        store.put_object("diskless/a", b"y")  # a directory of the file system store
    assert not isinstance(info.value, RemoteResourceNotFoundError | RetriableRemoteStorageError)
    with pytest.raises(RemoteStorageError, match="conflicts"):
        store.put_object("diskless/a/b/c", b"z")  # below a file
    with pytest.raises(RemoteResourceNotFoundError):
        store.get_object_range("diskless/a/b/c", 0, 1)
    store.delete_objects(["diskless/a", "diskless/a/b/c"])  # neither is an object: nothing to delete
    assert listed(store, "") == {"diskless/a/b": 1}


def test_local_delete_prunes_emptied_directories_below_the_top_level(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    store = _local_store(root)
    store.put_object("diskless/2024/01/a", b"1")
    store.put_object("diskless/2024/02/b", b"2")
    store.put_object("top", b"3")
    store.delete_objects(["diskless/2024/01/a"])
    assert not (root / "diskless" / "2024" / "01").exists()
    assert (root / "diskless" / "2024" / "02").is_dir()
    store.delete_objects(["diskless/2024/02/b", "top"])
    assert (root / "diskless").is_dir() and list((root / "diskless").iterdir()) == []
    store.put_object("diskless/2024/01/a", b"again")  # the pruned directories come back
    assert get(store, "diskless/2024/01/a", 0, 10) == b"again"


def test_local_puts_and_deletes_racing_in_one_directory(tmp_path: Path) -> None:
    """A delete prunes the directory it emptied while other threads put into it: the puts make it again."""
    store = _local_store(tmp_path / "remote")
    errors: list[BaseException] = []

    def churn(worker: int) -> None:
        try:
            for i in range(100):
                key = f"diskless/hot/{worker}-{i}"
                store.put_object(key, b"x")
                assert get(store, key, 0, 1) == b"x"
                store.delete_objects([key])
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=churn, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert listed(store, "") == {}


def test_local_objects_are_not_segments(tmp_path: Path, make_segment: MakeSegment) -> None:
    """Objects under a top-level directory of their own - even ones named like segment files - are not
    walked as segments, and deleting a partition leaves them alone."""
    store = _local_store(tmp_path / "remote")
    seg = make_segment()
    store.copy_log_segment_data(seg.metadata, seg.data)
    lookalike = "diskless/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log"
    objects = {lookalike: b"not a segment", "diskless/wal/x.log": b"wal", "diskless/wal/x.index": b"nor this"}
    for key, data in objects.items():
        store.put_object(key, data)
    assert [p.read_bytes() for p in store.walk_segments()] == [seg.log_bytes()]
    store.delete_log_segment_data(seg.metadata)
    store.delete_partition(seg.tp)
    assert list(store.walk_segments()) == []
    assert {k: get(store, k, 0, 100) for k in listed(store, "diskless/")} == objects
    # the segment API does not see the objects either
    with pytest.raises(RemoteResourceNotFoundError):
        store.fetch_index(seg.metadata, IndexType.OFFSET)


def test_local_fault_file_takes_the_objects_down_too(tmp_path: Path) -> None:
    fault = tmp_path / "down"
    store = _local_store(tmp_path / "remote", **{"fault.file": str(fault)})
    store.put_object("diskless/a", b"x")
    fault.touch()
    for call in (lambda: store.put_object("diskless/b", b"y"), lambda: store.get_object_range("diskless/a", 0, 1),
                 lambda: store.delete_objects(["diskless/a"]), lambda: store.list_objects("diskless/")):
        with pytest.raises(RetriableRemoteStorageError):
            call()
    fault.unlink()
    assert listed(store, "") == {"diskless/a": 1}
    assert store.events() == []  # object calls record no (partition) events


# -- S3RemoteStorageManager -------------------------------------------------------------------------


def test_s3_objects_live_under_the_key_prefix(seaweedfs: SeaweedFS) -> None:
    prefix = f"pfx-{uuid.uuid4().hex[:8]}/cluster-a/"
    store = _s3_store(seaweedfs, prefix)
    try:
        store.put_object("diskless/wal/1", b"abc")
        assert seaweedfs.list_keys(prefix) == [f"{prefix}diskless/wal/1"]
        assert [i.key for i in store.list_objects("")] == ["diskless/wal/1"]
        view = store.get_object_range("diskless/wal/1", 1, 3)
        assert isinstance(view, memoryview) and view.readonly and bytes(view) == b"bc"  # Rust's buffer, no copy
    finally:
        store.close()


def _unreachable_s3() -> S3RemoteStorageManager:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = S3RemoteStorageManager()
    store.configure({"s3.bucket.name": "b", "s3.endpoint.url": f"http://127.0.0.1:{port}",
                     "s3.path.style.access.enabled": "true", "aws.access.key.id": "k",
                     "aws.secret.access.key": "very-secret-key"})
    return store


def test_s3_errors_of_an_unreachable_store_are_retriable() -> None:
    store = _unreachable_s3()
    for call in (lambda: store.put_object("diskless/a", b"x"), lambda: store.get_object_range("diskless/a", 0, 1),
                 lambda: store.delete_objects(["diskless/a"]), lambda: list(store.list_objects("diskless/"))):
        with pytest.raises(RetriableRemoteStorageError, match="unreachable") as info:
            call()
        assert "very-secret-key" not in str(info.value)


def test_s3_a_404_is_a_missing_object_only_for_a_get(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 404 of a PUT or a LIST is a missing bucket (SeaweedFS creates buckets on demand: simulated here);
    of a DELETE, nothing to do."""
    store = _unreachable_s3()

    def missing(*args: object, **kwargs: object) -> Any:
        raise FileNotFoundError("Object at location b/diskless/a not found: ... status code: 404 Not Found")

    for name in ("put", "get_range", "delete", "list"):
        monkeypatch.setattr(obstore, name, missing)
    for call in (lambda: store.put_object("diskless/a", b"x"), lambda: list(store.list_objects("diskless/"))):
        with pytest.raises(RemoteStorageError, match="not found") as info:
            call()
        assert not isinstance(info.value, RemoteResourceNotFoundError | RetriableRemoteStorageError)
    with pytest.raises(RemoteResourceNotFoundError):
        store.get_object_range("diskless/a", 0, 1)
    store.delete_objects(["diskless/a"])


# -- FaultInjectingRemoteStorageManager ------------------------------------------------------------


def faulty(tmp_path: Path, spec: dict[str, Any] | None = None) -> FaultInjectingRemoteStorageManager:
    rsm = FaultInjectingRemoteStorageManager()
    rsm.configure({"faults.delegate.class.name": "local", "dir": str(tmp_path / "remote"), "broker.id": 1,
                   "faults.spec": json.dumps(spec or {}), "faults.seed": "1"})
    return rsm


def test_faults_pass_object_calls_through_and_count_them(tmp_path: Path) -> None:
    rsm = faulty(tmp_path)
    try:
        assert isinstance(rsm, ObjectStore)
        assert set(rsm.status()["operations"]) == {"copy", "fetch_segment", "fetch_index", "delete"}
        rsm.put_object("diskless/a", b"abc")
        assert get(rsm, "diskless/a", 1, 10) == b"bc"
        assert listed(rsm, "diskless/") == {"diskless/a": 3}
        rsm.delete_objects(["diskless/a"])
        with pytest.raises(RemoteResourceNotFoundError):  # the real store's error passes through
            rsm.get_object_range("diskless/a", 0, 1)
    finally:
        rsm.close()
    ops = rsm.status()["operations"]
    assert {op: (c["calls"], c["ok"], c["failed"]) for op, c in ops.items() if "object" in op} == {
        "put_object": (1, 1, 0), "get_object": (2, 1, 1), "delete_objects": (1, 1, 0), "list_objects": (1, 1, 0)}


def test_injected_put_errors_fail_the_puts_and_are_counted(tmp_path: Path) -> None:
    rsm = faulty(tmp_path, {"put_object": {"error": "retriable", "limit": 2}})
    try:
        for _ in range(2):
            with pytest.raises(RetriableRemoteStorageError, match="injected retriable"):
                rsm.put_object("diskless/a", b"x")
        assert isinstance(rsm.delegate, LocalTieredStorage)
        assert listed(rsm.delegate, "") == {}  # the store never saw them
        rsm.put_object("diskless/a", b"x")  # the limit is reached: through
        assert get(rsm, "diskless/a", 0, 1) == b"x"
    finally:
        rsm.close()
    status = rsm.status()
    assert status["operations"]["put_object"] == {"calls": 3, "ok": 1, "failed": 2, "faults": {"retriable": 2}}
    assert status["operations"]["get_object"]["faults"] == {}
    assert status["faults_injected"] == 2


def test_all_covers_the_object_operations(tmp_path: Path) -> None:
    rsm = faulty(tmp_path, {"all": {"error": "fatal"}})
    try:
        for call in (lambda: rsm.put_object("diskless/a", b"x"), lambda: rsm.get_object_range("diskless/a", 0, 1),
                     lambda: rsm.delete_objects(["diskless/a"]), lambda: rsm.list_objects("")):
            with pytest.raises(RemoteStorageError, match="injected fatal") as info:
                call()
            assert not isinstance(info.value, RetriableRemoteStorageError)
    finally:
        rsm.close()
    assert {op: c["faults"] for op, c in rsm.status()["operations"].items() if "object" in op} == {
        "put_object": {"fatal": 1}, "get_object": {"fatal": 1}, "delete_objects": {"fatal": 1},
        "list_objects": {"fatal": 1}}


def test_latency_and_hang_apply_to_object_calls(tmp_path: Path) -> None:
    rsm = faulty(tmp_path, {"get_object": {"latency_ms": 200}, "list_objects": {"hang_ms": 200}})
    try:
        rsm.put_object("diskless/a", b"abc")
        started = time.monotonic()
        assert get(rsm, "diskless/a", 0, 3) == b"abc"
        assert time.monotonic() - started >= 0.2
        with pytest.raises(RetriableRemoteStorageError, match="timed out after 200 ms"):
            rsm.list_objects("diskless/")
    finally:
        rsm.close()
    ops = rsm.status()["operations"]
    assert ops["get_object"]["faults"] == {"latency": 1} and ops["list_objects"]["faults"] == {"hang": 1}


@pytest.mark.parametrize(("spec", "message"), [
    ('{"put_object": {"partial": true}}', "'partial' does not apply to 'put_object'"),
    ('{"get_object": {"vanish": true}}', "'vanish' does not apply to 'get_object'"),
    ('{"delete_objects": {"error": "retriable", "topics": ["orders"]}}', "'topics' does not apply"),
    ('{"put_objects": {"error": "fatal"}}', "unknown operation"),
])
def test_faults_that_do_not_apply_to_objects_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_spec(spec)


def test_all_with_topics_or_segment_only_faults_leaves_the_objects_alone() -> None:
    assert set(parse_spec('{"all": {"error": "retriable", "topics": ["orders"]}}')) == {
        "copy", "fetch_segment", "fetch_index", "delete"}
    assert set(parse_spec('{"all": {"partial": true, "vanish": true}}')) == {"copy", "fetch_segment", "fetch_index"}
    assert set(parse_spec('{"all": {"latency_ms": 5}}')) == {
        "copy", "fetch_segment", "fetch_index", "delete", "put_object", "get_object", "delete_objects",
        "list_objects"}


class _SegmentsOnly(RemoteStorageManager):
    """A delegate without the ObjectStore API."""

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        return None

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> Any:
        raise NotImplementedError

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> Any:
        raise NotImplementedError

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        pass


def test_a_delegate_without_the_object_api_is_refused_clearly() -> None:
    rsm = FaultInjectingRemoteStorageManager()
    rsm.delegate = _SegmentsOnly()
    for call in (lambda: rsm.put_object("diskless/a", b"x"), lambda: rsm.get_object_range("diskless/a", 0, 1),
                 lambda: rsm.delete_objects(["diskless/a"]), lambda: rsm.list_objects("")):
        with pytest.raises(RemoteStorageError, match="_SegmentsOnly does not implement the ObjectStore API"):
            call()
