"""The four Kafka codecs, all through ``cramjam`` (one wheel, no system libraries).

Snappy has two framings in the wild and both must decode: librdkafka sends a raw snappy block,
while the Java client, kafka-python and aiokafka send xerial framing (``\\x82SNAPPY\\x00``, two
int32s for version and compat, then blocks each prefixed by a big-endian int32 length).
cramjam's own "framed" snappy is Google's framing format, which is neither, so xerial is
handled here. We write xerial, as the Java client does, since every Kafka client reads it.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from strata.errors import CorruptRecordError, UnsupportedCompressionTypeError


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Kafka's ``compression.type`` names (``producer`` is resolved by the caller)."""
        try:
            return cls[name.upper()]
        except KeyError:
            raise UnsupportedCompressionTypeError(f"unknown compression type {name!r}") from None


GZIP_DEFAULT_LEVEL = -1  # Kafka's compression.gzip.level default (Deflater.DEFAULT_COMPRESSION)
LZ4_DEFAULT_LEVEL = 9  # Kafka's compression.lz4.level default

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_XERIAL_BLOCK = 32 * 1024  # the Java client's default block size
_I32 = struct.Struct(">i")


def _snappy_decompress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    if view[:8] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    out = bytearray()
    position = _XERIAL_HEADER_SIZE
    while position < len(view):
        if position + 4 > len(view):
            raise CorruptRecordError("xerial snappy block header truncated")
        (block_len,) = _I32.unpack_from(view, position)
        position += 4
        if block_len < 0 or position + block_len > len(view):
            raise CorruptRecordError(f"xerial snappy block of {block_len} bytes runs past the data")
        out += cramjam.snappy.decompress_raw(view[position : position + block_len])
        position += block_len
    return bytes(out)


def _snappy_compress_xerial(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_MAGIC, struct.pack(">ii", 1, 1)]
    for i in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[i : i + _XERIAL_BLOCK]))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4_compress_frame(data: bytes | memoryview, level: int | None = None) -> bytes:
    """An LZ4 frame with independent blocks (FLG bit 5 set).

    ``cramjam.lz4.compress`` writes linked blocks, which the Java client and broker reject
    ("Dependent block stream is unsupported"); Kafka's own writer and every other client use
    independent blocks. ``level``: see :func:`compress`.
    """
    if level is None:
        compressor = cramjam.lz4.Compressor(block_linked=False)
    else:
        # Kafka's Lz4BlockOutputStream: its default level (9) means lz4's fast compressor (frame level 0),
        # any other level the high-compression one at that level (lz4 caps it at 12; below 3 it is the fast one).
        frame_level = 0 if level == LZ4_DEFAULT_LEVEL else level
        compressor = cramjam.lz4.Compressor(level=frame_level, block_linked=False)
    compressor.compress(data if isinstance(data, bytes) else bytes(data))  # it takes only bytes
    return bytes(compressor.finish())


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Inflate a batch's records section; any codec failure is a CorruptRecordError."""
    try:
        if codec == CompressionType.NONE:
            return bytes(data)
        if codec == CompressionType.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(data)
        if codec == CompressionType.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == CompressionType.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as e:  # cramjam raises its own DecompressionError / ValueError
        raise CorruptRecordError(f"cannot decompress {CompressionType(codec).name} records: {e}") from e
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")


def compress(codec: int, data: bytes | memoryview, *, snappy_raw: bool = False, level: int | None = None) -> bytes:
    """Deflate a records section with ``codec``.

    ``level`` is Kafka's (KIP-390: ``compression.gzip.level`` -1 or 1-9, ``compression.lz4.level`` 1-17,
    ``compression.zstd.level`` -131072 to 22), each codec's default meaning what it means to Kafka's own
    writer; snappy has none. ``None`` keeps cramjam's defaults (what batches the broker builds for itself use).
    """
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        if level is None or level == GZIP_DEFAULT_LEVEL:  # java.util.zip's DEFAULT_COMPRESSION is zlib's 6
            return bytes(cramjam.gzip.compress(data))
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == CompressionType.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data)) if snappy_raw else _snappy_compress_xerial(data)
    if codec == CompressionType.LZ4:
        return _lz4_compress_frame(data, level)
    if codec == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data) if level is None else cramjam.zstd.compress(data, level=level))
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")
