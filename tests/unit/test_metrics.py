"""The metrics registry: Prometheus text rendering, Kafka's names, aggregates and per-partition sums.

Operators point dashboards written for Kafka's JMX exporter at Strata, so the exported names and
label sets are the contract; the sums must match Kafka's BrokerTopicStats (per partition values,
exported per topic and over all topics, never with a partition label).
"""

from __future__ import annotations

import re
import threading

import pytest

from strata.common.metrics import (
    PARTITION_GAUGES,
    TOPIC_METERS,
    Registry,
    broker_topic_metrics,
    prometheus_name,
    remote_storage_metrics,
)

BTM = "kafka_server_BrokerTopicMetrics"
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` -> value, checking every line is valid 0.0.4 syntax and typed before use."""
    out: dict[str, float] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "summary")
            typed.add(name)
            continue
        if line.startswith("# HELP "):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name = m.group(1)
        assert name in typed or name.removesuffix("_count").removesuffix("_sum") in typed, line
        out[name + (m.group(2) or "")] = float(m.group(3))
    return out


def test_prometheus_name_maps_mbeans_like_the_jmx_exporter() -> None:
    assert (prometheus_name("kafka.server:type=BrokerTopicMetrics,name=RemoteCopyBytesPerSec")
            == "kafka_server_BrokerTopicMetrics_RemoteCopyBytesPerSec")
    assert (prometheus_name("kafka.server:type=BrokerTopicMetrics,name=RemoteCopyBytesPerSec,topic=t")
            == "kafka_server_BrokerTopicMetrics_RemoteCopyBytesPerSec")
    assert (prometheus_name("org.apache.kafka.storage.internals.log:type=RemoteStorageThreadPool,"
                            "name=RemoteLogReaderTaskQueueSize")
            == "org_apache_kafka_storage_internals_log_RemoteStorageThreadPool_RemoteLogReaderTaskQueueSize")


def test_meter_renders_counter_with_help_type_and_labels() -> None:
    r = Registry()
    r.meter("a_b", "Things.", {"topic": "t"}).mark(3)
    r.meter("a_b", "Things.").mark(5)
    text = r.render()
    assert "# HELP a_b_total Things.\n# TYPE a_b_total counter\n" in text
    s = samples(text)
    assert s['a_b_total{topic="t"}'] == 3
    assert s["a_b_total"] == 5
    assert "a_b_OneMinuteRate" in s
    assert r.meter("a_b", labels={"topic": "t"}) is r.meter("a_b", labels={"topic": "t"})


def test_label_values_and_help_are_escaped() -> None:
    r = Registry()
    r.gauge("g", "line1\nline2 \\ back", {"topic": 'a"b\\c\nd'}).set(1)
    text = r.render()
    assert "# HELP g line1\\nline2 \\\\ back\n" in text
    assert 'g{topic="a\\"b\\\\c\\nd"} 1\n' in text
    samples(text)


def test_invalid_label_name_and_kind_conflict_are_rejected() -> None:
    r = Registry()
    with pytest.raises(ValueError):
        r.gauge("g", labels={"0bad": "x"})
    r.gauge("x")
    with pytest.raises(ValueError):
        r.timer("x")


def test_gauge_callback_and_failing_callback_is_absent() -> None:
    r = Registry()
    r.gauge("ok", fn=lambda: 2.5)
    r.gauge("broken", fn=lambda: 1 / 0)
    r.gauge("none", fn=lambda: None)
    text = r.render()
    s = samples(text)
    assert s["ok"] == 2.5
    assert "broken" not in text and "none" not in text


def test_special_float_values() -> None:
    r = Registry()
    r.gauge("nan").set(float("nan"))
    r.gauge("inf").set(float("inf"))
    r.gauge("whole").set(3.0)
    text = r.render()
    assert "nan NaN\n" in text and "inf +Inf\n" in text and "whole 3\n" in text


def test_timer_renders_summary_and_max() -> None:
    r = Registry()
    t = r.timer("t_ms", "Reads.")
    t.update(2.0)
    t.update(5.5)
    with t.time():
        pass
    text = r.render()
    assert "# TYPE t_ms summary\n" in text and "# TYPE t_ms_max gauge\n" in text
    s = samples(text)
    assert s["t_ms_count"] == 3
    assert 7.5 <= s["t_ms_sum"] < 100
    assert s["t_ms_max"] == 5.5


def test_one_minute_rate_ramps_and_windows() -> None:
    clock = FakeClock()
    r = Registry(clock)
    m = r.meter("m")
    m.mark(600)
    assert m.one_minute_rate() == pytest.approx(10.0)  # never more than count / 60 s at the start
    for _ in range(12):  # scraped every 10 s with no new events: the window slides past them
        clock.now += 10
        m.one_minute_rate()
    assert m.one_minute_rate() == 0.0
    for _ in range(6):
        clock.now += 10
        m.mark(100)
        rate = m.one_minute_rate()
    assert rate == pytest.approx(10.0, rel=0.2)


def test_broker_topic_metrics_exact_names_and_aggregate() -> None:
    r = Registry()
    btm = broker_topic_metrics(r)
    for name in (*TOPIC_METERS, *PARTITION_GAUGES):
        assert getattr(btm, name) is not None
    btm.RemoteCopyBytesPerSec.mark("t", 100)
    btm.RemoteCopyBytesPerSec.mark("u", 50)
    btm.RemoteCopyRequestsPerSec.mark("t")
    btm.BytesInPerSec.mark(None, 7)
    s = samples(r.render())
    assert s[f'{BTM}_RemoteCopyBytesPerSec_total{{topic="t"}}'] == 100
    assert s[f'{BTM}_RemoteCopyBytesPerSec_total{{topic="u"}}'] == 50
    assert s[f"{BTM}_RemoteCopyBytesPerSec_total"] == 150
    assert s[f"{BTM}_RemoteCopyRequestsPerSec_total"] == 1
    assert s[f"{BTM}_BytesInPerSec_total"] == 7
    # the aggregates exist before anything is marked; per-topic series only once marked
    assert s[f"{BTM}_RemoteFetchErrorsPerSec_total"] == 0
    assert not any("topic=" in k for k in s if "RemoteFetch" in k)
    assert btm.RemoteCopyBytesPerSec.count("t") == 100 and btm.RemoteCopyBytesPerSec.count() == 150


def test_partition_gauges_are_summed_per_topic_and_overall() -> None:
    r = Registry()
    btm = broker_topic_metrics(r)
    lag = btm.RemoteCopyLagBytes
    lag.record("t", 0, 100)
    lag.record("t", 1, 50)
    lag.record("u", 0, 7)
    lag.record("t", 0, 10)  # replaces, not adds
    s = samples(r.render())
    assert s[f'{BTM}_RemoteCopyLagBytes{{topic="t"}}'] == 60
    assert s[f'{BTM}_RemoteCopyLagBytes{{topic="u"}}'] == 7
    assert s[f"{BTM}_RemoteCopyLagBytes"] == 67
    assert not any("partition" in k for k in s)
    assert lag.value("t", 1) == 50

    btm.remove_partition("u", 0)
    s = samples(r.render())
    assert f'{BTM}_RemoteCopyLagBytes{{topic="u"}}' not in s
    assert s[f"{BTM}_RemoteCopyLagBytes"] == 60

    btm.RemoteCopyBytesPerSec.mark("t", 1)
    btm.remove_topic("t")
    text = r.render()
    assert 'topic="t"' not in text
    assert samples(text)[f"{BTM}_RemoteCopyLagBytes"] == 0


def test_remote_storage_metrics_names_and_callbacks() -> None:
    r = Registry()
    rsm = remote_storage_metrics(r)
    assert "ThreadPool" not in r.render()  # pool gauges absent until the pool sets its callbacks
    rsm.RemoteLogReaderTaskQueueSize.set_function(lambda: 4)
    rsm.RemoteLogReaderAvgIdlePercent.set_function(lambda: 0.75)
    rsm.RemoteLogReaderFetchRateAndTimeMs.update(12.0)
    rsm.DelayedRemoteFetchExpiresPerSec.mark()
    s = samples(r.render())
    pool = "org_apache_kafka_storage_internals_log_RemoteStorageThreadPool"
    assert s[f"{pool}_RemoteLogReaderTaskQueueSize"] == 4
    assert s[f"{pool}_RemoteLogReaderAvgIdlePercent"] == 0.75
    assert s["kafka_log_remote_RemoteLogManager_RemoteLogReaderFetchRateAndTimeMs_count"] == 1
    assert s["kafka_log_remote_RemoteLogManager_RemoteLogReaderFetchRateAndTimeMs_max"] == 12
    assert s["kafka_server_DelayedRemoteFetchMetrics_ExpiresPerSec_total"] == 1


def test_concurrent_marks_and_renders_lose_nothing() -> None:
    r = Registry()
    btm = broker_topic_metrics(r)
    threads_n, per_thread = 8, 5000
    stop = threading.Event()
    errors: list[BaseException] = []

    def marker(i: int) -> None:
        try:
            for j in range(per_thread):
                btm.RemoteFetchBytesPerSec.mark(f"t{j % 4}", 2)
                btm.RemoteCopyLagSegments.record(f"t{i % 4}", i, j)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def renderer() -> None:
        while not stop.is_set():
            samples(r.render())

    render_thread = threading.Thread(target=renderer)
    render_thread.start()
    workers = [threading.Thread(target=marker, args=(i,)) for i in range(threads_n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    render_thread.join()
    assert not errors
    s = samples(r.render())
    assert s[f"{BTM}_RemoteFetchBytesPerSec_total"] == threads_n * per_thread * 2
    assert sum(s[f'{BTM}_RemoteFetchBytesPerSec_total{{topic="t{k}"}}'] for k in range(4)) == threads_n * per_thread * 2
    assert s[f"{BTM}_RemoteCopyLagSegments"] == threads_n * (per_thread - 1)
