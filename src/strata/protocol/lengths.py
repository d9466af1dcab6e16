"""Array lengths checked against the frame before kio's native reader sees a request.

kio's reader (Rust) sizes each array from its declared element count before reading any element
(``Vec::with_capacity(n)``, 8 bytes per element): an int32 count up to 2**31-1 in legacy versions,
an unsigned varint up to 2**35-1 in flexible ones. Rust cannot recover from a failed allocation, so
one frame declaring a count of a few billion aborts the broker process ("memory allocation of N
bytes failed"). String and bytes lengths are safe: kio checks them against the buffer before
copying anything.

:func:`length_check` gives, per request class (an API and version), a function generated once
from kio's schema (the dataclass fields and their ``kafka_type``, classified with kio's own
introspection, so it reads the wire as kio does). It walks the body's length prefixes only: strings,
bytes and records are stepped over unread, runs of fixed-size fields are one addition, and so is an
array of fixed-size structs (of flexible ones too, when no element has tagged fields, as in Fetch's
partitions). It refuses an array whose count times the smallest encoding of one element exceeds
the bytes left in the frame (the rule of Kafka's generated readers, "Tried to allocate a collection
of size N, but there are only M bytes remaining", with the element's minimum size instead of one
byte). The frame is at most ``socket.request.max.bytes``, so kio then never reserves more than 8
bytes per byte of frame. The check costs about 0.5 µs of CPU for a Produce request with one batch
or a Fetch of 10 partitions (``bench/decode_bench.py``).

Tagged fields are walked like kio reads them: a known tag's value is parsed by its type (tagged
values can hold arrays), and must end where its size prefix says (kio ignores the size, Kafka's
readers trust it: a value that disagrees is refused, so both readings agree); an unknown tag is
skipped by its size.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

Check = Callable[[Any, int], int]
"""(frame, offset of the body) → offset after the body; raises LengthPrefixError."""

_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}  # fmt: skip
_MAX_DEPTH = 16  # Kafka's request schemas nest 4 deep at most


class LengthPrefixError(ValueError):
    """A length prefix the frame cannot hold, or a body that ends inside a field."""


def _uvarint(b: Any, p: int) -> tuple[int, int]:
    """(value, offset after it): at most 5 bytes, as kio reads them (so up to 2**35-1). Unrolled."""
    x = b[p]
    if x < 0x80:
        return x, p + 1
    v = x & 0x7F
    x = b[p + 1]
    if x < 0x80:
        return v | x << 7, p + 2
    v |= (x & 0x7F) << 7
    x = b[p + 2]
    if x < 0x80:
        return v | x << 14, p + 3
    v |= (x & 0x7F) << 14
    x = b[p + 3]
    if x < 0x80:
        return v | x << 21, p + 4
    v |= (x & 0x7F) << 21
    x = b[p + 4]
    if x < 0x80:
        return v | x << 28, p + 5
    raise LengthPrefixError(f"unsigned varint at byte {p} is longer than 5 bytes")


def _too_long(count: int, p: int, n: int, where: str, min_size: int) -> LengthPrefixError:
    per = f" of at least {min_size} bytes each" if min_size > 1 else ""
    return LengthPrefixError(f"{where} declares {count} elements{per} at byte {p}, but only {n - p} bytes are "
                             f"left in the {n}-byte frame")


def _tag_size_mismatch(where: str, tag: int, size: int, used: int) -> LengthPrefixError:
    return LengthPrefixError(f"tagged field {tag} of {where} declares {size} bytes but its value takes {used}")


def _truncated(cls: type, p: int, n: int) -> LengthPrefixError:
    return LengthPrefixError(f"{cls.__name__} body ends inside a field (frame of {n} bytes, body from byte {p})")


# -- the schema, as kio's reader builds it -----------------------------------------------------------

# A field's wire shape: ("fixed", size) | ("str16",) | ("bytes32",) | ("compact",) | ("entity", cls, nullable)
# | ("array", flexible, item shape). Strings are int16-length in legacy versions, bytes and records int32;
# flexible versions use an unsigned varint of length + 1 for all three (0: null).
Shape = tuple[Any, ...]


def _shape(field: dataclasses.Field[Any], flexible: bool) -> Shape:
    kind = classify_field(field)
    if isinstance(kind, EntityField | EntityTupleField):
        item: Shape = ("entity", kind.type_, isinstance(kind, EntityField) and is_optional(field))
    else:
        assert isinstance(kind, PrimitiveField | PrimitiveTupleField)
        kafka_type = get_schema_field_type(field)
        if kafka_type in _FIXED:
            item = ("fixed", _FIXED[kafka_type])
        elif kafka_type in ("string", "bytes", "records"):
            item = ("compact",) if flexible else ("str16",) if kafka_type == "string" else ("bytes32",)
        else:
            raise NotImplementedError(f"no length rule for kafka_type {kafka_type!r} ({field.name})")
    if kind.is_array:
        return ("array", flexible, item)
    return item


def _fields(cls: type) -> tuple[list[tuple[str, Shape]], list[tuple[int, str, Shape]]]:
    """(regular fields, tagged fields as (tag, name, shape)) in declaration order."""
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    regular, tagged = [], []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        tag = get_field_tag(f)
        if tag is None:
            regular.append((f.name, _shape(f, flexible)))
        else:
            tagged.append((int(tag), f.name, _shape(f, flexible)))
    return regular, tagged


def _min_size(shape: Shape) -> int:
    """The fewest bytes a value of this shape takes on the wire."""
    match shape:
        case ("fixed", size):
            return size
        case ("str16",):
            return 2
        case ("bytes32",):
            return 4
        case ("compact",):
            return 1
        case ("array", flexible, _):
            return 1 if flexible else 4
        case ("entity", _, True):
            return 1
        case ("entity", cls, False):
            regular, _tagged = _fields(cls)
            return sum(_min_size(s) for _, s in regular) + (1 if cls.__flexible__ else 0)
    raise AssertionError(shape)


def _fixed_size(shape: Shape) -> int | None:
    """The size of a shape whose every value takes the same number of bytes, else None."""
    match shape:
        case ("fixed", size):
            return size
        case ("entity", cls, False) if not cls.__flexible__:
            sizes = [_fixed_size(s) for _, s in _fields(cls)[0]]
            return None if None in sizes else sum(sizes)  # type: ignore[arg-type]
    return None


def _fixed_untagged_size(shape: Shape) -> int | None:
    """The size of a flexible struct of fixed-size fields when it has no tagged fields, else None."""
    match shape:
        case ("entity", cls, False) if cls.__flexible__:
            sizes = [_fixed_size(s) for _, s in _fields(cls)[0]]
            return None if None in sizes else sum(sizes) + 1  # type: ignore[arg-type]
    return None


# -- code generation ------------------------------------------------------------------------------------


class _Gen:
    """Python source for one request class: straight-line code, nested entities inlined.

    Generated code keeps the read offset in ``p`` and defers fixed-size fields: ``k`` (a constant in
    the generator) bytes are pending after ``p`` until a variable-length field needs ``p`` exact.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {
            "i16": struct.Struct(">h").unpack_from, "i32": struct.Struct(">i").unpack_from,
            "uvarint": _uvarint, "too_long": _too_long, "tag_size_mismatch": _tag_size_mismatch,
        }
        self.helpers: dict[type, str] = {}

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    @staticmethod
    def at(k: int) -> str:
        return f"p + {k}" if k else "p"

    def flush(self, indent: int, k: int) -> int:
        if k:
            self.emit(indent, f"p += {k}")
        return 0

    def shape(self, shape: Shape, indent: int, k: int, where: str, depth: int) -> int:
        """Lines that step over one value; returns the bytes still pending after ``p``."""
        if depth > _MAX_DEPTH:
            raise NotImplementedError(f"{where}: schema nests deeper than {_MAX_DEPTH}")
        match shape:
            case ("fixed", size):
                return k + size
            case ("str16",):
                self.emit(indent, f"l = i16(b, {self.at(k)})[0]")
                self.emit(indent, f"p += {k + 2} + l if l > 0 else {k + 2}")
                return 0
            case ("bytes32",):
                self.emit(indent, f"l = i32(b, {self.at(k)})[0]")
                self.emit(indent, f"p += {k + 4} + l if l > 0 else {k + 4}")
                return 0
            case ("compact",):  # length + 1, 0 for null: one byte covers 0-126 bytes
                self.emit(indent, f"l = b[{self.at(k)}]")
                self.emit(indent, "if l < 128:")
                self.emit(indent + 1, f"p += {k} + (l or 1)" if k else "p += l or 1")
                self.emit(indent, "else:")
                self.emit(indent + 1, f"l, p = uvarint(b, {self.at(k)})")
                self.emit(indent + 1, "if l > 1:")
                self.emit(indent + 2, "p += l - 1")
                return 0
            case ("entity", cls, True):  # an int8 marker, -1 for null
                self.emit(indent, f"if b[{self.at(k)}] == 255:")
                self.emit(indent + 1, f"p += {k + 1}")
                self.emit(indent, "else:")
                self.flush(indent + 1, self.entity(cls, indent + 1, k + 1, where, depth + 1))
                return 0
            case ("entity", cls, False):
                return self.entity(cls, indent, k, where, depth + 1)
            case ("array", flexible, item):
                return self.array(flexible, item, indent, k, where + "[]", depth + 1)
        raise AssertionError(shape)

    def uvarint(self, var: str, indent: int, k: int) -> None:
        """``var`` = the unsigned varint at p + k, ``p`` just after it (one byte inline, more in a call)."""
        self.emit(indent, f"{var} = b[{self.at(k)}]")
        self.emit(indent, f"if {var} < 128:")
        self.emit(indent + 1, f"p += {k + 1}")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"{var}, p = uvarint(b, {self.at(k)})")

    def array(self, flexible: bool, item: Shape, indent: int, k: int, where: str, depth: int) -> int:
        if flexible:  # unsigned varint of count + 1, 0 for null
            self.uvarint("c", indent, k)
            self.emit(indent, "if c > 1:")
            self.emit(indent + 1, "c -= 1")
        else:  # int32 count, -1 for null
            self.emit(indent, f"c = i32(b, {self.at(k)})[0]")
            self.emit(indent, f"p += {k + 4}")
            self.emit(indent, "if c > 0:")
        indent += 1
        least = max(_min_size(item), 1)
        product = f"c * {least}" if least > 1 else "c"
        self.emit(indent, f"if {product} > n - p:")
        self.emit(indent + 1, f"raise too_long(c, p, n, {where!r}, {least})")
        fixed = _fixed_size(item)
        untagged = _fixed_untagged_size(item)
        if fixed is not None:
            self.emit(indent, f"p += {product}")
        elif untagged is not None:
            # Fixed-size fields and tagged fields, as Fetch's partitions: when no element has tagged
            # fields (the byte at the end of each is 0), the array is c * size bytes; else walk it.
            self.emit(indent, f"if any(b[p + {untagged - 1} : p + c * {untagged} : {untagged}]):")
            self.emit(indent + 1, "for _ in range(c):")
            self.flush(indent + 2, self.shape(item, indent + 2, 0, where, depth))
            self.emit(indent, "else:")
            self.emit(indent + 1, f"p += c * {untagged}")
        else:
            self.emit(indent, "for _ in range(c):")
            self.flush(indent + 1, self.shape(item, indent + 1, 0, where, depth))
        return 0

    def entity(self, cls: type, indent: int, k: int, where: str, depth: int) -> int:
        regular, tagged = _fields(cls)
        for name, shape in regular:
            k = self.shape(shape, indent, k, f"{where}.{name}", depth)
        if not cls.__flexible__:  # type: ignore[attr-defined]
            return k
        # Tagged fields: almost always none (a single 0 byte), else a helper of their own.
        self.emit(indent, f"if b[{self.at(k)}]:")
        self.emit(indent + 1, f"p = {self.tags(cls, tagged, where, depth)}(b, {self.at(k)}, n)")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"p += {k + 1}")
        return 0

    def tags(self, cls: type, tagged: list[tuple[int, str, Shape]], where: str, depth: int) -> str:
        if cls in self.helpers:
            return self.helpers[cls]
        name = self.helpers[cls] = f"tags_{len(self.helpers)}"
        outer, self.lines = self.lines, []
        self.emit(0, f"def {name}(b, p, n):")
        self.emit(1, "count, p = uvarint(b, p)")
        self.emit(1, "if count * 2 > n - p:")  # a tag and a size: two bytes at least
        self.emit(2, f"raise too_long(count, p, n, {where + ' tagged fields'!r}, 2)")
        self.emit(1, "for _ in range(count):")
        self.emit(2, "tag, p = uvarint(b, p)")
        self.emit(2, "size, p = uvarint(b, p)")
        self.emit(2, "end = p + size")
        for i, (tag, field_name, shape) in enumerate(tagged):
            self.emit(2, f"{'if' if i == 0 else 'elif'} tag == {tag}:")
            self.flush(3, self.shape(shape, 3, 0, f"{where}.{field_name}", depth))
            self.emit(3, "if p != end:")
            self.emit(4, f"raise tag_size_mismatch({where!r}, tag, size, p - end + size)")
        if tagged:
            self.emit(2, "else:")
            self.emit(3, "p = end")
        else:
            self.emit(2, "p = end")
        self.emit(1, "return p")
        helper, self.lines = self.lines, outer
        self.lines[:0] = [*helper, ""]
        return name

    def check(self, cls: type) -> str:
        self.emit(0, "def check(b, p):")
        self.emit(1, "n = len(b)")
        self.emit(1, "p0 = p")
        self.emit(1, "try:")
        self.emit(2, "pass")  # for a body without fields
        self.flush(2, self.entity(cls, 2, 0, cls.__name__, 0))
        self.emit(1, "except (IndexError, struct_error):")
        self.emit(2, "raise truncated(cls, p0, n) from None")
        self.emit(1, "if p > n:")
        self.emit(2, "raise truncated(cls, p0, n)")
        self.emit(1, "return p")
        self.namespace.update(struct_error=struct.error, truncated=_truncated, cls=cls)
        return "\n".join(self.lines) + "\n"


@cache
def length_check(cls: type) -> Check:
    """The length check of a request (or any kio entity) class, generated on first use."""
    gen = _Gen()
    source = gen.check(cls)
    namespace = gen.namespace
    exec(compile(source, f"<length check of {cls.__module__}.{cls.__name__}>", "exec"), namespace)
    check: Check = namespace["check"]
    check.__doc__ = source  # for debugging: the generated code
    return check
