"""Client quota enforcement on the request path: how long a response's client must wait, and telling it so.

Kafka's ``KafkaApis`` with KIP-219 throttling: a Produce records its request size against the produce
quota, a consumer's Fetch its response size against the fetch quota, and every request the time the broker
spent on it against the request-percentage quota (as a percentage of one thread: 10 ms of work in a second
is 1%). The largest throttle goes into the response's ``throttle_time_ms`` and the connection is muted for
that long once the response is out: the broker reads nothing more from it (a client that ignores the
field, or pipelines, is held back all the same), and every other connection is unaffected. An ``acks=0``
produce gets no response and is muted just the same.

Not counted: ApiVersions and the SASL handshake (a client must be able to connect and log in to learn its
throttle), and follower fetches (replication traffic is not a client's).

Kafka answers a throttled consumer fetch with no records and "unrecords" its size; Strata sends the records
it read and mutes for the throttle instead. The rate is held the same way over the quota window, and it
keeps fetch sessions out of the throttling path; the difference is one response's worth of bytes early.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from strata.broker.wire.dispatch import Spliced
from strata.common.metrics import Registry
from strata.protocol.build import has_field
from strata.protocol.frame import Request
from strata.quota.client import ClientQuotaManagers
from strata.quota.rate import Rate

PRODUCE, FETCH = 0, 1
SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
QUOTA_EXEMPT_APIS = frozenset({SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE})
_PERCENT_PER_SECOND = 100.0  # one second of one thread's time is 100% for a second


class TimedCall:
    """Awaits a coroutine and adds up the time spent running its steps (not the time it was suspended).

    A long-polling Fetch or an ``acks=all`` Produce waits for other work for most of its life; Kafka
    counts the time a request held a thread, which on one event loop is the time its own steps ran.
    """

    __slots__ = ("_coro", "busy_s")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self.busy_s = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                self.busy_s += time.perf_counter() - started
                return stop.value
            self.busy_s += time.perf_counter() - started
            try:
                value, error = (yield yielded), None
            except BaseException as e:  # noqa: BLE001 - cancellation and the like go into the coroutine
                value, error = None, e


def user_of(principal: str) -> str:
    """The user name of a ``User:<name>`` principal (quota entities name users, not principal types)."""
    return principal.partition(":")[2] if principal.startswith("User:") else principal


def is_follower_fetch(request: Request) -> bool:
    body = request.body
    state = getattr(body, "replica_state", None)
    replica = int(state.replica_id) if state is not None else int(getattr(body, "replica_id", -1))
    return replica >= 0


# Kafka's quota metric groups (kafka.server:type=Produce|Fetch|Request,user=...,client-id=...)
_METRIC_TYPES = (("produce", "Produce", "byte_rate", "Bytes per second of Produce requests"),
                 ("fetch", "Fetch", "byte_rate", "Bytes per second of Fetch responses"),
                 ("request", "Request", "request_time", "Request time as a percentage of one thread"))


class Throttler:
    """Asks the quota managers for a request's throttle; ``quotas.enabled`` False makes it free.

    With a ``registry``, every quota sensor is exported like Kafka's client quota metrics: the measured rate
    (``kafka_server_Produce_byte_rate``, ``..._Fetch_byte_rate``, ``..._Request_request_time``) and the
    throttle time given (``kafka_server_<Type>_throttle_time_ms_total``), labelled with the sensor's
    ``user`` and ``client_id`` (empty where the quota's entity does not name one); both go when the sensor
    expires (an hour unused)."""

    def __init__(self, quotas: ClientQuotaManagers, registry: Registry | None = None) -> None:
        self.quotas = quotas
        if registry is None:
            return
        for attr, kind, rate_name, help_text in _METRIC_TYPES:
            manager = getattr(quotas, attr)
            rate_metric, throttle_metric = f"kafka_server_{kind}_{rate_name}", f"kafka_server_{kind}_throttle_time_ms"

            def on_sensor(key: tuple[str, str], rate: Rate, name: str = rate_metric, text: str = help_text,
                          clock: Callable[[], float] = manager.clock) -> None:
                registry.gauge(name, text, _labels(key), fn=lambda: rate.measure(clock()))

            def on_throttle(key: tuple[str, str], ms: int, name: str = throttle_metric, kind: str = kind) -> None:
                registry.meter(name, f"Time in ms {kind} responses of the client were throttled by its quota",
                               _labels(key)).mark(ms)

            def on_expired(key: tuple[str, str], names: tuple[str, str] = (rate_metric, throttle_metric)) -> None:
                for name in names:
                    registry.remove(name, _labels(key))

            manager.on_sensor, manager.on_throttle, manager.on_sensor_expired = on_sensor, on_throttle, on_expired

    def times(self, request: Request) -> bool:
        """Whether the request's handler time must be measured (a request-percentage quota exists)."""
        return self.quotas.request.enabled and request.api_key not in QUOTA_EXEMPT_APIS

    def before_response(self, request: Request, principal: str, busy_s: float) -> int:
        """The produce and request-time throttle (ms), recorded as the response is about to be encoded."""
        api = request.api_key
        if api in QUOTA_EXEMPT_APIS or (api == FETCH and is_follower_fetch(request)):
            return 0
        quotas = self.quotas
        user, client = user_of(principal), request.header.client_id or ""
        throttle = 0
        if api == PRODUCE and quotas.produce.enabled:
            throttle = quotas.produce.record_and_get_throttle_ms(user, client, request.size)
        if quotas.request.enabled:
            throttle = max(throttle, quotas.request.record_and_get_throttle_ms(
                user, client, busy_s * _PERCENT_PER_SECOND))
        return throttle

    def fetch_throttle(self, request: Request, principal: str, response_bytes: int) -> int:
        """A consumer fetch's response size against the fetch quota (ms)."""
        if request.api_key != FETCH or not self.quotas.fetch.enabled or is_follower_fetch(request):
            return 0
        return self.quotas.fetch.record_and_get_throttle_ms(user_of(principal), request.header.client_id or "",
                                                            response_bytes)


def _labels(key: tuple[str, str]) -> dict[str, str]:
    return {"user": key[0], "client_id": key[1]}


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """The response with ``throttle_time_ms`` set (responses of versions without the field: as they are)."""
    body = response.body if isinstance(response, Spliced) else response
    if not has_field(body, "throttle_time"):
        return response
    body = dataclasses.replace(body, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
    return Spliced(body, response.splices) if isinstance(response, Spliced) else body


def frame_size(parts: list[Any]) -> int:
    """Bytes of an encoded response: its byte parts and its file slices."""
    return sum(len(p) if isinstance(p, (bytes, bytearray, memoryview)) else int(p.size) for p in parts)
