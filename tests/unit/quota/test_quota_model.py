"""Client quota arithmetic and entity rules: Kafka's Rate, throttle times, precedence, validation, the store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.broker.client_quotas import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    ClientQuotaStore,
    FilterComponent,
    QuotaOp,
)
from strata.errors import ErrorCode
from strata.quota.client import (
    ABSENT,
    CLIENT_ID,
    USER,
    ClientQuotaManager,
    ClientQuotaManagers,
    InvalidQuotaError,
    QuotaEntity,
    client_entity,
    parse_entity,
    user_client_entity,
    user_entity,
    validate_quota_value,
)
from strata.quota.rate import Rate


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- Rate -----------------------------------------------------------------------------------------------


def test_a_first_value_is_averaged_over_the_minimum_span() -> None:
    rate = Rate(samples=11, window_s=1.0)
    rate.record(1000, 0.0)
    assert rate.window_span(0.0) == pytest.approx(10.0)  # samples - 1 full windows
    assert rate.measure(0.0) == pytest.approx(100.0)


def test_old_windows_are_forgotten() -> None:
    rate = Rate(samples=3, window_s=1.0)
    rate.record(300, 0.0)
    assert rate.measure(0.5) == pytest.approx(120.0)  # 0.5 s elapsed plus the 2 full windows it lacks
    rate.record(0, 3.5)  # the first window is 3.5 s old: past samples * window
    assert rate.measure(3.5) == 0.0


def test_throttle_is_the_time_to_fall_back_to_the_bound() -> None:
    rate = Rate(samples=11, window_s=1.0)
    rate.record(2000, 0.0)  # 200/s over the 10 s span against a bound of 100/s
    assert rate.throttle_s(100, 0.0) == pytest.approx(10.0)
    assert rate.throttle_s(400, 0.0) == 0.0


@given(st.lists(st.floats(min_value=1, max_value=1e6), min_size=1, max_size=50), st.floats(min_value=1, max_value=1e5))
def test_the_throttle_spreads_the_recorded_total_at_the_bound(values: list[float], bound: float) -> None:
    """Kafka's ``QuotaUtils.throttleTime``: the wait after which the recorded total, over the span grown by
    that wait, is exactly the bound (Kafka's approximation: it ignores that windows may expire meanwhile,
    and that a young sensor's span is padded to ``samples - 1`` windows)."""
    rate = Rate(samples=11, window_s=1.0)
    for i, v in enumerate(values):
        rate.record(v, i * 0.01)
    now = (len(values) - 1) * 0.01
    wait = rate.throttle_s(bound, now)
    total, span = sum(values), rate.window_span(now)
    if wait == 0:
        assert total / span <= bound * (1 + 1e-9)
    else:
        assert total / (span + wait) == pytest.approx(bound, rel=1e-6)


def test_unrecord_takes_a_value_back() -> None:
    rate = Rate(samples=2, window_s=1.0)
    rate.record(500, 0.0)
    rate.unrecord(200, 0.0)
    assert rate.measure(0.0) == pytest.approx(300.0)


# -- entities and precedence ---------------------------------------------------------------------------


def test_precedence_follows_kafka() -> None:
    m = ClientQuotaManager("producer_byte_rate", clock=Clock())
    m.set_quota(client_entity(None), 8)
    assert m.quota("alice", "app") == (8, ("", "app"))  # clients/<default>: each client-id its own budget
    m.set_quota(client_entity("app"), 7)
    assert m.quota("alice", "app") == (7, ("", "app"))
    m.set_quota(user_entity(None), 6)
    assert m.quota("alice", "app") == (6, ("alice", ""))  # users/<default>: per user, shared by its clients
    m.set_quota(user_client_entity(None, None), 5)
    assert m.quota("alice", "app") == (5, ("alice", "app"))
    m.set_quota(user_client_entity(None, "app"), 4)
    assert m.quota("alice", "app") == (4, ("alice", "app"))
    m.set_quota(user_entity("alice"), 3)
    assert m.quota("alice", "app") == (3, ("alice", ""))
    m.set_quota(user_client_entity("alice", None), 2)
    assert m.quota("alice", "app") == (2, ("alice", "app"))
    m.set_quota(user_client_entity("alice", "app"), 1)
    assert m.quota("alice", "app") == (1, ("alice", "app"))
    assert m.quota("bob", "other") == (5, ("bob", "other"))
    m.set_quota(user_client_entity("alice", "app"), None)
    assert m.quota("alice", "app") == (2, ("alice", "app"))


def test_no_quota_means_no_sensor_and_no_throttle() -> None:
    m = ClientQuotaManager("producer_byte_rate", clock=Clock())
    assert not m.enabled
    assert m.record_and_get_throttle_ms("alice", "app", 1e12) == 0
    m.set_quota(user_entity("bob"), 10)
    assert m.record_and_get_throttle_ms("alice", "app", 1e12) == 0
    assert m.rate("alice", "app") is None


def test_clients_sharing_an_entity_share_its_budget() -> None:
    clock = Clock()
    m = ClientQuotaManager("producer_byte_rate", clock=clock)
    m.set_quota(user_entity("alice"), 100)
    assert m.record_and_get_throttle_ms("alice", "one", 600) == 0
    throttle = m.record_and_get_throttle_ms("alice", "two", 600)  # 1200 over 10 s = 120/s against 100
    assert throttle == pytest.approx(2000, abs=1)
    assert m.record_and_get_throttle_ms("bob", "one", 600) == 0  # no quota for bob


def test_request_throttle_is_capped_at_one_window() -> None:
    managers = ClientQuotaManagers(samples=11, window_s=1.0, clock=Clock())
    managers.update(user_entity(None), {"request_percentage": 1.0})
    assert managers.request.record_and_get_throttle_ms("alice", "", 500.0) == 1000


def test_idle_sensors_expire() -> None:
    clock = Clock()
    m = ClientQuotaManager("producer_byte_rate", clock=clock)
    m.set_quota(client_entity(None), 100)
    for i in range(100):
        m.record_and_get_throttle_ms("", f"c{i}", 1)
    clock.now += 3700
    m.record_and_get_throttle_ms("", "new", 1)
    assert m.rate("", "c1") is None and m.rate("", "new") is not None


@pytest.mark.parametrize(("components", "message"), [
    ([], "Invalid empty client quota entity"),
    ([(USER, "")], "Empty user not supported"),
    ([(USER, "a"), (USER, "b")], "Duplicate user"),
    ([("ip", "1.2.3.4")], "IP quotas"),
    (([("topic", "x")]), "Unhandled client quota entity type: topic"),
])
def test_bad_entities_are_refused_with_kafkas_messages(components: list[tuple[str, str | None]], message: str) -> None:
    with pytest.raises(InvalidQuotaError, match=message):
        parse_entity(components)


def test_entities_parse() -> None:
    assert parse_entity([(CLIENT_ID, "app"), (USER, None)]) == QuotaEntity(None, "app")
    assert parse_entity([(USER, "alice")]) == QuotaEntity("alice", ABSENT)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("producer_byte_rate", 0, "Quota producer_byte_rate must be greater than 0"),
    ("consumer_byte_rate", -5, "Quota consumer_byte_rate must be greater than 0"),
    ("producer_byte_rate", 10.5, "producer_byte_rate cannot be a fractional value."),
    ("producer_byte_rate", 1e30, "Proposed value for producer_byte_rate is too large for a LONG."),
    ("request_percentage", float("nan"), "must be greater than 0"),
    ("bytes_per_fortnight", 1, "Invalid configuration key bytes_per_fortnight"),
])
def test_bad_values_are_refused(key: str, value: float, message: str) -> None:
    with pytest.raises(InvalidQuotaError, match=message):
        validate_quota_value(key, value)


# -- the single-node store -----------------------------------------------------------------------------


def _store(tmp_path: Path) -> ClientQuotaStore:
    store = ClientQuotaStore(tmp_path, ClientQuotaManagers())
    asyncio.run(store.start())
    return store


def _alter(store: ClientQuotaStore, entity: list[tuple[str, str | None]], *ops: QuotaOp,
           validate_only: bool = False) -> tuple[int, str | None]:
    return asyncio.run(store.alter([(entity, list(ops))], validate_only))[0]


def _names(entries: list[dict[str, object]]) -> list[list[tuple[str, str | None]]]:
    return [[(e["entity_type"], e["entity_name"]) for e in entry["entity"]] for entry in entries]  # type: ignore[index,union-attr]


def test_alter_describe_and_reload(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert _alter(store, [(USER, "alice")], QuotaOp("producer_byte_rate", 1024, False)) == (ErrorCode.NONE, None)
    assert _alter(store, [(USER, "alice"), (CLIENT_ID, "app")], QuotaOp("consumer_byte_rate", 2048, False))[0] == 0
    assert _alter(store, [(CLIENT_ID, None)], QuotaOp("request_percentage", 12.5, False))[0] == 0
    assert _alter(store, [(USER, None)], QuotaOp("producer_byte_rate", 5, False), validate_only=True)[0] == 0
    everything = store.describe([], strict=False)
    assert _names(everything) == [[(USER, "alice")], [(USER, "alice"), (CLIENT_ID, "app")], [(CLIENT_ID, None)]]
    assert everything[0]["values"] == [{"key": "producer_byte_rate", "value": 1024.0}]
    # strict: exactly the filter's types; non-strict: the others may be there too
    users = [FilterComponent(USER, MATCH_SPECIFIED, None)]
    assert _names(store.describe(users, strict=True)) == [[(USER, "alice")]]
    assert len(store.describe(users, strict=False)) == 2
    default_clients = [FilterComponent(CLIENT_ID, MATCH_DEFAULT, None)]
    assert _names(store.describe(default_clients, strict=True)) == [[(CLIENT_ID, None)]]
    exact = [FilterComponent(USER, MATCH_EXACT, "alice"), FilterComponent(CLIENT_ID, MATCH_EXACT, "app")]
    assert _names(store.describe(exact, strict=True)) == [[(USER, "alice"), (CLIENT_ID, "app")]]
    # persisted, and the managers see them after a restart
    again = _store(tmp_path)
    assert again.managers.produce.quota("alice", "x") == (1024.0, ("alice", ""))
    assert again.managers.request.quota("bob", "y") == (12.5, ("", "y"))
    assert json.loads((tmp_path / "strata-client-quotas.json").read_text())["version"] == 1
    # removing the last key removes the entity
    assert _alter(again, [(CLIENT_ID, None)], QuotaOp("request_percentage", 0, True))[0] == 0
    assert _names(again.describe([FilterComponent(CLIENT_ID, MATCH_DEFAULT, None)], strict=True)) == []
    assert not again.managers.request.enabled


def test_invalid_requests(tmp_path: Path) -> None:
    store = _store(tmp_path)
    code, message = _alter(store, [(USER, "alice")], QuotaOp("producer_byte_rate", -1, False))
    assert (code, message) == (ErrorCode.INVALID_REQUEST, "Quota producer_byte_rate must be greater than 0")
    assert _alter(store, [(USER, "alice")], QuotaOp("nope", 1, True))[0] == ErrorCode.INVALID_REQUEST
    for bad in ([FilterComponent(USER, MATCH_EXACT, None)], [FilterComponent(USER, MATCH_DEFAULT, "x")],
                [FilterComponent(USER, 7, None)], [FilterComponent("ip", MATCH_SPECIFIED, None)],
                [FilterComponent(USER, MATCH_SPECIFIED, None), FilterComponent(USER, MATCH_DEFAULT, None)]):
        with pytest.raises(InvalidQuotaError):
            store.describe(bad, strict=False)
    assert store.describe([], strict=False) == []  # nothing was stored by the refused changes


# -- the per-client quota metrics ------------------------------------------------------------------------


def test_quota_sensors_are_exported_per_user_and_client_and_expire() -> None:
    from strata.broker.wire.throttling import Throttler
    from strata.common.metrics import Registry

    clock = Clock()
    registry = Registry()
    managers = ClientQuotaManagers(clock=clock)
    Throttler(managers, registry)
    managers.update(user_entity("alice"), {"producer_byte_rate": 100.0})
    managers.update(client_entity(None), {"consumer_byte_rate": 1e9})
    assert managers.produce.record_and_get_throttle_ms("alice", "app", 2000, clock.now) > 0
    managers.fetch.record_and_get_throttle_ms("bob", "reader", 10, clock.now)
    text = registry.render()
    assert 'kafka_server_Produce_byte_rate{client_id="",user="alice"} 200' in text  # per user: 2000 B / 10 s
    assert 'kafka_server_Fetch_byte_rate{client_id="reader",user=""} 1' in text  # a client-id quota: per client
    assert 'kafka_server_Produce_throttle_time_ms_total{client_id="",user="alice"}' in text
    assert "kafka_server_Fetch_throttle_time_ms_total" not in text  # bob was never throttled
    clock.now += 3700
    managers.fetch.record_and_get_throttle_ms("bob", "other", 10, clock.now)  # expiry runs on a record
    text = registry.render()
    assert 'client_id="reader"' not in text and 'client_id="other"' in text
