"""Reading one input partition on an executor: a remote segment range or a broker offset range.

Both paths hand raw record batches to the columnar decoder and yield Arrow record batches in
Spark's Kafka schema; no record is touched one by one in Python. A remote slice streams its byte
range from the store in chunks (a batch cut by a chunk boundary is carried into the next chunk);
a broker slice fetches until its planned end offset from the partition's current leader, and
goes on from the new leader when the leadership moves during the read.

Offsets need not be contiguous: compaction (``cleanup.policy=compact``) removes records inside
batches (a batch keeps its base and last offset) and whole batches (the next one starts later),
and may leave the last offsets before the high watermark with no record at all. A slice is done
when its read position - the offset after the last batch read, which counts the records compaction
removed - reaches its end, or when the next batch starts at or after the end, or when the broker
has nothing left below the end (:func:`_nothing_left`); never by counting records. A gap inside
[log start, end) is not data loss; only offsets below the log start are (``failOnDataLoss``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from strata.client.cluster import EARLIEST, EARLIEST_LOCAL, LATEST, OFFSET_OUT_OF_RANGE, FetchedPartition
from strata.spark.columnar import AbortedTxn, ColumnarDecoder, decode_batches
from strata.spark.failover import FAILOVER_CODES, FailoverCluster
from strata.spark.options import security_of
from strata.spark.planning import DATA_LOSS_HINT, BrokerSlice, RemoteSlice, SliceGroup, StrataDataLossError
from strata.spark.remote import OffsetIndexView, open_rsm, read_index
from strata.tiered.api import IndexType, RemoteResourceNotFoundError

log = logging.getLogger(__name__)

CHUNK_BYTES = 8 << 20
MAX_EMPTY_FETCHES = 20
RETRY_BACKOFF_S = 0.2


def read_slice(s: RemoteSlice | BrokerSlice | SliceGroup) -> Iterator[Any]:
    """Arrow record batches of one input partition (a group's slices one after another)."""
    if isinstance(s, SliceGroup):
        return (batch for piece in s.slices for batch in read_remote(piece))
    if isinstance(s, RemoteSlice):
        return read_remote(s)
    return read_broker(s)


def _aborted(entries: Any) -> list[AbortedTxn] | None:
    """(producer id, first offset, last offset) from the plan; None under read_uncommitted."""
    return None if entries is None else [AbortedTxn(int(p), int(f), int(last)) for p, f, last in entries]


def _lost(s: RemoteSlice | BrokerSlice, what: str) -> None:
    if s.settings.fail_on_data_loss:
        raise StrataDataLossError(f"{what}. {DATA_LOSS_HINT}")
    log.warning("%s; skipped (failOnDataLoss=false)", what)


def read_remote(s: RemoteSlice) -> Iterator[Any]:
    st = s.settings
    assert st.rsm_class is not None
    rsm = open_rsm(st.rsm_class, dict(st.rsm_props))
    md = s.segment
    aborted = _aborted(s.aborted)
    try:
        start = s.start_position
        if start is None:
            start = OffsetIndexView(md.start_offset, read_index(rsm, md, IndexType.OFFSET)).position_for(s.start_offset)
        # A bounded range even for "to the end": the S3 backend then makes one ranged GET into one
        # buffer instead of streaming the object in small chunks.
        end = s.end_position if s.end_position is not None else md.segment_size_in_bytes
        stream = rsm.fetch_log_segment(md, start, max(start, end - 1))
    except RemoteResourceNotFoundError:
        _lost(s, f"remote segment {md.remote_log_segment_id} of {s.topic}-{s.partition} (offsets "
                 f"{s.start_offset}-{s.end_offset - 1}) was deleted before it was read")
        return
    # One decoder for the whole slice: its read_committed state (which producers are inside an
    # aborted transaction) and its position carry over from one chunk to the next.
    decoder = ColumnarDecoder(topic=s.topic, partition=s.partition, start_offset=s.start_offset,
                              end_offset=s.end_offset, include_headers=st.include_headers, aborted=aborted)
    pending = bytearray()
    with stream:
        while decoder.next_offset < s.end_offset and not decoder.end_reached:
            chunk = stream.read(CHUNK_BYTES)
            if not chunk:
                break
            if pending:
                pending += chunk
                data: bytes | bytearray = pending
            else:
                data = chunk
            yield from decoder.decode(data)
            pending = bytearray(memoryview(data)[decoder.bytes_consumed:])
    if pending and decoder.next_offset < s.end_offset and not decoder.end_reached:
        raise ValueError(f"remote segment {md.remote_log_segment_id} of {s.topic}-{s.partition} ends with "
                         f"{len(pending)} bytes of a partial batch at offset {decoder.next_offset}")


def read_broker(s: BrokerSlice) -> Iterator[Any]:
    """Fetch [start, end) from the partition's leader, following the leadership when it moves.

    The position advances only past records a successful Fetch returned (and this generator
    yielded), so a retry after a lost connection or a leader change starts at the first record not
    read yet: nothing is read twice or skipped. :class:`FailoverCluster` retries the request itself.
    """
    st = s.settings
    key = (s.topic, s.partition)
    offset = s.start_offset
    empty = 0
    deadline = time.monotonic() + st.timeout_s
    cluster = FailoverCluster(st.bootstrap, timeout_s=st.timeout_s, client_id="strata-spark",
                              known_brokers=st.brokers, security=security_of(st.security))
    with cluster:
        while offset < s.end_offset:
            fetched = cluster.fetch(s.topic, s.partition, offset, max_bytes=st.fetch_max_bytes,
                                    isolation_level=st.isolation_level)
            code = fetched.error_code
            if code == OFFSET_OUT_OF_RANGE:
                earliest = cluster.list_offsets({key: EARLIEST})[key]
                if offset < earliest:
                    _lost(s, f"offsets {offset}-{min(earliest, s.end_offset) - 1} of {s.topic}-{s.partition} were "
                             "deleted before they were read")
                    offset = earliest
                    continue
                if time.monotonic() < deadline:  # an answer from a replica that is not the leader any more
                    cluster.forget_leaders()
                    time.sleep(RETRY_BACKOFF_S)
                    continue
                latest = cluster.list_offsets({key: LATEST})[key]
                if offset > latest:  # the new leader does not have them (an unclean election)
                    _lost(s, f"offsets {offset}-{s.end_offset - 1} of {s.topic}-{s.partition} are gone: the "
                             f"partition now ends at {latest}")
                    return
                raise ValueError(f"offset {offset} of {s.topic}-{s.partition} is out of range "
                                 f"(earliest {earliest}, latest {latest}) but was planned to be read")
            if code in FAILOVER_CODES:  # FailoverCluster retried it for timeout_s already
                raise TimeoutError(f"fetching {s.topic}-{s.partition} at {offset}: error {code} for "
                                   f"{st.timeout_s:g} s")
            if code != 0:
                raise RuntimeError(f"fetching {s.topic}-{s.partition} at offset {offset}: error {code}")
            aborted = [AbortedTxn(p, f) for p, f in fetched.aborted] if st.isolation_level == 1 else None
            result = decode_batches(fetched.records, topic=s.topic, partition=s.partition, start_offset=offset,
                                    end_offset=s.end_offset, include_headers=st.include_headers, aborted=aborted)
            yield from result.batches
            if result.end_reached:  # the next batch starts at or after the end: the rest is a gap (compaction)
                return
            if result.next_offset > offset:
                offset = result.next_offset
                empty = 0
                deadline = time.monotonic() + st.timeout_s
                continue
            if not fetched.records and _nothing_left(cluster, s, offset, fetched):
                return
            empty += 1
            if empty >= MAX_EMPTY_FETCHES or time.monotonic() > deadline:
                raise TimeoutError(f"no progress fetching {s.topic}-{s.partition} at offset {offset} "
                                   f"(planned end {s.end_offset}, high watermark {fetched.high_watermark})")


def _nothing_left(cluster: FailoverCluster, s: BrokerSlice, offset: int, fetched: FetchedPartition) -> bool:
    """Whether an empty Fetch answer at ``offset`` means that [offset, end) holds no record any more.

    The broker answers a Fetch with the batches from the first one whose last offset is at or after
    the fetch offset, up to the high watermark (the LSO under read_committed). From the local log an
    empty answer below that bound therefore means that no batch is left there: compaction removed
    the last records before it, the offsets stay (Kafka's consumer then waits at that position for
    new records; a bounded read is done). But a Fetch below the local log start is a remote read,
    which the broker answers empty too when it runs out of ``remote.fetch.max.wait.ms``: that one is
    asked again. So the slice is done only when the bound covers the end and ``offset`` is at or
    above the local log start that ListOffsets (-4) reports after the Fetch (it only grows), both
    answered by the same leader; otherwise the caller fetches again.
    """
    bound = fetched.last_stable_offset if s.settings.isolation_level == 1 else fetched.high_watermark
    if bound < s.end_offset:
        return False
    key = (s.topic, s.partition)
    leader, retries = cluster.cached_leader(*key), cluster.retries
    local_start = cluster.list_offsets({key: EARLIEST_LOCAL})[key]
    if leader is None or cluster.retries != retries or cluster.cached_leader(*key) != leader:
        return False  # the leadership moved in between: the answers may be two brokers'
    if offset < local_start:
        return False
    log.debug("%s-%d: no records in [%d, %d) (compacted away)", s.topic, s.partition, offset, s.end_offset)
    return True
