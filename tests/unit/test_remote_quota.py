"""KIP-956 remote storage quotas: ``SimpleRate`` and ``RLMQuotaManager`` with an injected clock (Kafka's
``RLMQuotaManagerTest``), the copy-side wait, and the throttle-time sensor."""

from __future__ import annotations

import asyncio
import time

import pytest

from strata.quota.rate import Rate, SimpleRate
from strata.quota.remote import UNBOUNDED, RLMQuotaManager, ThrottleTimeSensor


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- SimpleRate ------------------------------------------------------------------------------------------------


def test_simple_rate_counts_a_first_burst_over_one_window_not_ten() -> None:
    simple, rate = SimpleRate(11, 1.0), Rate(11, 1.0)
    for r in (simple, rate):
        r.record(1000, 0.0)
    assert simple.measure(0.0) == 1000  # over max(elapsed, 1 window)
    assert rate.measure(0.0) == 100  # Kafka's Rate: over samples - 1 windows
    assert simple.measure(0.5) == 1000 and simple.measure(4.0) == 250  # then over the elapsed time
    # the throttle time is exactly the wait for recorded / bound seconds to have passed
    assert simple.throttle_s(100, 0.0) == pytest.approx(9.0)
    assert simple.throttle_s(100, 4.0) == pytest.approx(6.0)
    assert simple.throttle_s(100, 10.0) == 0.0


def test_simple_rate_forgets_windows_older_than_the_samples() -> None:
    r = SimpleRate(3, 1.0)
    r.record(300, 0.0)
    r.record(300, 1.5)
    assert r.measure(2.0) == pytest.approx(300.0)  # 600 over 2 s
    assert r.measure(3.2) == pytest.approx(300 / 1.7)  # the first window (started at 0) expired at 3 s
    assert r.measure(10.0) == 0.0


def test_simple_rate_takes_one_sample_as_kafka_does() -> None:
    r = SimpleRate(1, 2.0)
    r.record(100, 0.0)
    r.record(100, 1.0)
    assert r.measure(1.0) == 100  # 200 over max(1 s, 2 s)
    r.record(50, 2.5)  # a new window replaces the only one
    assert r.measure(2.5) == 25
    with pytest.raises(ValueError):
        SimpleRate(0, 1.0)


# -- RLMQuotaManager -------------------------------------------------------------------------------------------


def test_quota_exceeded_and_not() -> None:
    clock = FakeClock()
    q = RLMQuotaManager(100, 11, 1.0, clock=clock)
    assert not q.is_quota_exceeded() and q.throttle_s() == 0
    q.record(100)  # 100 B over one window: exactly the bound, acceptable
    assert not q.is_quota_exceeded()
    q.record(1)
    assert q.is_quota_exceeded()
    assert q.throttle_s() == pytest.approx(0.01)  # 101 B at 100 B/s: 1.01 s, of which 1 s already counted
    clock.now += 0.5
    assert q.throttle_s() == pytest.approx(0.01)  # still inside the first window
    clock.now += 0.52
    assert not q.is_quota_exceeded()
    q.record(400)  # 501 B by 1.02 s: 5.01 s needed
    assert q.throttle_s() == pytest.approx(3.99)
    assert q.measure() == pytest.approx(501 / 1.02)


def test_wait_time_of_a_large_record_and_an_explicit_now() -> None:
    q = RLMQuotaManager(1000, 11, 1.0, clock=FakeClock(0.0))
    q.record(5000, now=0.0)
    assert q.throttle_s(now=0.0) == pytest.approx(4.0)
    assert q.throttle_s(now=3.0) == pytest.approx(2.0)
    assert q.throttle_s(now=5.0) == 0.0
    # records older than window.num windows stop counting
    q.record(20_000, now=5.0)
    assert q.throttle_s(now=5.0) == pytest.approx(20.0)
    assert q.throttle_s(now=16.0) == pytest.approx(0.0)  # the window of 5.0 expired at 16.0


def test_update_quota_applies_to_the_rate_recorded_so_far() -> None:
    clock = FakeClock()
    q = RLMQuotaManager(100, 11, 1.0, clock=clock)
    q.record(1000)
    assert q.throttle_s() == pytest.approx(9.0)
    q.update_quota(500)
    assert q.throttle_s() == pytest.approx(1.0)
    q.update_quota(1000)
    assert not q.is_quota_exceeded()
    q.update_quota(10)
    assert q.is_quota_exceeded() and q.quota == 10
    q.update_quota(UNBOUNDED)  # the default, Long.MAX_VALUE: no quota at all
    assert q.unbounded and not q.is_quota_exceeded()
    with pytest.raises(ValueError):
        q.update_quota(0)


def test_wait_sleeps_the_throttle_time_once_and_is_not_a_busy_poll() -> None:
    q = RLMQuotaManager(1000, 11, 0.1)
    throttles: list[float] = []

    async def run() -> float:
        assert await q.acquire(200, throttles.append) == 0.0  # not exceeded: recorded at once
        started = time.monotonic()
        await q.acquire(100, throttles.append)  # 200 B at 1000 B/s: 0.2 s from the first record
        return time.monotonic() - started

    waited = asyncio.run(run())
    assert 0.08 <= waited < 0.6
    assert 1 <= len(throttles) <= 3 and throttles[0] == pytest.approx(0.1, abs=0.02)
    assert q.measure() > 0


def test_update_quota_wakes_a_waiting_copy_at_once() -> None:
    q = RLMQuotaManager(1000, 11, 1.0)
    q.record(60_000)  # 60 s of quota

    async def run() -> float:
        waiter = asyncio.ensure_future(q.acquire(10))
        await asyncio.sleep(0)  # let it start waiting
        assert not waiter.done()
        started = time.monotonic()
        q.update_quota(UNBOUNDED)
        await asyncio.wait_for(waiter, 5)
        return time.monotonic() - started

    assert asyncio.run(run()) < 0.5


def test_copy_waiters_take_turns_in_order() -> None:
    q = RLMQuotaManager(10_000, 11, 0.05)
    order: list[int] = []

    async def copy(i: int) -> None:
        await q.acquire(1000)
        order.append(i)

    async def run() -> None:
        await asyncio.gather(*(copy(i) for i in range(5)))

    started = time.monotonic()
    asyncio.run(run())
    assert order == [0, 1, 2, 3, 4]
    assert time.monotonic() - started >= 0.3  # 5000 B at 10 kB/s: the last one starts after 0.4 s (less a window)


# -- ThrottleTimeSensor ----------------------------------------------------------------------------------------


def test_throttle_time_sensor_avg_and_max_over_two_windows() -> None:
    clock = FakeClock(0.0)
    s = ThrottleTimeSensor(clock=clock)
    assert s.avg() == 0 and s.max() == 0
    s.record(100)
    s.record(300)
    clock.now = 31.0
    s.record(50)
    assert s.avg() == pytest.approx(150) and s.max() == 300
    clock.now = 61.0  # the first window is gone
    assert s.avg() == 50 and s.max() == 50
    clock.now = 100.0
    assert s.avg() == 0 and s.max() == 0


# -- config ----------------------------------------------------------------------------------------------------


def test_the_quota_keys_are_broker_configs_with_kafkas_defaults_and_dynamic_values_win() -> None:
    from strata.config.broker_config import DYNAMIC_BROKER_CONFIGS, BrokerConfig
    from strata.errors import InvalidConfigError

    remote = BrokerConfig.from_props({}).remote
    assert (remote.copy_max_bytes_per_second, remote.fetch_max_bytes_per_second) == (UNBOUNDED, UNBOUNDED)
    assert (remote.copy_quota_window_num, remote.copy_quota_window_size_seconds) == (11, 1)
    assert (remote.fetch_quota_window_num, remote.fetch_quota_window_size_seconds) == (11, 1)
    static = BrokerConfig.from_props({"remote.log.manager.copy.max.bytes.per.second": "1000",
                                      "remote.log.manager.fetch.quota.window.num": "3",
                                      "remote.log.manager.fetch.quota.window.size.seconds": "2"})
    assert static.remote.copy_max_bytes_per_second == 1000
    assert (static.remote.fetch_quota_window_num, static.remote.fetch_quota_window_size_seconds) == (3, 2)
    effective = static.with_dynamic({"remote.log.manager.copy.max.bytes.per.second": "2000"},
                                    {"remote.log.manager.fetch.max.bytes.per.second": "500"})
    assert (effective.remote.copy_max_bytes_per_second, effective.remote.fetch_max_bytes_per_second) == (2000, 500)
    assert {"remote.log.manager.copy.max.bytes.per.second",
            "remote.log.manager.fetch.max.bytes.per.second"} <= DYNAMIC_BROKER_CONFIGS
    assert "remote.log.manager.copy.quota.window.num" not in DYNAMIC_BROKER_CONFIGS  # static, as in Kafka
    for key, value in (("remote.log.manager.copy.max.bytes.per.second", "0"),
                       ("remote.log.manager.copy.quota.window.num", "0"),
                       ("remote.log.manager.fetch.quota.window.size.seconds", "0")):
        with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")):
            BrokerConfig.from_props({key: value})
