"""Kafka's message primitives, for the internal topics' records that kio has no classes for.

``__consumer_offsets`` keys and values (``strata.coordinator.group.records``) and ``__transaction_state``
ones (``strata.coordinator.transaction.log_records``) are Kafka generated messages: int16 version first,
then fields in Kafka's encoding, "flexible" versions with compact lengths and tagged fields. One writer and
one reader serve both, with the bounds of Kafka's generated readers (strings of at most 0x7FFF bytes, a
varint of at most five bytes, array counts and tagged-field counts checked against the bytes left), so a
corrupt record is a :class:`CorruptRecordError` naming the message and the position, never a huge
allocation or a Python exception from deep inside.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Iterator

from strata.errors import CorruptRecordError
from strata.protocol.records.varint import encode_uvarint

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
MAX_STRING = 0x7FFF  # Kafka's generated code rejects longer strings on both sides


class MessageWriter:
    """Appends fields to ``out``; ``flexible`` switches to compact lengths and tagged fields."""

    def __init__(self, flexible: bool = False) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def int8(self, v: int) -> None:
        self.out += I8.pack(v)

    def int16(self, v: int) -> None:
        self.out += I16.pack(v)

    def int32(self, v: int) -> None:
        self.out += I32.pack(v)

    def int64(self, v: int) -> None:
        self.out += I64.pack(v)

    def uvarint(self, v: int) -> None:
        self.out += encode_uvarint(v)

    def string(self, v: str | None) -> None:
        """A (nullable) string: int16 length (-1 = null) or compact uvarint length + 1 (0 = null)."""
        if v is None:
            if self.flexible:
                self.uvarint(0)
            else:
                self.int16(-1)
            return
        data = v.encode("utf-8")
        if len(data) > MAX_STRING:
            raise ValueError(f"string of {len(data)} bytes is too long for a Kafka string")
        if self.flexible:
            self.uvarint(len(data) + 1)
        else:
            self.int16(len(data))
        self.out += data

    def bytes_(self, v: bytes) -> None:
        if self.flexible:
            self.uvarint(len(v) + 1)
        else:
            self.int32(len(v))
        self.out += v

    def array_len(self, n: int | None) -> None:
        """A (nullable) array count: int32 (-1 = null) or compact uvarint count + 1 (0 = null)."""
        if self.flexible:
            self.uvarint(0 if n is None else n + 1)
        else:
            self.int32(-1 if n is None else n)

    def tags(self) -> None:
        """The end of a structure: no tagged fields (flexible versions only)."""
        if self.flexible:
            self.uvarint(0)

    def uuid(self, v: uuid.UUID) -> None:
        self.out += v.bytes

    def tagged_fields(self, fields: Iterable[tuple[int, bytes]]) -> None:
        """A tagged-field section; ``fields`` (tag, encoded value) in ascending tag order."""
        items = list(fields)
        self.uvarint(len(items))
        for tag, data in items:
            self.uvarint(tag)
            self.uvarint(len(data))
            self.out += data


class MessageReader:
    """Reads fields from ``data``; ``what`` names the message in errors. Set ``flexible`` once the version
    is known."""

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        self.buf = memoryview(data)
        self.pos = 0
        self.what = what
        self.flexible = False

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptRecordError(f"{self.what}: field of {n} bytes runs past the end", self.pos)
        view = self.buf[self.pos:self.pos + n]
        self.pos += n
        return view

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def int8(self) -> int:
        return int(I8.unpack(self.take(1))[0])

    def int16(self) -> int:
        return int(I16.unpack(self.take(2))[0])

    def int32(self) -> int:
        return int(I32.unpack(self.take(4))[0])

    def int64(self) -> int:
        return int(I64.unpack(self.take(8))[0])

    def uvarint(self) -> int:
        """Kafka's ``readUnsignedVarint``: at most five bytes."""
        start = self.pos
        value = 0
        for shift in range(0, 35, 7):
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
        raise CorruptRecordError(f"{self.what}: unsigned varint longer than five bytes", start)

    def nullable_string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            return None
        if n > MAX_STRING:
            raise CorruptRecordError(f"{self.what}: string of invalid length {n}", self.pos)
        try:
            return str(self.take(n).tobytes().decode("utf-8"))
        except UnicodeDecodeError:
            raise CorruptRecordError(f"{self.what}: string is not UTF-8", self.pos) from None

    def string(self) -> str:
        v = self.nullable_string()
        if v is None:
            raise CorruptRecordError(f"{self.what}: null where a string is required", self.pos)
        return v

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise CorruptRecordError(f"{self.what}: null where bytes are required", self.pos)
        return self.take(n).tobytes()

    def nullable_array_len(self, min_element_size: int = 0) -> int | None:
        """A nullable array count (None = null), bounded by the bytes left like Kafka's reader."""
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            return None
        if n * min_element_size > self.remaining():
            raise CorruptRecordError(f"{self.what}: array of {n} elements but only {self.remaining()} bytes left",
                                     self.pos)
        return n

    def array_len(self, min_element_size: int = 0) -> int:
        n = self.nullable_array_len(min_element_size)
        if n is None:
            raise CorruptRecordError(f"{self.what}: null array", self.pos)
        return n

    def tag_count(self) -> int:
        n = self.uvarint()
        if n > self.remaining():  # every tagged field takes at least two bytes
            raise CorruptRecordError(f"{self.what}: {n} tagged fields but only {self.remaining()} bytes left", self.pos)
        return n

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16).tobytes())

    def tagged_fields(self) -> Iterator[tuple[int, MessageReader]]:
        """Each tagged field of a section as (tag, a reader over exactly its bytes); a field the caller does
        not read is skipped (a field of a newer Kafka, as Kafka's reader does)."""
        for _ in range(self.tag_count()):
            tag = self.uvarint()
            field = MessageReader(self.take(self.uvarint()), f"{self.what} tagged field {tag}")
            field.flexible = self.flexible
            yield tag, field

    def skip_tags(self) -> None:
        """Skip a structure's tagged fields (fields of a newer Kafka are skipped, as Kafka's reader does)."""
        if self.flexible:
            for _ in range(self.tag_count()):
                self.uvarint()  # tag
                self.take(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise CorruptRecordError(f"{self.what}: {len(self.buf) - self.pos} bytes left over", self.pos)
