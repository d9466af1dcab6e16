"""``WriterConfig``: the produce-side knobs of a diskless broker (Inkless's ``inkless.produce.*``)."""

from __future__ import annotations

from dataclasses import dataclass

from strata.diskless.writer.object_key import DEFAULT_PREFIX, validate_prefix


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """Defaults follow Inkless (§1.12 of the reference) except where noted.

    * ``max_bytes``: the active file rotates once it holds this much (best effort: one request is never
      split, so a single oversized request makes an oversized object).
    * ``commit_interval_ms``: the longest a write waits in a non-full file; the timer starts at the
      first write into an empty file, so an idle broker uploads nothing.
    * ``max_upload_attempts`` / ``upload_backoff_ms``: PUT retries on transient store errors, the
      backoff doubling after each attempt.
    * ``max_uploads_in_flight``: objects uploading at once (Inkless: 8 threads; 4 here, since each
      in-flight object holds up to ``max_bytes`` of memory). Commits never overlap, whatever this is.
    * ``object_key_prefix``: where WAL objects go in the store ("" puts them at the root).
    * ``close_timeout_ms``: how long ``close()`` waits for uploads and commits already started.
    """

    max_bytes: int = 8 * 1024 * 1024
    commit_interval_ms: int = 250
    max_upload_attempts: int = 3
    upload_backoff_ms: int = 10
    max_uploads_in_flight: int = 4
    object_key_prefix: str = DEFAULT_PREFIX
    close_timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {self.max_bytes}")
        if self.commit_interval_ms < 0:
            raise ValueError(f"commit_interval_ms must be >= 0, got {self.commit_interval_ms}")
        if self.max_upload_attempts < 1:
            raise ValueError(f"max_upload_attempts must be >= 1, got {self.max_upload_attempts}")
        if self.upload_backoff_ms < 0:
            raise ValueError(f"upload_backoff_ms must be >= 0, got {self.upload_backoff_ms}")
        if self.max_uploads_in_flight < 1:
            raise ValueError(f"max_uploads_in_flight must be >= 1, got {self.max_uploads_in_flight}")
        if self.close_timeout_ms < 0:
            raise ValueError(f"close_timeout_ms must be >= 0, got {self.close_timeout_ms}")
        validate_prefix(self.object_key_prefix)
