"""The four Kafka codecs: round trips, both snappy framings, LZ4 frame flags, corrupt input."""

from __future__ import annotations

import gzip
import os
import struct
import types
import warnings

import cramjam
import pytest

from strata.errors import CorruptRecordError, KafkaError, UnsupportedCompressionTypeError
from strata.protocol.records import CompressionType, compress, decompress
from strata.protocol.records.compression import XERIAL_MAGIC

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c is not CompressionType.NONE]

PAYLOADS = {
    "empty": b"",
    "one-byte": b"\x00",
    "text": b"hello tiered storage " * 200,
    "random": os.urandom(5_000),
    "multi-block": (b"0123456789abcdef" * 3000) + os.urandom(40_000) + b"z" * 70_000,  # > 3 xerial blocks
}


def _xerial(data: bytes, block: int, *, version: bytes = struct.pack(">ii", 1, 1)) -> bytes:
    """Xerial framing built directly from cramjam's raw snappy blocks, not by the code under test."""
    out = bytearray(b"\x82SNAPPY\x00" + version)
    for i in range(0, len(data), block):
        compressed = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += struct.pack(">i", len(compressed)) + compressed
    return bytes(out)


@pytest.fixture
def kafka_codec(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """``kafka.codec``, whose xerial reader and writer are kafka-python's own code.

    Its snappy block codec is python-snappy when installed. python-snappy (0.7) is itself a thin
    wrapper over cramjam's raw snappy, so when it is absent the same thing is plugged in: what is
    checked here is kafka-python's independent xerial framing.
    """
    with warnings.catch_warnings():  # kafka-python's package import uses deprecated importlib APIs
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka.codec

    if not kafka.codec.has_snappy():
        shim = types.SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(data)),
        )
        monkeypatch.setattr(kafka.codec, "snappy", shim)
    assert kafka.codec.has_snappy()
    return kafka.codec


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_round_trip(codec: CompressionType, name: str) -> None:
    data = PAYLOADS[name]
    for view in (data, bytearray(data), memoryview(data)):
        packed = compress(codec, view)
        assert isinstance(packed, bytes)
        assert decompress(codec, packed) == data
        assert decompress(codec, memoryview(packed)) == data
        assert decompress(int(codec), bytearray(packed)) == data


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_compressible_data_shrinks(codec: CompressionType) -> None:
    data = PAYLOADS["text"]
    assert len(compress(codec, data)) < len(data) // 4


def test_none_is_identity() -> None:
    assert compress(CompressionType.NONE, b"abc") == b"abc"
    assert decompress(CompressionType.NONE, memoryview(b"abc")) == b"abc"


def test_gzip_is_real_gzip() -> None:
    data = PAYLOADS["multi-block"]
    assert gzip.decompress(compress(CompressionType.GZIP, data)) == data
    assert decompress(CompressionType.GZIP, gzip.compress(data)) == data
    # Two gzip members back to back (some writers flush that way) decode as one stream.
    assert decompress(CompressionType.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


def test_zstd_is_a_zstd_frame() -> None:
    packed = compress(CompressionType.ZSTD, b"abc" * 1000)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert decompress(CompressionType.ZSTD, bytes(cramjam.zstd.compress(b"xyz" * 99))) == b"xyz" * 99


# --------------------------------------------------------------------------- LZ4 frame


@pytest.mark.parametrize("name", ["one-byte", "text", "multi-block"])
def test_lz4_frame_uses_independent_blocks(name: str) -> None:
    """Kafka's Java LZ4 reader rejects linked blocks ("Dependent block stream is unsupported")."""
    packed = compress(CompressionType.LZ4, PAYLOADS[name])
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic 0x184D2204, little-endian
    flg = packed[4]
    assert flg >> 6 == 0b01, "frame version must be 01"
    assert flg & 0x20, "block independence flag (FLG bit 5) must be set"
    assert flg & 0x03 == 0, "reserved FLG bits must be 0"
    assert packed[5] & 0x8F == 0, "reserved BD bits must be 0"
    assert (packed[5] >> 4) & 0x07 in (4, 5, 6, 7), "block max size must be 64 KiB .. 4 MiB"


def test_lz4_decodes_linked_and_independent_frames() -> None:
    data = PAYLOADS["multi-block"]
    assert decompress(CompressionType.LZ4, bytes(cramjam.lz4.compress(data))) == data
    c = cramjam.lz4.Compressor(block_linked=False)
    c.compress(data)
    assert decompress(CompressionType.LZ4, bytes(c.finish())) == data


# --------------------------------------------------------------------------- snappy framings


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_snappy_decodes_raw_blocks(name: str) -> None:
    data = PAYLOADS[name]
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(CompressionType.SNAPPY, raw) == data


@pytest.mark.parametrize("block", [1, 100, 32 * 1024, 64 * 1024, 1 << 20])
@pytest.mark.parametrize("name", ["one-byte", "text", "multi-block"])
def test_snappy_decodes_handmade_xerial(name: str, block: int) -> None:
    data = PAYLOADS[name]
    if block == 1:
        data = data[:300]
    assert decompress(CompressionType.SNAPPY, _xerial(data, block)) == data


def test_snappy_xerial_header_version_fields_are_not_interpreted() -> None:
    # Some producers write version/compat little-endian; Kafka's reader ignores them too.
    data = PAYLOADS["text"]
    assert decompress(CompressionType.SNAPPY, _xerial(data, 1000, version=struct.pack("<ii", 1, 1))) == data


def test_snappy_xerial_with_no_blocks_is_empty() -> None:
    assert decompress(CompressionType.SNAPPY, _xerial(b"", 100)) == b""


def test_our_snappy_output_is_xerial_by_default() -> None:
    data = PAYLOADS["multi-block"]
    packed = compress(CompressionType.SNAPPY, data)
    assert packed[:8] == XERIAL_MAGIC == b"\x82SNAPPY\x00"
    assert struct.unpack_from(">ii", packed, 8) == (1, 1)
    # Walk the blocks by hand: each one is a raw snappy block of at most 32 KiB uncompressed.
    pos, out, sizes = 16, bytearray(), []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        block = bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n]))
        sizes.append(len(block))
        out += block
        pos += 4 + n
    assert pos == len(packed)
    assert bytes(out) == data
    assert max(sizes) == 32 * 1024 and len(sizes) == -(-len(data) // (32 * 1024))


def test_snappy_raw_option_writes_one_raw_block() -> None:
    data = PAYLOADS["text"]
    packed = compress(CompressionType.SNAPPY, data, snappy_raw=True)
    assert packed[:8] != XERIAL_MAGIC
    assert bytes(cramjam.snappy.decompress_raw(packed)) == data
    assert decompress(CompressionType.SNAPPY, packed) == data


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_our_xerial_is_readable_by_kafka_python(name: str, kafka_codec: types.ModuleType) -> None:
    data = PAYLOADS[name]
    packed = compress(CompressionType.SNAPPY, data)
    if len(packed) > 16:  # kafka-python only detects xerial when there is at least one block
        assert kafka_codec._detect_xerial_stream(packed)
        assert kafka_codec.snappy_decode(packed) == data
    # And kafka-python's own xerial writer is readable by us.
    theirs = kafka_codec.snappy_encode(data, xerial_compatible=True, xerial_blocksize=1000)
    assert decompress(CompressionType.SNAPPY, theirs) == data


# --------------------------------------------------------------------------- corrupt input


GARBAGE = [
    b"\xff" * 64,
    b"not compressed at all, just some text that is long enough to look like a payload",
    bytes(range(256)),
]


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@pytest.mark.parametrize("garbage", GARBAGE, ids=["ff", "text", "range"])
def test_garbage_raises_corrupt_record_error(codec: CompressionType, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError) as exc:
        decompress(codec, garbage)
    assert type(exc.value).__module__ == "strata.errors"


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_truncated_stream_raises_corrupt_record_error(codec: CompressionType) -> None:
    packed = compress(codec, PAYLOADS["multi-block"])
    for cut in (1, len(packed) // 2, len(packed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[:cut])


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_damaged_stream_never_leaks_codec_exceptions(codec: CompressionType) -> None:
    packed = compress(codec, PAYLOADS["multi-block"])
    for i in range(0, len(packed), max(1, len(packed) // 97)):
        damaged = bytearray(packed)
        damaged[i] ^= 0x5A
        try:
            decompress(codec, bytes(damaged))
        except KafkaError:
            pass


@pytest.mark.parametrize(
    "tail",
    [
        b"\x00\x00",  # block length cut short
        struct.pack(">i", -1) + b"abc",  # negative block length
        struct.pack(">i", 1000) + b"abc",  # block runs past the data
        struct.pack(">i", 3) + b"\xff\xff\xff",  # block that is not snappy
    ],
)
def test_bad_xerial_blocks_are_corrupt(tail: bytes) -> None:
    good = _xerial(b"hello" * 10, 1000)
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, good + tail)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_ids(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(codec, b"abc")
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(codec, b"abc")


def test_compression_type_names() -> None:
    assert [CompressionType.from_name(n) for n in ("none", "gzip", "Snappy", "LZ4", "zstd")] == CODECS
    assert [int(c) for c in CODECS] == [0, 1, 2, 3, 4]
    with pytest.raises(UnsupportedCompressionTypeError):
        CompressionType.from_name("brotli")
