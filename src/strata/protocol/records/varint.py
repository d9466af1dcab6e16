"""Zig-zag varints (protobuf style), as Kafka's ``ByteUtils`` writes them inside records."""

from __future__ import annotations

from strata.errors import CorruptRecordError


def read_varint(buf: bytes | memoryview, position: int) -> tuple[int, int]:
    """Return ``(value, next_position)`` for the signed varint at ``position`` (int32 or int64)."""
    try:
        byte = buf[position]
    except IndexError:
        raise CorruptRecordError("varint runs past the end of the records", position) from None
    if byte < 0x80:  # one-byte fast path: most lengths and deltas in practice
        return (byte >> 1) ^ -(byte & 1), position + 1
    raw = byte & 0x7F
    shift = 7
    start = position
    position += 1
    while True:
        try:
            byte = buf[position]
        except IndexError:
            raise CorruptRecordError("varint runs past the end of the records", start) from None
        position += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes", start)


def write_varint(value: int, out: bytearray) -> None:
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def size_of_varint(value: int) -> int:
    raw = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    n = 1
    while raw >= 0x80:
        raw >>= 7
        n += 1
    return n


def encode_uvarint(n: int) -> bytes:
    """Kafka's ``writeUnsignedVarint`` (compact lengths, tagged fields): 1-5 bytes for 0..2^32-1."""
    if n < 0 or n > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {n}")
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
