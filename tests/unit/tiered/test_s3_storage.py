"""S3RemoteStorageManager beyond the shared contract: failing fast on an unreachable store, outage and
recovery of a real server, error classes, credentials (static keys, env, profile) and config checks."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
from obstore.exceptions import GenericError
from tests.support.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedFS
from tests.support.segments import MakeSegment

from strata.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RetriableRemoteStorageError,
)
from strata.tiered.storage.s3 import S3RemoteStorageManager, _translate

MiB = 1024 * 1024


def s3(configs: dict[str, object]) -> S3RemoteStorageManager:
    rsm = S3RemoteStorageManager()
    rsm.configure(configs)
    return rsm


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drain(stream) -> bytes:
    with stream:
        return stream.read()


def test_unreachable_endpoint_fails_fast_and_retriably(make_segment: MakeSegment) -> None:
    rsm = s3({"s3.bucket.name": "b", "s3.endpoint.url": f"http://127.0.0.1:{closed_port()}",
              "s3.path.style.access.enabled": "true", "aws.access.key.id": "k", "aws.secret.access.key": "s"})
    seg = make_segment(batches=2)
    operations = {"copy": lambda: rsm.copy_log_segment_data(seg.metadata, seg.data),
                  "fetch": lambda: rsm.fetch_log_segment(seg.metadata, 0),
                  "index": lambda: rsm.fetch_index(seg.metadata, IndexType.OFFSET),
                  "delete": lambda: rsm.delete_log_segment_data(seg.metadata)}
    for name, op in operations.items():
        started = time.monotonic()
        with pytest.raises(RetriableRemoteStorageError, match="unreachable"):
            op()
        assert time.monotonic() - started < 5, name


def test_outage_and_recovery_of_the_server(seaweedfs: SeaweedFS, make_segment: MakeSegment) -> None:
    rsm = s3(seaweedfs.rsm_config(**{"key.prefix": f"outage-{uuid.uuid4().hex[:6]}/"}))
    before, during = make_segment(), make_segment()
    rsm.copy_log_segment_data(before.metadata, before.data)
    with seaweedfs.outage():
        started = time.monotonic()
        with pytest.raises(RetriableRemoteStorageError):
            rsm.copy_log_segment_data(during.metadata, during.data)
        with pytest.raises(RetriableRemoteStorageError):
            rsm.fetch_log_segment(before.metadata, 0)
        assert time.monotonic() - started < 10
    # same client, same data: what was stored before the outage survived it, and writes work again
    assert drain(rsm.fetch_log_segment(before.metadata, 0)) == before.log_bytes()
    rsm.copy_log_segment_data(during.metadata, during.data)
    assert drain(rsm.fetch_log_segment(during.metadata, 10, 20)) == during.log_bytes()[10:21]


def test_wrong_credentials_are_a_permanent_error(seaweedfs: SeaweedFS, make_segment: MakeSegment) -> None:
    rsm = s3(seaweedfs.rsm_config(**{"aws.access.key.id": ACCESS_KEY, "aws.secret.access.key": "wrong"}))
    seg = make_segment(batches=2)
    with pytest.raises(RemoteStorageError, match="access denied") as info:
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert not isinstance(info.value, RetriableRemoteStorageError)


def test_static_keys_from_the_config(seaweedfs: SeaweedFS, make_segment: MakeSegment,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    rsm = s3(seaweedfs.rsm_config(**{"aws.access.key.id": ACCESS_KEY, "aws.secret.access.key": SECRET_KEY}))
    seg = make_segment(batches=2)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert drain(rsm.fetch_log_segment(seg.metadata, 0)) == seg.log_bytes()


def test_credentials_from_a_named_profile(seaweedfs: SeaweedFS, make_segment: MakeSegment, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """What obstore alone cannot do: the shared credentials file, through boto3's chain."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[strata]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    rsm = s3(seaweedfs.rsm_config(**{"aws.profile": "strata"}))
    seg = make_segment(batches=2)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert drain(rsm.fetch_index(seg.metadata, IndexType.LEADER_EPOCH)) == seg.data.leader_epoch_index
    with pytest.raises(ValueError, match="'aws.profile'"):
        s3(seaweedfs.rsm_config(**{"aws.profile": "no-such-profile"}))


def test_no_credentials_anywhere_is_a_config_error(seaweedfs: SeaweedFS, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ValueError, match="no AWS credentials found"):
        s3(seaweedfs.rsm_config())


@pytest.mark.parametrize(("configs", "message"), [
    ({}, "'s3.bucket.name'"),
    ({"s3.bucket.name": ""}, "'s3.bucket.name'"),
    ({"s3.bucket.name": "b", "s3.multipart.upload.part.size": str(5 * MiB - 1)}, "'s3.multipart.upload.part.size'"),
    ({"s3.bucket.name": "b", "s3.multipart.upload.part.size": "8MB"}, "'s3.multipart.upload.part.size'"),
    ({"s3.bucket.name": "b", "s3.path.style.access.enabled": "yes"}, "'s3.path.style.access.enabled'"),
    ({"s3.bucket.name": "b", "s3.api.call.timeout.ms": "-1"}, "'s3.api.call.timeout.ms'"),
    ({"s3.bucket.name": "b", "key.prefix": "/abs/"}, "'key.prefix'"),
    ({"s3.bucket.name": "b", "aws.access.key.id": "only-the-id"}, "'aws.secret.access.key'"),
])
def test_config_errors_name_the_key(configs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        S3RemoteStorageManager().configure(configs)


def test_unconfigured_use_is_an_error(make_segment: MakeSegment) -> None:
    with pytest.raises(RemoteStorageError, match="not configured"):
        S3RemoteStorageManager().fetch_log_segment(make_segment(batches=1).metadata, 0)


@pytest.mark.parametrize(("error", "kind"), [
    (FileNotFoundError("Object at location x not found"), RemoteResourceNotFoundError),
    (GenericError("Server returned non-2xx status code: 503 Service Unavailable: SlowDown"),
     RetriableRemoteStorageError),
    (GenericError("Server returned non-2xx status code: 429 Too Many Requests"), RetriableRemoteStorageError),
    (GenericError("Server returned non-2xx status code: 416 Range Not Satisfiable"), RemoteStorageError),
    (GenericError("Error performing GET in 1s - HTTP error: error sending request"), RetriableRemoteStorageError),
    (GenericError("something else"), RemoteStorageError),
])
def test_error_classes(error: BaseException, kind: type) -> None:
    assert type(_translate(error, "op")) is kind


def test_fetch_from_beyond_the_end_is_a_permanent_error(seaweedfs: SeaweedFS, make_segment: MakeSegment) -> None:
    rsm = s3(seaweedfs.rsm_config(**{"key.prefix": "beyond/"}))
    seg = make_segment(batches=2)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    with pytest.raises(RemoteStorageError) as info:
        rsm.fetch_log_segment(seg.metadata, seg.metadata.segment_size_in_bytes + 10)
    assert not isinstance(info.value, RetriableRemoteStorageError | RemoteResourceNotFoundError)


# -- copy: concurrent small uploads, no DELETE, cleanup ----------------------------------------------


def test_index_objects_upload_concurrently_with_the_log(seaweedfs: SeaweedFS, make_segment: MakeSegment,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The .log's upload waits until every small PUT has started: in sequence this would time out."""
    rsm = s3(seaweedfs.rsm_config(**{"key.prefix": f"concurrent-{uuid.uuid4().hex[:6]}/"}))
    seg = make_segment(txn=True)
    put = rsm._put
    small_started = threading.Semaphore(0)
    threads: dict[str, str] = {}

    def observed(key: str, source: Path | bytes) -> None:
        suffix = key.rsplit(".", 1)[1]
        threads[suffix] = threading.current_thread().name
        if suffix == "log":
            assert all(small_started.acquire(timeout=5) for _ in range(5)), "index PUTs ran after the .log's"
        else:
            small_started.release()
        put(key, source)

    monkeypatch.setattr(rsm, "_put", observed)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert threads["log"] == threading.current_thread().name
    assert sorted(threads) == ["index", "leader_epoch_checkpoint", "log", "snapshot", "timeindex", "txnindex"]
    assert all(name != threads["log"] for suffix, name in threads.items() if suffix != "log")
    assert drain(rsm.fetch_index(seg.metadata, IndexType.TRANSACTION)) == seg.data.transaction_index.read_bytes()
    rsm.close()


def test_copy_without_a_txn_index_sends_no_delete(seaweedfs: SeaweedFS, make_segment: MakeSegment,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every copy attempt has a fresh segment id, so there is never an older .txnindex to remove."""
    import strata.tiered.storage.s3 as s3_module

    rsm = s3(seaweedfs.rsm_config(**{"key.prefix": f"nodelete-{uuid.uuid4().hex[:6]}/"}))
    deletes: list[object] = []
    real_delete = s3_module.obstore.delete
    monkeypatch.setattr(s3_module.obstore, "delete", lambda *a, **kw: deletes.append(a) or real_delete(*a, **kw))
    seg = make_segment(txn=False)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert deletes == []
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(seg.metadata, IndexType.TRANSACTION)
    rsm.close()


@pytest.mark.parametrize("missing", ["log", "timeindex"])
def test_a_failed_copy_leaves_no_objects(seaweedfs: SeaweedFS, make_segment: MakeSegment, tmp_path: Path,
                                         missing: str) -> None:
    """Whether the .log (this thread) or an index (the pool) fails, the other uploads are waited for
    and then everything is deleted: no object outlives the cleanup."""
    prefix = f"failed-{uuid.uuid4().hex[:6]}/"
    rsm = s3(seaweedfs.rsm_config(**{"key.prefix": prefix}))
    seg = make_segment()
    gone = tmp_path / f"no-such.{missing}"
    data = seg.data
    broken = LogSegmentData(gone if missing == "log" else data.log_segment, data.offset_index,
                            gone if missing == "timeindex" else data.time_index, None,
                            data.producer_snapshot_index, data.leader_epoch_index)
    with pytest.raises(RemoteStorageError) as info:
        rsm.copy_log_segment_data(seg.metadata, broken)
    assert not isinstance(info.value, RemoteResourceNotFoundError)  # a local input is missing, not a remote object
    assert seaweedfs.list_keys(prefix) == []
    rsm.close()


def test_close_stops_the_upload_pool_and_later_use_fails(seaweedfs: SeaweedFS, make_segment: MakeSegment) -> None:
    rsm = s3(seaweedfs.rsm_config(**{"key.prefix": f"close-{uuid.uuid4().hex[:6]}/"}))
    seg = make_segment(batches=2)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    pool = rsm._pool
    assert pool is not None
    rsm.close()
    rsm.close()  # idempotent
    assert rsm._pool is None and pool._shutdown
    with pytest.raises(RemoteStorageError, match="not configured"):
        rsm.copy_log_segment_data(seg.metadata, seg.data)


def test_a_bounded_fetch_is_one_buffer_read_without_copies(seaweedfs: SeaweedFS, make_segment: MakeSegment) -> None:
    """A bounded range comes back as one buffer; readinto fills the caller's buffer from it directly
    and a range past the object's end returns what there is."""
    rsm = s3(seaweedfs.rsm_config(**{"key.prefix": f"ranged-{uuid.uuid4().hex[:6]}/"}))
    seg = make_segment()
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    data = seg.log_bytes()
    stream = rsm.fetch_log_segment(seg.metadata, 100, 100 + 70_000 - 1)
    assert type(stream).__name__ == "BufferReader"
    buf = bytearray(80_000)
    with stream:
        assert stream.readinto(buf) == 70_000 and stream.readinto(buf) == 0
    assert buf[:70_000] == data[100:70_100]
    with rsm.fetch_log_segment(seg.metadata, len(data) - 5, len(data) + 1000) as tail:
        assert tail.read() == data[-5:]
    with rsm.fetch_log_segment(seg.metadata, 100, 100 + 70_000 - 1) as stream:  # the Rust buffer itself
        view = stream.read_view(80_000)
        assert view.readonly and type(view.obj).__name__ == "Bytes" and view == data[100:70_100]
        assert len(stream.read_view(10)) == 0
    assert view == data[100:70_100]  # the view keeps the buffer alive after close
    rsm.close()
