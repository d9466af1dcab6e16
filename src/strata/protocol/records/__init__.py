"""Kafka record batch v2: the format shared by the wire (Produce/Fetch) and the ``.log`` files."""

from strata.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    TimestampType,
    compute_crc,
    ensure_valid,
    is_crc_valid,
    iter_batches,
    parse_header,
    reseal_crc,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from strata.protocol.records.builder import BatchBuilder, build_batch, build_control_batch
from strata.protocol.records.compression import CompressionType, compress, decompress
from strata.protocol.records.record import (
    ControlRecord,
    ControlRecordType,
    DecodedBatch,
    Record,
    decode_batch,
    decode_records,
    parse_control_record,
)

__all__ = [
    "ATTRIBUTES_OFFSET", "CONTROL_MASK", "HEADER_STRUCT", "TRANSACTIONAL_MASK",
    "LOG_OVERHEAD", "NO_PARTITION_LEADER_EPOCH", "NO_PRODUCER_EPOCH", "NO_PRODUCER_ID", "NO_SEQUENCE",
    "NO_TIMESTAMP", "RECORD_BATCH_OVERHEAD", "TIMESTAMP_TYPE_MASK", "BatchBuilder", "BatchHeader",
    "CompressionType",
    "ControlRecord", "ControlRecordType", "DecodedBatch", "Record", "TimestampType", "build_batch",
    "build_control_batch", "compress", "compute_crc", "decode_batch", "decode_records", "decompress",
    "ensure_valid", "is_crc_valid", "iter_batches", "parse_control_record", "parse_header", "reseal_crc",
    "set_base_offset", "set_log_append_time", "set_partition_leader_epoch",
]
