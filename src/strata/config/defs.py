"""A small ``ConfigDef``: typed keys with defaults and validators, errors that name the key.

Kafka users know their config by its dotted names (``segment.bytes``, ``retention.ms``); we keep
those names verbatim and convert once, at the edge, into frozen dataclasses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from strata.errors import InvalidConfigError

Validator = Callable[[Any], str | None]  # returns an error message or None


def at_least(minimum: int) -> Validator:
    return lambda v: None if v >= minimum else f"must be at least {minimum}"


def between(low: float, high: float) -> Validator:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


def one_of(*choices: str) -> Validator:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def list_of(*choices: str) -> Validator:
    return lambda v: next((f"{x!r} is not one of {', '.join(choices)}" for x in v if x not in choices), None)


_BOOLS = {"true": True, "false": False}


def _to_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    value = _BOOLS.get(str(raw).strip().lower())
    if value is None:
        raise ValueError("expected true or false")
    return value


def _to_list(raw: object) -> list[str]:
    if isinstance(raw, list | tuple):
        return [str(x) for x in raw]
    return [x.strip() for x in str(raw).split(",") if x.strip()]


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "int": lambda r: int(str(r).strip()),
    "long": lambda r: int(str(r).strip()),
    "double": lambda r: float(str(r).strip()),
    "string": lambda r: str(r).strip(),
    "password": lambda r: str(r),  # a string never shown (DescribeConfigs, logs); kept verbatim
    "bool": _to_bool,
    "list": _to_list,
}


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: str
    default: Any
    validator: Validator | None = None
    doc: str = ""

    def parse(self, raw: object) -> Any:
        try:
            value = _CONVERTERS[self.type](raw)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"Invalid value {raw!r} for configuration {self.name}: "
                                     f"expected a {self.type}") from None
        if self.validator is not None and value is not None:
            problem = self.validator(value)
            if problem:
                raise InvalidConfigError(f"Invalid value {raw!r} for configuration {self.name}: {problem}")
        return value


class ConfigDef:
    def __init__(self, keys: Iterable[ConfigKey]) -> None:
        self.keys = {k.name: k for k in keys}

    def parse(self, props: Mapping[str, object], *, allow_unknown: bool = False) -> dict[str, Any]:
        """Every known key parsed (defaults filled in); unknown keys rejected unless allowed."""
        if not allow_unknown:
            unknown = sorted(set(props) - set(self.keys))
            if unknown:
                raise InvalidConfigError(f"Unknown configuration {unknown[0]!r}")
        return {
            name: key.parse(props[name]) if name in props else key.default for name, key in self.keys.items()
        }


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` (the subset people write): ``key=value`` or ``key: value``, # and ! comments."""
    out: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise InvalidConfigError(f"line {lineno}: expected key=value, got {raw!r}")
        out[line[:sep].strip()] = line[sep + 1 :].strip()
    return out
