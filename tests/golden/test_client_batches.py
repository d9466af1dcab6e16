"""Record batches captured from real Kafka clients (confluent-kafka, kafka-python, aiokafka).

The files are a copy of ``shared/testdata/client-batches`` kept in the repository (so a bare clone
tests them); see ``client-batches/README.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from strata.errors import CorruptRecordError
from strata.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    CompressionType,
    TimestampType,
    decode_batch,
    ensure_valid,
    is_crc_valid,
    iter_batches,
    parse_header,
)

BATCH_DIR = Path(__file__).resolve().parent / "client-batches"  # vendored from shared/testdata (56 KiB)
EXPECTED_VALUE = b"hello tiered storage " * 200
NAME = re.compile(r"^(?P<client>[a-z]+)-(?P<codec>[a-z0-9]+)-codec(?P<id>\d)-(?P<n>\d+)\.batch$")


def _batch_files() -> list[Path]:
    return sorted(BATCH_DIR.glob("*.batch")) if BATCH_DIR.is_dir() else []


FILES = _batch_files()


def test_golden_batches_are_present() -> None:
    """Fails (never skips) when the captured batches are missing, so a broken checkout is noticed."""
    assert BATCH_DIR.is_dir(), (
        f"golden client batches not found: expected the folder {BATCH_DIR} "
        "(tests/golden/client-batches in the repository)"
    )
    assert FILES, f"no *.batch files in {BATCH_DIR}"
    names = {p.name for p in FILES}
    for p in FILES:
        assert NAME.match(p.name), f"unexpected golden file name {p.name}"
    # Every client and every codec is covered.
    assert {NAME.match(n)["client"] for n in names} >= {"ck", "kp", "aio"}  # type: ignore[index]
    assert {int(NAME.match(n)["id"]) for n in names} == {1, 2, 3, 4}  # type: ignore[index]


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


# An empty parametrisation would make pytest skip; a placeholder makes the test fail instead.
PARAMS = FILES or [BATCH_DIR / "missing"]


def _read(path: Path) -> bytes:
    assert path.is_file(), f"golden batch {path} is missing"
    return path.read_bytes()


@pytest.mark.parametrize("path", PARAMS, ids=_ids(PARAMS))
def test_header(path: Path) -> None:
    buf = _read(path)
    m = NAME.match(path.name)
    assert m, path.name
    h = parse_header(buf)
    assert h.magic == 2
    assert h.size == len(buf)
    assert h.compression == int(m["id"])
    assert CompressionType(h.compression).name.lower() == m["codec"]
    assert h.records_count == 1
    assert h.last_offset_delta == 0
    assert not h.is_control and not h.is_transactional
    assert h.timestamp_type is TimestampType.CREATE_TIME
    assert h.base_timestamp == h.max_timestamp > 1_500_000_000_000  # a real wall-clock time in ms
    assert [(p, hh.size) for p, hh in iter_batches(buf, verify_crc=True)] == [(0, len(buf))]


@pytest.mark.parametrize("path", PARAMS, ids=_ids(PARAMS))
def test_crc_valid(path: Path) -> None:
    buf = _read(path)
    h = parse_header(buf)
    assert is_crc_valid(buf, 0, h)
    ensure_valid(buf, 0, h)


@pytest.mark.parametrize("path", PARAMS, ids=_ids(PARAMS))
def test_decode(path: Path) -> None:
    buf = _read(path)
    d = decode_batch(buf)
    assert len(d.records) == 1
    (record,) = d.records
    assert record.key == b"k"
    assert record.headers == ()
    assert record.value == EXPECTED_VALUE
    assert record.offset == d.header.base_offset
    assert record.timestamp == d.header.base_timestamp
    # Compressed indeed: the 4,200-byte value travels in far fewer bytes.
    assert len(buf) - RECORD_BATCH_OVERHEAD < len(EXPECTED_VALUE) // 4


@pytest.mark.parametrize("path", PARAMS, ids=_ids(PARAMS))
def test_decode_at_offset_inside_a_larger_buffer(path: Path) -> None:
    buf = _read(path)
    combined = buf + buf + buf
    assert [p for p, _ in iter_batches(combined, verify_crc=True)] == [0, len(buf), 2 * len(buf)]
    assert decode_batch(combined, len(buf)).records[0].value == EXPECTED_VALUE


@pytest.mark.parametrize("path", PARAMS, ids=_ids(PARAMS))
def test_flipped_payload_byte_is_corrupt(path: Path) -> None:
    buf = _read(path)
    payload_len = len(buf) - RECORD_BATCH_OVERHEAD
    for where in (RECORD_BATCH_OVERHEAD, RECORD_BATCH_OVERHEAD + payload_len // 2, len(buf) - 1):
        damaged = bytearray(buf)
        damaged[where] ^= 0x01
        with pytest.raises(CorruptRecordError, match="CRC mismatch"):
            decode_batch(damaged)
        # With the CRC check skipped, the damage must still surface as a Kafka error, never as a
        # raw codec exception, unless it hit a byte the codec ignores (e.g. the gzip header's mtime).
        try:
            d = decode_batch(damaged, verify_crc=False)
        except CorruptRecordError:
            continue
        assert len(d.records) == 1
