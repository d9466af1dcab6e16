"""``S3RemoteStorageManager``: segments and their indexes as objects in an S3 (or S3-compatible) bucket.

One object per file of a segment (``.log`` plus one per index), named as in
``strata.tiered.storage.common`` (Aiven's key layout). The ``.log`` goes up as a multipart upload
when it is larger than the part size; indexes are single PUTs, sent concurrently with the ``.log``
from a small shared thread pool (each is a round trip of its own: in sequence they add up). Reads
are ranged GETs, so a consumer fetch of 1 MiB from a 1 GiB segment moves 1 MiB: a bounded range
is fetched whole into one Rust-owned buffer, which the remote reader takes as it is (``read_view``:
no copy in Python at all; ``readinto`` copies once, into the caller's buffer); an open-ended one is
streamed in chunks.

Client: obstore (Rust ``object_store``) for every data call - chosen by measurement
(bench/s3_client_bench.py, docs/remote-storage.md): on par with boto3 for large uploads,
1.2x on ranged GETs, 1.8x on small PUTs, and 2-6x less CPU in the broker's own process for
those, which matters in a Python broker whose event loop shares the GIL with these worker threads. obstore
reads the AWS environment variables but not profiles, so unless static keys are configured the
credentials come from boto3's standard chain (env, shared config/credentials profile incl. SSO
and assume-role, container, instance metadata) through obstore's ``Boto3CredentialProvider``.

It is also an :class:`~strata.tiered.api.ObjectStore` (diskless WAL objects, coordinator
snapshots) on the same bucket, client, credentials and ``key.prefix``: the object of key ``k`` is
``{key.prefix}k``. A put is one PUT (a multipart upload above the part size: neither leaves a
partial object visible), a ranged read one ranged GET handed back as a view of obstore's Rust
buffer (no copy), a delete one DeleteObjects request per 1000 keys (missing keys are fine), a
listing a paged LIST of the prefix's directory (S3 prefixes are strings, obstore's are path
segments: the rest of the prefix is matched here), keys returned without ``key.prefix``. Keys obey
the local store's rules (``check_object_key``), so a key valid on one backend is valid on the other.

Errors: a missing object is ``RemoteResourceNotFoundError``; connection failures, timeouts, 429
and 5xx (after the client's own bounded retries) are ``RetriableRemoteStorageError``; anything
else (403, 416 ...) is ``RemoteStorageError``. The client is thread-safe; one store is shared by
all the RemoteLogManager's worker threads.

Credentials never reach a log line or an error message (which ``/v1/tiers`` shows as a partition's last
copy error): messages are cut before obstore's "Debug source" dump, the configured secret key and
session token are replaced wherever they would appear, and so are user info in a URL and SigV4 query
parameters (``X-Amz-Signature``, ``X-Amz-Credential``, ``X-Amz-Security-Token``). The store's own
config holds the keys, so neither it nor this object's attributes are ever logged.
"""

from __future__ import annotations

import io
import logging
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO, cast

import obstore
from obstore.exceptions import BaseError, NotFoundError, PermissionDeniedError, UnauthenticatedError
from obstore.store import S3Store

from strata.common.crashpoints import crash_point
from strata.tiered.api import (
    IndexType,
    LogSegmentData,
    ObjectInfo,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    RetriableRemoteStorageError,
)
from strata.tiered.storage.common import (
    ALL_SUFFIXES,
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    BufferReader,
    check_positions,
    config_bool,
    config_int,
    config_str,
    object_key,
)
from strata.tiered.storage.local import check_object_key, check_object_prefix, check_object_range
from strata.tiered.storage.manifests import BucketManifests
from strata.tiered.storage.object_format import ObjectFormat

log = logging.getLogger(__name__)

MiB = 1024 * 1024
MIN_PART_SIZE = 5 * MiB  # S3's minimum for every part but the last
MAX_PART_SIZE = 5 * 1024 * MiB
STREAM_CHUNK = 256 * 1024  # what one read of a fetch stream buffers at least (obstore's default is 10 MiB)
SMALL_UPLOAD_THREADS = 4  # index/snapshot PUTs in flight beside the .log's upload, shared by all copies
CREDENTIALS_TTL = timedelta(minutes=5)  # re-ask boto3 well before temporary credentials can expire
_STATUS = re.compile(r"status code: (\d{3})")
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
_SIGV4_PARAMS = re.compile(r"(?i)(X-Amz-(?:Signature|Credential|Security-Token)=)[^&\s\"'<]+")
HIDDEN = "[hidden]"
_TRANSPORT = ("error sending request", "HTTP error", "timed out", "Timeout", "connection", "Connection")


class S3RemoteStorageManager(RemoteStorageManager):
    """Configs (``rsm.config.`` prefix removed), Kafka/Aiven style names:

    ``s3.bucket.name`` (required), ``s3.endpoint.url``, ``s3.region``, ``s3.path.style.access.enabled``
    (false), ``key.prefix`` (""), ``s3.multipart.upload.part.size`` (8 MiB, >= 5 MiB),
    ``s3.multipart.upload.concurrency`` (4), ``s3.connect.timeout.ms`` (1000),
    ``s3.api.call.attempt.timeout.ms`` (60000), ``s3.api.call.timeout.ms`` (2000, the retry budget of
    one call), ``s3.max.retries`` (3), ``aws.access.key.id`` / ``aws.secret.access.key`` /
    ``aws.session.token`` (static keys), ``aws.profile`` (a named profile of the shared config).
    """

    def __init__(self) -> None:
        self._store: S3Store | None = None
        self.bucket = ""
        self.prefix = ""
        self.part_size = 8 * MiB
        self.concurrency = 4
        self._pool: ThreadPoolExecutor | None = None  # created on the first copy
        self._pool_lock = threading.Lock()
        self._secrets: tuple[str, ...] = ()  # configured secret values, scrubbed from every message
        self.object_format = ObjectFormat()
        self.manifests = BucketManifests(self)

    # -- configuration -------------------------------------------------------------------------

    def configure(self, configs: Mapping[str, Any]) -> None:
        self.bucket = config_str(configs, "s3.bucket.name", required=True)
        self.prefix = config_str(configs, "key.prefix", "")
        if self.prefix.startswith("/") or "//" in self.prefix:
            raise ValueError(f"config 'key.prefix' must not start with '/' or contain '//', got {self.prefix!r}")
        self.part_size = config_int(configs, "s3.multipart.upload.part.size", 8 * MiB, minimum=MIN_PART_SIZE)
        if self.part_size > MAX_PART_SIZE:
            raise ValueError(f"config 's3.multipart.upload.part.size' must be <= {MAX_PART_SIZE}, got {self.part_size}")
        self.concurrency = config_int(configs, "s3.multipart.upload.concurrency", 4, minimum=1)
        self.object_format = ObjectFormat.from_config(configs)
        self.manifests = BucketManifests.from_config(self, configs, config_int(configs, "broker.id", -1))
        endpoint = config_str(configs, "s3.endpoint.url") or None
        region = config_str(configs, "s3.region") or None
        path_style = config_bool(configs, "s3.path.style.access.enabled", False)
        connect_ms = config_int(configs, "s3.connect.timeout.ms", 1000, minimum=1)
        attempt_ms = config_int(configs, "s3.api.call.attempt.timeout.ms", 60_000, minimum=1)
        call_ms = config_int(configs, "s3.api.call.timeout.ms", 2_000, minimum=0)
        retries = config_int(configs, "s3.max.retries", 3, minimum=0)

        kwargs: dict[str, Any] = {"virtual_hosted_style_request": not path_style}
        if endpoint:
            kwargs["endpoint"] = endpoint
        if region:
            kwargs["region"] = region
        self._secrets = tuple(v for v in (config_str(configs, "aws.secret.access.key"),
                                          config_str(configs, "aws.session.token")) if v)
        kwargs.update(_credentials(configs))
        client_options: Any = {"connect_timeout": timedelta(milliseconds=connect_ms),
                               "timeout": timedelta(milliseconds=attempt_ms)}
        if endpoint and endpoint.startswith("http://"):
            client_options["allow_http"] = True
        retry_config: Any = {"max_retries": retries, "retry_timeout": timedelta(milliseconds=call_ms),
                             "backoff": {"init_backoff": timedelta(milliseconds=100),
                                         "max_backoff": timedelta(seconds=1), "base": 2}}
        try:
            self._store = S3Store(self.bucket, client_options=client_options, retry_config=retry_config, **kwargs)
        except BaseError as e:
            raise ValueError(f"invalid S3 configuration: {scrub(str(e), self._secrets)}") from None
        log.info("S3 remote storage: bucket=%s endpoint=%s region=%s path_style=%s prefix=%r part_size=%d",
                 self.bucket, scrub(endpoint, self._secrets) if endpoint else "(AWS)", region or "(from environment)",
                 path_style, self.prefix, self.part_size)

    @property
    def store(self) -> S3Store:
        if self._store is None:
            raise RemoteStorageError("S3RemoteStorageManager is not configured (missing configure() call)")
        return self._store

    def key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        return object_key(metadata, suffix, self.prefix)

    # -- RemoteStorageManager --------------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """The index and snapshot objects go up from the pool while this thread uploads the ``.log``.

        No DELETE of an absent ``.txnindex``: the RemoteLogManager gives every copy attempt a fresh
        segment id (Kafka's contract), so there is never an older object under that key to remove.
        """
        _ = self.store  # fail with "not configured" before anything is submitted
        self.object_format.forget(metadata)  # (Kafka never reuses a segment id; a test of the contract does)
        small: list[tuple[str, Path | bytes]] = [
            (INDEX_SUFFIXES[IndexType.OFFSET], data.offset_index),
            (INDEX_SUFFIXES[IndexType.TIMESTAMP], data.time_index),
            (INDEX_SUFFIXES[IndexType.PRODUCER_SNAPSHOT], data.producer_snapshot_index),
            (INDEX_SUFFIXES[IndexType.LEADER_EPOCH], bytes(data.leader_epoch_index)),
        ]
        if data.transaction_index is not None:
            small.append((INDEX_SUFFIXES[IndexType.TRANSACTION], data.transaction_index))
        if self.object_format.writes_v2:
            try:
                with self.object_format.encode(metadata, dict([(LOG_SUFFIX, data.log_segment), *small])) as encoded:
                    objects = dict(encoded.objects)
                    log_object = objects.pop(LOG_SUFFIX)
                    self._upload(metadata, log_object, list(objects.items()))
                    try:
                        self.manifests.added(metadata, encoded.manifest_bytes)
                    except BaseException:
                        self._delete_quietly(metadata)  # no segment outside its chain (nor a chained ghost)
                        raise
                    return encoded.custom_metadata
            except FileNotFoundError as e:  # a local input vanished: not a missing remote object
                raise RemoteStorageError(f"cannot copy {e.filename}: {e.strerror}") from e
        self._upload(metadata, data.log_segment, small)
        return None

    def _upload(self, metadata: RemoteLogSegmentMetadata, log_object: Path | bytes,
                small: list[tuple[str, Path | bytes]]) -> None:
        pool = self._upload_pool()
        futures: list[Future[None]] = [pool.submit(self._put, self.key(metadata, suffix), source)
                                       for suffix, source in small]
        try:
            self._put(self.key(metadata, LOG_SUFFIX), log_object)
            crash_point("rsm.copy.mid")  # the .log object is stored, index objects may still be on their way
            for future in futures:
                future.result()
        except BaseException as e:
            # nothing may still be writing when the cleanup deletes, or an object would outlive it
            for future in futures:
                future.cancel()
            wait_all(futures)
            if not isinstance(e, BaseError | OSError):
                raise
            self._delete_quietly(metadata)  # leave no orphans behind a failed copy (Aiven PR #590)
            # a 404 here is a missing bucket (or a vanished local file), not a missing segment
            raise _translate(e, f"copy of {metadata.remote_log_segment_id}", missing_is_not_found=False,
                             secrets=self._secrets) from e

    def _upload_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(SMALL_UPLOAD_THREADS, thread_name_prefix="s3-rsm-upload")
            return self._pool

    def _put(self, key: str, source: Path | bytes) -> None:
        if isinstance(source, Path):
            if source.stat().st_size > self.part_size:
                obstore.put(self.store, key, source, use_multipart=True, chunk_size=self.part_size,
                            max_concurrency=self.concurrency)
                return
            source = source.read_bytes()
        obstore.put(self.store, key, source, use_multipart=False)

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        """A bounded range is one ranged GET collected into a single buffer (the caller asked for that
        many bytes; the remote reader uses the buffer itself through ``read_view``); an open range
        is streamed, as its size is unknown."""
        check_positions(start_position, end_position)
        what = f"fetch of {metadata.remote_log_segment_id} [{start_position}, {end_position}]"
        key = self.key(metadata, LOG_SUFFIX)
        v2 = self._fetch_v2(metadata, LOG_SUFFIX, what, start_position,
                            None if end_position is None else end_position + 1)
        if v2 is not None:
            return v2
        try:
            if end_position is not None:
                # a range past the object's end returns what there is (fewer bytes), as a GET does
                return cast(BinaryIO, BufferReader(obstore.get_range(self.store, key, start=start_position,
                                                                      end=end_position + 1)))
            result = obstore.get(self.store, key, options={"range": {"offset": start_position}})
        except (BaseError, OSError) as e:
            raise _translate(e, what, secrets=self._secrets) from e
        return cast(BinaryIO, _ChunkStreamReader(iter(result.stream(min_chunk_size=STREAM_CHUNK)), what,
                                                 self._secrets))

    def _fetch_v2(self, metadata: RemoteLogSegmentMetadata, suffix: str, what: str, start: int = 0,
                  end: int | None = None) -> BinaryIO | None:
        """A v2 segment's object (original bytes ``[start, end)``); None for a v1 segment."""
        def get(s: str) -> bytes:
            try:
                return bytes(obstore.get(self.store, self.key(metadata, s)).bytes())
            except (BaseError, OSError) as e:
                raise _translate(e, what, secrets=self._secrets) from e

        def get_range(s: str, a: int, b: int) -> bytes | memoryview:
            return obstore.get_range(self.store, self.key(metadata, s), start=a, end=b) if b > a else b""
        manifest = self.object_format.manifest_of(metadata, get)
        if manifest is None:
            return None
        try:
            return self.object_format.fetch(manifest, suffix, get_range, start, end)
        except (BaseError, OSError) as e:
            raise _translate(e, what, secrets=self._secrets) from e

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        key = self.key(metadata, INDEX_SUFFIXES[index_type])
        v2 = self._fetch_v2(metadata, INDEX_SUFFIXES[index_type],
                            f"fetch of {index_type.name} index of {metadata.remote_log_segment_id}")
        if v2 is not None:
            return v2
        try:
            return io.BytesIO(bytes(obstore.get(self.store, key).bytes()))
        except (BaseError, OSError) as e:
            raise _translate(e, f"fetch of {index_type.name} index of {metadata.remote_log_segment_id}",
                             secrets=self._secrets) from e

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """One DeleteObjects request for every key the segment may have; missing keys are fine."""
        self.object_format.forget(metadata)
        try:
            obstore.delete(self.store, [self.key(metadata, s) for s in ALL_SUFFIXES])
        except (NotFoundError, FileNotFoundError):
            pass
        except (BaseError, OSError) as e:
            raise _translate(e, f"delete of {metadata.remote_log_segment_id}", secrets=self._secrets) from e
        if self.object_format.may_hold_v2:
            self.manifests.deleted(metadata)

    def _delete_quietly(self, metadata: RemoteLogSegmentMetadata) -> None:
        try:
            self.delete_log_segment_data(metadata)
        except RemoteStorageError as e:
            log.warning("could not remove the partial upload of %s: %s", metadata.remote_log_segment_id, e)

    # -- ObjectStore -------------------------------------------------------------------------------

    def _object_key(self, key: str) -> str:
        check_object_key(key)
        return f"{self.prefix}{key}"

    def put_object(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """One PUT of the whole object (a multipart upload above the part size); S3 makes either atomic."""
        full = self._object_key(key)
        store = self.store
        try:
            if memoryview(data).nbytes > self.part_size:
                obstore.put(store, full, data, use_multipart=True, chunk_size=self.part_size,
                            max_concurrency=self.concurrency)
            else:
                obstore.put(store, full, data, use_multipart=False)
        except (BaseError, OSError) as e:
            # a 404 here is a missing bucket, not a missing object
            raise _translate(e, f"put of object {full}", missing_is_not_found=False, secrets=self._secrets) from e

    def get_object_range(self, key: str, start: int, end: int) -> bytes | memoryview:
        """One ranged GET; the bytes are a read-only view of obstore's Rust-owned buffer (kept alive by the
        view). A range past the end is cut short by the server; one starting at or past the end is empty."""
        full = self._object_key(key)
        check_object_range(start, end)
        store = self.store
        what = f"get of object {full} [{start}, {end})"
        try:
            if end == start:  # obstore refuses an empty range: still answer "not found" for a missing object
                obstore.head(store, full)
                return b""
            buffer = obstore.get_range(store, full, start=start, end=end)
        except (BaseError, OSError) as e:
            if _status_code(e) == 416:  # the object exists (else 404) but is no longer than start
                return b""
            raise _translate(e, what, secrets=self._secrets) from e
        return memoryview(buffer).cast("B")

    def delete_objects(self, keys: Sequence[str]) -> None:
        """DeleteObjects requests (1000 keys each); keys already gone are fine."""
        full = [self._object_key(key) for key in keys]
        if not full:
            return
        try:
            obstore.delete(self.store, full)
        except (NotFoundError, FileNotFoundError):
            pass
        except (BaseError, OSError) as e:
            raise _translate(e, f"delete of {len(full)} object(s) ({full[0]} ...)", secrets=self._secrets) from e

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        """A paged LIST of the prefix's directory, filtered on the whole prefix; lazy (pages are fetched as
        the caller iterates, and a failure then raises from the iteration)."""
        check_object_prefix(prefix)
        full = f"{self.prefix}{prefix}"
        directory = full.rpartition("/")[0]  # obstore lists by path segments: "a/b" lists "a/b/...", not "a/bc"
        return self._list(self.store, directory or None, full)

    def _list(self, store: S3Store, directory: str | None, full: str) -> Iterator[ObjectInfo]:
        strip = len(self.prefix)
        try:
            for batch in obstore.list(store, directory, chunk_size=1000):
                for meta in batch:
                    path = meta["path"]
                    if path.startswith(full):
                        yield ObjectInfo(path[strip:], meta["size"], int(meta["last_modified"].timestamp() * 1000))
        except (BaseError, OSError) as e:
            raise _translate(e, f"list of objects under {full!r}", missing_is_not_found=False,
                             secrets=self._secrets) from e

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)  # copies in flight finish their small uploads first
        self._store = None


class _ChunkStreamReader(io.RawIOBase):
    """A readable stream over obstore's chunk iterator; transport errors mid-stream are retriable."""

    def __init__(self, chunks: Iterator[Any], what: str, secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self._chunks: Iterator[Any] | None = chunks
        self._pending = memoryview(b"")
        self._what = what
        self._secrets = secrets

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        target = memoryview(buffer).cast("B")
        if not len(target):
            return 0
        while not len(self._pending):
            if self._chunks is None:
                return 0
            try:
                self._pending = memoryview(next(self._chunks)).cast("B")
            except StopIteration:
                self._chunks = None
                return 0
            except (BaseError, OSError) as e:
                self._chunks = None
                raise _translate(e, self._what, secrets=self._secrets) from e
        n = min(len(target), len(self._pending))
        target[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def readall(self) -> bytes:
        """The rest in one go (RawIOBase's default would loop in 8 KiB reads)."""
        parts = [bytes(self._pending)]
        self._pending = memoryview(b"")
        while self._chunks is not None:
            try:
                parts.append(bytes(next(self._chunks)))
            except StopIteration:
                self._chunks = None
            except (BaseError, OSError) as e:
                self._chunks = None
                raise _translate(e, self._what, secrets=self._secrets) from e
        return b"".join(parts)

    def close(self) -> None:
        self._chunks = None  # drops the response: the connection is not reused for a half-read body
        self._pending = memoryview(b"")
        super().close()


def _credentials(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Static keys when configured, else boto3's standard chain (env, profile, SSO, IMDS ...)."""
    access_key = config_str(configs, "aws.access.key.id")
    secret_key = config_str(configs, "aws.secret.access.key")
    if access_key or secret_key:
        if not (access_key and secret_key):
            raise ValueError("configs 'aws.access.key.id' and 'aws.secret.access.key' must be set together")
        static = {"access_key_id": access_key, "secret_access_key": secret_key}
        token = config_str(configs, "aws.session.token")
        if token:
            static["token"] = token
        return static
    try:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError:  # no boto3: obstore's own chain (env, web identity, container, IMDS; no profiles)
        return {}
    profile = config_str(configs, "aws.profile") or None
    try:
        session = boto3.Session(profile_name=profile)
    except Exception as e:  # botocore's ProfileNotFound and friends
        raise ValueError(f"config 'aws.profile': {e}") from e
    try:
        provider = Boto3CredentialProvider(session, ttl=CREDENTIALS_TTL)
    except ValueError:
        raise ValueError("no AWS credentials found: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile "
                         "(AWS_PROFILE or 'aws.profile'), or 'aws.access.key.id'/'aws.secret.access.key'") from None
    return {"credential_provider": provider}


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` without credentials: the ``secrets`` values, user info of URLs, SigV4 query parameters."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    text = _URL_USERINFO.sub(HIDDEN + "@", text)
    return _SIGV4_PARAMS.sub(lambda m: m.group(1) + HIDDEN, text)


def _status_code(error: BaseException) -> int | None:
    """The HTTP status of a failed request, as obstore's message reports it (None: no response)."""
    status = _STATUS.search(str(error).split("\n\nDebug source:", 1)[0])
    return int(status.group(1)) if status else None


def _translate(error: BaseException, what: str, *, missing_is_not_found: bool = True,
               secrets: tuple[str, ...] = ()) -> RemoteStorageError:
    """obstore's error -> the RSM's: not found, retriable (transport, 429, 5xx) or permanent.

    obstore raises the builtin ``FileNotFoundError`` for a 404 (its ``NotFoundError`` is not used).
    The message is :func:`scrub`-bed of ``secrets`` (the configured keys) and credential-looking parts.
    """
    message = scrub(str(error).split("\n\nDebug source:", 1)[0], secrets)
    if isinstance(error, NotFoundError | FileNotFoundError):
        if missing_is_not_found:
            return RemoteResourceNotFoundError(f"{what}: not found: {message}")
        return RemoteStorageError(f"{what}: not found: {message}")
    if isinstance(error, PermissionDeniedError | UnauthenticatedError):
        return RemoteStorageError(f"{what}: access denied: {message}")
    status = _STATUS.search(message)
    if status:
        code = int(status.group(1))
        if code == 429 or code >= 500:
            return RetriableRemoteStorageError(f"{what}: store unavailable: {message}")
        return RemoteStorageError(f"{what}: {message}")
    if isinstance(error, OSError) or any(marker in message for marker in _TRANSPORT):
        return RetriableRemoteStorageError(f"{what}: store unreachable: {message}")
    return RemoteStorageError(f"{what}: {message}")
