"""Read ``__remote_log_metadata`` over the Kafka protocol: which segments of a partition are remote.

A reader of the remote tier (the Spark driver) needs what the broker's RLMM knows: the
COPY_SEGMENT_FINISHED segments of a partition with their offsets, sizes and max timestamps. The
records are Kafka's own (the same serde as the broker's topic-based RLMM), so replaying the
metadata partitions that hold a user partition gives the same view against Strata or against an
Apache Kafka cluster that uses the topic-based RLMM. Only those metadata partitions are fetched
(Kafka's partitioner), and a reader keeps its position, so a streaming query's later plans fetch
only what was appended since.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from strata.client.cluster import EARLIEST, LATEST, KafkaClientError, KafkaCluster
from strata.errors import TruncatedBatchError
from strata.protocol.records import BatchHeader, decode_batch, iter_batches
from strata.tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from strata.tiered.metadata.cache import RemotePartitionMetadataStore
from strata.tiered.metadata.keys import compacted_away_delete_started
from strata.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
from strata.tiered.metadata.serde import RemoteLogSegmentMetadataSnapshot, deserialize

log = logging.getLogger(__name__)

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
FETCH_BYTES = 8 << 20
MAX_EMPTY_FETCHES = 50


def complete_batches(records: bytes) -> list[tuple[int, BatchHeader]]:
    """The whole batches of a Fetch answer; a broker may end it with a partial batch (Kafka does)."""
    out = []
    try:
        for item in iter_batches(records, verify_crc=True):
            out.append(item)
    except TruncatedBatchError:
        pass
    return out


class RemoteLogMetadataReader:
    """A replay of the metadata partitions of some user partitions, advanced by ``poll``."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self.store = RemotePartitionMetadataStore()
        self._positions: dict[int, int] = {}  # metadata partition -> next offset to read
        self._partitioner: RemoteLogMetadataTopicPartitioner | None = None
        self.records_read = 0

    def _metadata_partitions(self, partitions: Iterable[TopicIdPartition]) -> set[int]:
        if self._partitioner is None:
            md = self.cluster.metadata([REMOTE_LOG_METADATA_TOPIC])
            info = md.topics.get(REMOTE_LOG_METADATA_TOPIC)
            if info is None:  # tiering never enabled on this cluster: nothing is remote
                return set()
            self._partitioner = RemoteLogMetadataTopicPartitioner(len(info.partitions))
        return {self._partitioner.metadata_partition(tp) for tp in partitions}

    def poll(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Read the metadata partitions of ``partitions`` up to their current end."""
        wanted = sorted(self._metadata_partitions(partitions))
        if not wanted:
            return
        keys = [(REMOTE_LOG_METADATA_TOPIC, p) for p in wanted]
        ends = self.cluster.list_offsets(dict.fromkeys(keys, LATEST))
        missing = [k for k in keys if k[1] not in self._positions]
        if missing:
            starts = self.cluster.list_offsets(dict.fromkeys(missing, EARLIEST))
            for (_, p), offset in starts.items():
                self._positions[p] = offset
        for p in wanted:
            self._read_partition(p, ends[(REMOTE_LOG_METADATA_TOPIC, p)])

    def _read_partition(self, partition: int, end: int) -> None:
        position = self._positions[partition]
        empty = 0
        while position < end:
            fetched = self.cluster.fetch(REMOTE_LOG_METADATA_TOPIC, partition, position, max_bytes=FETCH_BYTES)
            if fetched.error_code != 0:
                raise KafkaClientError(f"reading {REMOTE_LOG_METADATA_TOPIC}-{partition} at {position}: "
                                       f"error {fetched.error_code}", fetched.error_code)
            before = position
            for pos, header in complete_batches(fetched.records):
                if header.last_offset < position:
                    continue
                if header.is_control:
                    position = header.last_offset + 1
                    continue
                for record in decode_batch(fetched.records, pos).records:
                    if record.offset < position:
                        continue
                    self._apply(partition, record.offset, record.value)
                    position = record.offset + 1
                position = max(position, header.last_offset + 1)
            if position == before:
                empty += 1
                if empty >= MAX_EMPTY_FETCHES:  # bounded: a broker that keeps answering nothing
                    raise KafkaClientError(f"no progress reading {REMOTE_LOG_METADATA_TOPIC}-{partition} "
                                           f"at offset {position} (end {end})")
        self._positions[partition] = position

    def _apply(self, partition: int, offset: int, value: bytes | None) -> None:
        self.records_read += 1
        try:
            md = deserialize(value) if value is not None else None
        except ValueError as e:
            log.warning("skipping undecodable record %s-%d@%d: %s", REMOTE_LOG_METADATA_TOPIC, partition, offset, e)
            return
        if md is None or isinstance(md, RemoteLogSegmentMetadataSnapshot):
            return
        try:
            started = compacted_away_delete_started(self.store, md)  # a compacted topic: as the broker's RLMM
            if started is not None:
                self.store.handle_remote_log_metadata(started)
            self.store.handle_remote_log_metadata(md)
        except Exception as e:  # noqa: BLE001 - the broker's RLMM drops events its cache refuses, so do we
            log.debug("dropping event %s-%d@%d: %s", REMOTE_LOG_METADATA_TOPIC, partition, offset, e)

    def copied_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The partition's COPY_SEGMENT_FINISHED segments forming one chain of offsets, oldest first.

        Overlaps can only come from leader changes with unclean elections or re-uploads; of the
        segments covering an offset the one reaching furthest (then of the highest epoch) wins, as
        the leader's lineage would pick the surviving history.
        """
        cache = self.store.get(tp)
        if cache is None:
            return []
        finished = [md for md in cache.list_all_remote_log_segments()
                    if md.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        finished.sort(key=lambda md: (md.start_offset, -md.end_offset, -max(md.segment_leader_epochs)))
        chain: list[RemoteLogSegmentMetadata] = []
        next_offset = -1
        for md in finished:
            if md.end_offset < next_offset:
                continue  # covered by a segment already chosen
            chain.append(md)  # may overlap its predecessor: readers start it at the predecessor's end + 1
            next_offset = md.end_offset + 1
        return chain
