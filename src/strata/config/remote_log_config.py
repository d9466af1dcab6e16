"""``RemoteLogManagerConfig``: the broker's KIP-405 keys, with Kafka's names and defaults.

Two deliberate differences from Kafka, both for the embedded single-node case:
``remote.log.storage.manager.class.name`` defaults to ``local`` (a directory under the first log
dir, ``rsm.config.dir``) so that ``remote.log.storage.system.enable=true`` alone is a working
setup, and the ``remote.log.manager.task.retry.*`` keys - defined but unused in Kafka - really
pace the retries of a failed copy (exponential backoff with jitter).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.config.defs import ConfigKey, at_least, between, one_of

MAX_LONG = 2**63 - 1

REMOTE_LOG_KEYS = [
    ConfigKey("remote.log.storage.system.enable", "bool", False, None, "Master switch of tiered storage"),
    ConfigKey("remote.log.storage.manager.class.name", "string", "local", None,
              "RemoteStorageManager: `local`, `s3` or a dotted Python path"),
    ConfigKey("remote.log.storage.manager.class.path", "string", None, None, "Accepted for compatibility; unused"),
    ConfigKey("remote.log.storage.manager.impl.prefix", "string", "rsm.config.", None,
              "Props under this prefix go to the RSM's configure()"),
    ConfigKey("remote.log.metadata.manager.class.name", "string", "topic", None,
              "RemoteLogMetadataManager: `topic` (the __remote_log_metadata topic) or a dotted path"),
    ConfigKey("remote.log.metadata.manager.class.path", "string", None, None, "Accepted for compatibility; unused"),
    ConfigKey("remote.log.metadata.manager.impl.prefix", "string", "rlmm.config.", None,
              "Props under this prefix go to the RLMM's configure()"),
    ConfigKey("remote.log.metadata.manager.listener.name", "string", None, None, "Accepted; the RLMM is in-process"),
    ConfigKey("remote.log.metadata.custom.metadata.max.bytes", "int", 128, at_least(0),
              "Largest custom metadata an RSM may return from a copy"),
    ConfigKey("remote.log.index.file.cache.total.size.bytes", "long", 1024**3, at_least(1),
              "Bytes of remote offset/time/txn indexes cached on local disk"),
    ConfigKey("remote.log.manager.thread.pool.size", "int", 2, at_least(1), "Deprecated in Kafka; unused"),
    ConfigKey("remote.log.manager.copier.thread.pool.size", "int", 10, at_least(1), "Threads copying segments"),
    ConfigKey("remote.log.manager.expiration.thread.pool.size", "int", 10, at_least(1),
              "Threads deleting expired remote segments"),
    ConfigKey("remote.log.manager.follower.thread.pool.size", "int", 2, at_least(1),
              "Threads of followers' remote work (rebuilding a log's state from remote storage, tracking uploads)"),
    ConfigKey("remote.log.manager.task.interval.ms", "long", 30_000, at_least(1),
              "Delay between runs of each partition's copy and expiration tasks"),
    ConfigKey("remote.log.manager.task.retry.backoff.ms", "long", 500, at_least(1),
              "First backoff after a failed copy"),
    ConfigKey("remote.log.manager.task.retry.backoff.max.ms", "long", 30_000, at_least(1),
              "Largest backoff after repeated copy failures"),
    ConfigKey("remote.log.manager.task.retry.jitter", "double", 0.2, between(0.0, 0.5), "Backoff jitter"),
    ConfigKey("remote.log.manager.copy.max.bytes.per.second", "long", MAX_LONG, at_least(1),
              "Bytes per second all partitions together may copy to remote storage (KIP-956): a copy task waits "
              "before its next segment while the rate is over it; dynamic"),
    ConfigKey("remote.log.manager.copy.quota.window.num", "int", 11, at_least(1),
              "Samples kept for the remote copy quota (10 whole windows + the current one)"),
    ConfigKey("remote.log.manager.copy.quota.window.size.seconds", "int", 1, at_least(1),
              "Time span of each sample of the remote copy quota"),
    ConfigKey("remote.log.manager.fetch.max.bytes.per.second", "long", MAX_LONG, at_least(1),
              "Bytes per second all consumers together may read from remote storage (KIP-956): while the rate is "
              "over it a fetch does not read the remote tier (no records, no error; the client fetches again); "
              "dynamic"),
    ConfigKey("remote.log.manager.fetch.quota.window.num", "int", 11, at_least(1),
              "Samples kept for the remote fetch quota (10 whole windows + the current one)"),
    ConfigKey("remote.log.manager.fetch.quota.window.size.seconds", "int", 1, at_least(1),
              "Time span of each sample of the remote fetch quota"),
    ConfigKey("remote.log.reader.threads", "int", 10, at_least(1), "Threads serving reads from the remote tier"),
    ConfigKey("remote.log.reader.max.pending.tasks", "int", 100, at_least(1),
              "Queued remote reads beyond which a fetch gets an error at once"),
    ConfigKey("remote.log.reader.prefetch.total.size.bytes", "long", 128 * 1024**2, at_least(0),
              "Memory for read-ahead windows of remote segments, all partitions together; 0 disables read-ahead"),
    ConfigKey("remote.log.reader.prefetch.windows", "int", 2, at_least(1),
              "Read-ahead windows kept ahead of a sequential reader of a partition"),
    ConfigKey("remote.log.reader.prefetch.window.bytes", "int", 8 * 1024**2, at_least(1),
              "Size of a read-ahead window: at least this, or the fetch's max bytes when larger"),
    ConfigKey("remote.log.reader.corrupt.segment.action", "string", "fail", one_of("fail", "skip"),
              "A remote segment whose batches fail validation: `fail` answers CORRUPT_MESSAGE for its offsets, "
              "`skip` serves from the next segment (an offset gap: data loss by choice)"),
    ConfigKey("remote.log.scrubber.bytes.per.second", "long", 10 * 1024**2, at_least(0),
              "Strata: bytes per second the background scrubber reads back from remote storage to check the "
              "segments of the partitions this broker leads (hashes, chunks, record batches); 0 disables it"),
    ConfigKey("remote.log.scrubber.interval.ms", "long", 3_600_000, at_least(1),
              "Strata: wait after a full scrubber pass over the led partitions' remote segments before the next"),
    ConfigKey("remote.log.cleaner.max.rewrite.bytes.per.pass", "long", 1024**3, at_least(1),
              "Compacted tiered topics (Strata, KIP-1272): bytes of remote segments one cleaning of a partition "
              "uploads again at most; the next cleaning goes on where it stopped"),
    ConfigKey("remote.fetch.max.wait.ms", "int", 500, at_least(1),
              "How long a fetch waits for remote reads before answering without them"),
    ConfigKey("remote.list.offsets.request.timeout.ms", "long", 30_000, at_least(1),
              "Timeout of a ListOffsets timestamp search in the remote tier"),
    ConfigKey("log.initial.task.delay.ms", "long", 30_000, at_least(0),
              "Delay before the first retention run after startup"),
]


@dataclass(frozen=True, slots=True)
class RemoteLogManagerConfig:
    enabled: bool
    rsm_class_name: str
    rsm_prefix: str
    rlmm_class_name: str
    rlmm_prefix: str
    custom_metadata_max_bytes: int
    index_cache_total_size_bytes: int
    copier_thread_pool_size: int
    follower_thread_pool_size: int
    expiration_thread_pool_size: int
    task_interval_ms: int
    task_retry_backoff_ms: int
    task_retry_backoff_max_ms: int
    task_retry_jitter: float
    reader_threads: int
    reader_max_pending_tasks: int
    reader_prefetch_total_size_bytes: int
    reader_prefetch_windows: int
    reader_prefetch_window_bytes: int
    fetch_max_wait_ms: int
    list_offsets_timeout_ms: int
    rsm_props: Mapping[str, str] = field(repr=False)  # S3 credentials: never in a printed config
    rlmm_props: Mapping[str, str] = field(repr=False)
    reader_corrupt_segment_action: str = "fail"
    cleaner_max_rewrite_bytes_per_pass: int = 1024**3
    # KIP-956 quotas (bytes per second; MAX_LONG: none) and their rate windows
    copy_max_bytes_per_second: int = MAX_LONG
    copy_quota_window_num: int = 11
    copy_quota_window_size_seconds: int = 1
    fetch_max_bytes_per_second: int = MAX_LONG
    fetch_quota_window_num: int = 11
    fetch_quota_window_size_seconds: int = 1
    # the background scrubber (strata.tiered.scrubber): read rate (0: off) and the wait between passes
    scrubber_bytes_per_second: int = 10 * 1024**2
    scrubber_interval_ms: int = 3_600_000

    @classmethod
    def from_parsed(cls, p: Mapping[str, Any], raw: Mapping[str, object]) -> RemoteLogManagerConfig:
        rsm_prefix = p["remote.log.storage.manager.impl.prefix"]
        rlmm_prefix = p["remote.log.metadata.manager.impl.prefix"]
        return cls(
            enabled=p["remote.log.storage.system.enable"],
            rsm_class_name=p["remote.log.storage.manager.class.name"],
            rsm_prefix=rsm_prefix,
            rlmm_class_name=p["remote.log.metadata.manager.class.name"],
            rlmm_prefix=rlmm_prefix,
            custom_metadata_max_bytes=p["remote.log.metadata.custom.metadata.max.bytes"],
            index_cache_total_size_bytes=p["remote.log.index.file.cache.total.size.bytes"],
            copier_thread_pool_size=p["remote.log.manager.copier.thread.pool.size"],
            follower_thread_pool_size=p["remote.log.manager.follower.thread.pool.size"],
            expiration_thread_pool_size=p["remote.log.manager.expiration.thread.pool.size"],
            task_interval_ms=p["remote.log.manager.task.interval.ms"],
            task_retry_backoff_ms=p["remote.log.manager.task.retry.backoff.ms"],
            task_retry_backoff_max_ms=p["remote.log.manager.task.retry.backoff.max.ms"],
            task_retry_jitter=p["remote.log.manager.task.retry.jitter"],
            reader_threads=p["remote.log.reader.threads"],
            reader_max_pending_tasks=p["remote.log.reader.max.pending.tasks"],
            reader_prefetch_total_size_bytes=p["remote.log.reader.prefetch.total.size.bytes"],
            reader_prefetch_windows=p["remote.log.reader.prefetch.windows"],
            reader_prefetch_window_bytes=p["remote.log.reader.prefetch.window.bytes"],
            fetch_max_wait_ms=p["remote.fetch.max.wait.ms"],
            list_offsets_timeout_ms=p["remote.list.offsets.request.timeout.ms"],
            rsm_props={k[len(rsm_prefix):]: str(v) for k, v in raw.items() if k.startswith(rsm_prefix)},
            rlmm_props={k[len(rlmm_prefix):]: str(v) for k, v in raw.items() if k.startswith(rlmm_prefix)},
            reader_corrupt_segment_action=p["remote.log.reader.corrupt.segment.action"],
            cleaner_max_rewrite_bytes_per_pass=p["remote.log.cleaner.max.rewrite.bytes.per.pass"],
            copy_max_bytes_per_second=p["remote.log.manager.copy.max.bytes.per.second"],
            copy_quota_window_num=p["remote.log.manager.copy.quota.window.num"],
            copy_quota_window_size_seconds=p["remote.log.manager.copy.quota.window.size.seconds"],
            fetch_max_bytes_per_second=p["remote.log.manager.fetch.max.bytes.per.second"],
            fetch_quota_window_num=p["remote.log.manager.fetch.quota.window.num"],
            fetch_quota_window_size_seconds=p["remote.log.manager.fetch.quota.window.size.seconds"],
            scrubber_bytes_per_second=p["remote.log.scrubber.bytes.per.second"],
            scrubber_interval_ms=p["remote.log.scrubber.interval.ms"],
        )

    def rsm_configs(self, broker_id: int, first_log_dir: Path) -> dict[str, Any]:
        """What the RSM's ``configure`` receives: its props plus ``broker.id`` (Kafka), and for the
        embedded ``local`` backend a default ``dir`` under the first log dir."""
        out: dict[str, Any] = dict(self.rsm_props)
        out["broker.id"] = broker_id
        if self.rsm_class_name == "local":
            out.setdefault("dir", str(first_log_dir / "remote-storage"))
        return out

    def rlmm_configs(self, broker_id: int, first_log_dir: Path, cluster_id: str) -> dict[str, Any]:
        """Kafka injects ``broker.id``, ``log.dir`` and ``cluster.id``; user props win."""
        out: dict[str, Any] = {"broker.id": broker_id, "log.dir": str(first_log_dir), "cluster.id": cluster_id}
        out.update(self.rlmm_props)
        return out
