"""Client quotas: produce and fetch byte rates and request-time percentages per user and client-id.

Kafka's ``ClientQuotaManager`` with its ``DefaultQuotaCallback``. A quota is set on an *entity*: a user, a
client-id, or a user with a client-id, each either named or ``<default>`` (``None`` here). For a request
from user U with client-id C, the quota of each type comes from the first of these entities that sets it
(Kafka's ZooKeeper-mode precedence, KIP-55)::

    users/U/clients/C, users/U/clients/<default>, users/U, users/<default>/clients/C,
    users/<default>/clients/<default>, users/<default>, clients/C, clients/<default>

and the rate it limits is the rate of everything that entity covers *for this principal*: a quota on
``users/<default>`` gives every user their own budget, shared by all of that user's client-ids; a quota on
``clients/C`` is shared by every connection with client-id C. That is Kafka's metric-tag rule: the sensor
is keyed by (user if the entity names a user, client-id if it names one).

Without any quota of a type its manager does nothing at all (no clock read, no sensor): the hot path
pays one attribute test.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from strata.quota.rate import Rate

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# QuotaConfigs: the key, and whether its value must be a whole number (Kafka's LONG vs DOUBLE)
QUOTA_KEYS: Mapping[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

SENSOR_EXPIRY_S = 3600.0
_MAX_LONG = 2**63 - 1  # Kafka's InactiveSensorExpirationTimeSeconds


@dataclass(frozen=True)
class QuotaEntity:
    """``user``/``client_id``: absent (``HAS_NONE``), the default (``None``) or a name."""

    user: str | None | _Absent = None
    client_id: str | None | _Absent = None

    @property
    def has_user(self) -> bool:
        return not isinstance(self.user, _Absent)

    @property
    def has_client_id(self) -> bool:
        return not isinstance(self.client_id, _Absent)

    def components(self) -> list[tuple[str, str | None]]:
        """``[(entity_type, name or None for <default>)]`` as DescribeClientQuotas answers."""
        out: list[tuple[str, str | None]] = []
        if self.has_user:
            out.append((USER, self.user))  # type: ignore[arg-type]
        if self.has_client_id:
            out.append((CLIENT_ID, self.client_id))  # type: ignore[arg-type]
        return out

    def sort_key(self) -> tuple[tuple[bool, bool, str], tuple[bool, bool, str]]:
        """Users (each followed by its client-ids) before client-ids alone, defaults before names."""
        def part(first: bool, name: object) -> tuple[bool, bool, str]:
            return (first, name is not None, name if isinstance(name, str) else "")
        return part(not self.has_user, self.user), part(self.has_client_id, self.client_id)

    def __str__(self) -> str:
        return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in self.components())


class _Absent:
    """The entity has no component of this type (distinct from ``None``, the default entity)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Absent)

    def __hash__(self) -> int:
        return 0


ABSENT = _Absent()


def user_entity(user: str | None) -> QuotaEntity:
    return QuotaEntity(user, ABSENT)


def client_entity(client_id: str | None) -> QuotaEntity:
    return QuotaEntity(ABSENT, client_id)


def user_client_entity(user: str | None, client_id: str | None) -> QuotaEntity:
    return QuotaEntity(user, client_id)


def precedence(user: str, client_id: str) -> list[tuple[QuotaEntity, tuple[str, str]]]:
    """The entities that may hold a (user, client-id) request's quota, first wins, each with its sensor key."""
    return [
        (user_client_entity(user, client_id), (user, client_id)),
        (user_client_entity(user, None), (user, client_id)),
        (user_entity(user), (user, "")),
        (user_client_entity(None, client_id), (user, client_id)),
        (user_client_entity(None, None), (user, client_id)),
        (user_entity(None), (user, "")),
        (client_entity(client_id), ("", client_id)),
        (client_entity(None), ("", client_id)),
    ]


class InvalidQuotaError(ValueError):
    """An AlterClientQuotas entity or operation Kafka refuses with INVALID_REQUEST; the message says why."""


def parse_entity(components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """Kafka's ``entityToSanitizedUserClientId`` checks for a user and/or client-id entity."""
    user: str | None | _Absent = ABSENT
    client: str | None | _Absent = ABSENT
    seen: set[str] = set()
    components = list(components)
    if not components:
        raise InvalidQuotaError("Invalid empty client quota entity")
    for entity_type, name in components:
        if entity_type in seen:
            raise InvalidQuotaError(f"Duplicate {entity_type} in the client quota entity")
        seen.add(entity_type)
        if entity_type == IP:
            raise InvalidQuotaError("IP quotas (connection_creation_rate) are not supported by this broker")
        if entity_type not in ENTITY_TYPES:
            raise InvalidQuotaError(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise InvalidQuotaError(f"Empty {entity_type} not supported")
        if entity_type == USER:
            user = name
        else:
            client = name
    return QuotaEntity(user, client)


def validate_quota_value(key: str, value: float) -> None:
    """A known quota key with a positive value (a whole number for the byte rates)."""
    whole = QUOTA_KEYS.get(key)
    if whole is None:
        raise InvalidQuotaError(f"Invalid configuration key {key}")
    # KRaft's ClientQuotaControlManager messages (ZooKeeper-mode Kafka checks less: no sign, no range)
    if math.isnan(value) or value <= 0:
        raise InvalidQuotaError(f"Quota {key} must be greater than 0")
    if whole:
        if math.isinf(value) or value > _MAX_LONG:
            raise InvalidQuotaError(f"Proposed value for {key} is too large for a LONG.")
        if value != int(value):
            raise InvalidQuotaError(f"{key} cannot be a fractional value.")


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity's stored config (which may also hold SCRAM credentials), as floats."""
    out: dict[str, float] = {}
    for key in QUOTA_KEYS:
        raw = config.get(key)
        if raw is None:
            continue
        try:
            out[key] = float(raw)
        except ValueError:
            continue
    return out


def format_quota_value(key: str, value: float) -> str:
    """How the value is stored: ``1048576`` for the byte rates (Kafka's LONG), ``12.5`` for the others."""
    return str(int(value)) if QUOTA_KEYS.get(key) else repr(float(value))


class ClientQuotaManager:
    """One quota type (a config key): the overrides by entity and a rate sensor per sensor key.

    ``max_throttle_s`` caps a single throttle (Kafka caps request-time throttles at one window).
    """

    def __init__(self, key: str, samples: int = 11, window_s: float = 1.0, max_throttle_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.key = key
        self.samples = samples
        self.window_s = window_s
        self.max_throttle_s = max_throttle_s
        self.clock = clock
        self.overrides: dict[QuotaEntity, float] = {}
        self._sensors: dict[tuple[str, str], Rate] = {}
        self._resolved: dict[tuple[str, str], tuple[float, tuple[str, str]] | None] = {}
        self._next_expiry = 0.0
        self.enabled = False
        # told when a sensor (user, client-id) appears and when it expires: the broker's per-client metrics
        self.on_sensor: Callable[[tuple[str, str], Rate], None] | None = None
        self.on_sensor_expired: Callable[[tuple[str, str]], None] | None = None
        self.on_throttle: Callable[[tuple[str, str], int], None] | None = None

    def set_quota(self, entity: QuotaEntity, bound: float | None) -> None:
        if bound is None:
            self.overrides.pop(entity, None)
        else:
            self.overrides[entity] = bound
        self.enabled = bool(self.overrides)
        self._resolved.clear()

    def quota(self, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """The bound that applies to (user, client-id) and the key of the sensor it is measured on."""
        key = (user, client_id)
        if key in self._resolved:
            return self._resolved[key]
        found = None
        for entity, sensor_key in precedence(user, client_id):
            bound = self.overrides.get(entity)
            if bound is not None:
                found = (bound, sensor_key)
                break
        if len(self._resolved) > 100_000:
            self._resolved.clear()
        self._resolved[key] = found
        return found

    def record_and_get_throttle_ms(self, user: str, client_id: str, value: float, now: float | None = None) -> int:
        """Kafka's ``maybeRecordAndGetThrottleTimeMs``: record ``value``; the throttle if over the quota."""
        if not self.enabled:
            return 0
        found = self.quota(user, client_id)
        if found is None:
            return 0
        bound, sensor_key = found
        now = self.clock() if now is None else now
        sensor = self._sensors.get(sensor_key)
        if sensor is None:
            sensor = self._sensors[sensor_key] = Rate(self.samples, self.window_s)
            if self.on_sensor is not None:
                self.on_sensor(sensor_key, sensor)
        sensor.record(value, now)
        throttle = sensor.throttle_s(bound, now)
        if self.max_throttle_s is not None:
            throttle = min(throttle, self.max_throttle_s)
        if now >= self._next_expiry:
            self._expire(now)
        throttle_ms = int(throttle * 1000)
        if throttle_ms and self.on_throttle is not None:
            self.on_throttle(sensor_key, throttle_ms)
        return throttle_ms

    def unrecord(self, user: str, client_id: str, value: float, now: float | None = None) -> None:
        found = self.quota(user, client_id) if self.enabled else None
        if found is not None and (sensor := self._sensors.get(found[1])) is not None:
            sensor.unrecord(value, self.clock() if now is None else now)

    def _expire(self, now: float) -> None:
        """Sensors unused for an hour go (Kafka's sensor expiry): client-ids come and go."""
        self._next_expiry = now + 60.0
        for key in [k for k, s in self._sensors.items() if now - s.last_record > SENSOR_EXPIRY_S]:
            del self._sensors[key]
            if self.on_sensor_expired is not None:
                self.on_sensor_expired(key)

    def rate(self, user: str, client_id: str, now: float | None = None) -> float | None:
        """The measured rate of the sensor (user, client-id) is measured on (None: no quota applies)."""
        found = self.quota(user, client_id) if self.enabled else None
        if found is None or (sensor := self._sensors.get(found[1])) is None:
            return None
        return sensor.measure(self.clock() if now is None else now)


class ClientQuotaManagers:
    """The produce, fetch and request quota managers, fed with the entity configs as they change."""

    def __init__(self, samples: int = 11, window_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples, window_s, clock=clock)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples, window_s, clock=clock)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, samples, window_s, max_throttle_s=window_s, clock=clock)
        self._by_key = {m.key: m for m in (self.produce, self.fetch, self.request)}
        self.entities: dict[QuotaEntity, dict[str, float]] = {}

    def update(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        """The entity's quotas are now ``values`` (empty: it has none)."""
        if values:
            self.entities[entity] = dict(values)
        else:
            self.entities.pop(entity, None)
        for key, manager in self._by_key.items():
            manager.set_quota(entity, values.get(key))

    @property
    def enabled(self) -> bool:
        return self.produce.enabled or self.fetch.enabled or self.request.enabled
