"""Build kio messages of any version from one version-agnostic description.

kio generates one frozen dataclass per API version (``FetchResponse`` v4 … v18 are 15 classes).
A handler describes its answer once, as keyword values and nested dicts; :func:`make` keeps the
fields the requested version has, converts nested dicts and lists into that version's entity
classes, and wraps plain ints where kio wants an enum or a ``timedelta``. Fields a version lacks
are dropped, which is exactly Kafka's rule for older versions (ignorable fields).

A required field of the target version that the handler did not supply is a bug in the handler,
so it raises ``TypeError`` naming the class and the field, rather than sending a wrong default.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode as KioErrorCode

Converter = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _error_code(value: Any) -> Any:
    return value if isinstance(value, KioErrorCode) else KioErrorCode(int(value))


def _millis(value: Any) -> Any:
    return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=int(value))


def _datetime(value: Any) -> Any:
    """Kafka's int64 epoch millis where kio wants a datetime; -1 (no timestamp) becomes None."""
    if value is None or isinstance(value, datetime.datetime):
        return value
    if value < 0:
        return None
    return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _converter(tp: Any, kafka_type: str | None) -> Converter:
    tp = _strip_optional(tp)
    if typing.get_origin(tp) is tuple:
        item = _converter(typing.get_args(tp)[0], kafka_type)
        if item is _identity:
            return lambda v: v if v is None or isinstance(v, tuple) else tuple(v)
        return lambda v: v if v is None else tuple(item(x) for x in v)
    if dataclasses.is_dataclass(tp):
        cls = tp
        return lambda v: v if v is None or isinstance(v, cls) else make(cls, **v)
    if tp is KioErrorCode or kafka_type == "error_code":
        return _error_code
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return lambda v: v if v is None else _millis(v)
    if kafka_type == "datetime_i64":
        return _datetime
    return _identity


@cache
def _spec(cls: type) -> tuple[dict[str, Converter], frozenset[str]]:
    """Per class: a converter for each field, and the names that must be given."""
    hints = typing.get_type_hints(cls)
    converters: dict[str, Converter] = {}
    required = set()
    for f in dataclasses.fields(cls):
        converters[f.name] = _converter(hints[f.name], f.metadata.get("kafka_type"))
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.add(f.name)
    return converters, frozenset(required)


def make(cls: type, /, **values: Any) -> Any:
    """An instance of the kio entity ``cls`` from values that may cover several versions."""
    converters, required = _spec(cls)
    missing = required.difference(values)
    if missing:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} needs {sorted(missing)}")
    kwargs = {name: converters[name](value) for name, value in values.items() if name in converters}
    return cls(**kwargs)


def fields_of(entity: Any) -> Mapping[str, Any]:
    """An entity's fields as a mapping (for code that reads requests across versions)."""
    return {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}


def has_field(cls_or_entity: Any, name: str) -> bool:
    cls = cls_or_entity if isinstance(cls_or_entity, type) else type(cls_or_entity)
    return name in _spec(cls)[0]


def _zero(tp: Any, kafka_type: str | None) -> Any:
    if _strip_optional(tp) is not tp:
        return None
    if typing.get_origin(tp) is tuple:
        return ()
    if dataclasses.is_dataclass(tp):
        return zero_values(tp)
    if tp is KioErrorCode or kafka_type == "error_code":
        return 0
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return 0
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type == "bool":
        return False
    if kafka_type in ("string",):
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "float64":
        return 0.0
    return 0


@cache
def zero_values(cls: type) -> Mapping[str, Any]:
    """A value for every required field of ``cls``: empty lists, no error, zeros, empty strings.

    Cached per class and therefore read-only (a handler that set a key in it would change every
    later response of that class): merge it, ``{**zero_values(cls), **values}``.
    """
    hints = typing.get_type_hints(cls)
    return types.MappingProxyType({
        f.name: _zero(hints[f.name], f.metadata.get("kafka_type"))
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    })
