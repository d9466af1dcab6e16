"""The fault-injecting RSM around a real ``LocalTieredStorage``: pass-through, every fault kind, run-time
spec changes through the control file, limits and filters, and the counts it exposes."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support.segments import MakeSegment

from strata.tiered.api import (
    RSM_ALIASES,
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    RetriableRemoteStorageError,
    load_class,
)
from strata.tiered.storage.faults import FaultInjectingRemoteStorageManager, parse_spec, read_status
from strata.tiered.storage.local import EVENTS_FILE, LocalTieredStorage


def make_rsm(tmp_path: Path, **configs: Any) -> FaultInjectingRemoteStorageManager:
    rsm = load_class("faults", RSM_ALIASES, RemoteStorageManager)()
    assert isinstance(rsm, FaultInjectingRemoteStorageManager)
    rsm.configure({"faults.delegate.class.name": "local", "dir": str(tmp_path / "remote"), "broker.id": 1,
                   "faults.control.file": str(tmp_path / "faults.json"), **configs})
    return rsm


def set_faults(tmp_path: Path, spec: dict[str, Any] | None) -> None:
    """Replace the control file atomically (a new inode, so even a same-size rewrite is seen)."""
    path = tmp_path / "faults.json"
    if spec is None:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name("faults.json.tmp")
    tmp.write_text(json.dumps(spec))
    os.replace(tmp, path)


def drain(stream: Any) -> bytes:
    with stream:
        return stream.read()


def test_without_faults_every_call_goes_through_and_is_counted(tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = make_rsm(tmp_path, **{"events.log.enable": "false"})
    seg = make_segment()
    try:
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        assert drain(rsm.fetch_log_segment(seg.metadata, 0)) == seg.log_bytes()
        assert drain(rsm.fetch_index(seg.metadata, IndexType.OFFSET)) == seg.data.offset_index.read_bytes()
        rsm.delete_log_segment_data(seg.metadata)
        with pytest.raises(RemoteResourceNotFoundError):  # the real store's own error passes through
            rsm.fetch_log_segment(seg.metadata, 0)
    finally:
        rsm.close()
    assert isinstance(rsm.delegate, LocalTieredStorage)
    assert not (tmp_path / "remote" / EVENTS_FILE).exists()  # a non-"faults." key reached the delegate
    ops = rsm.status()["operations"]
    assert {op: (c["calls"], c["ok"], c["failed"]) for op, c in ops.items()} == {
        "copy": (1, 1, 0), "fetch_segment": (2, 1, 1), "fetch_index": (1, 1, 0), "delete": (1, 1, 0)}
    assert rsm.status()["faults_injected"] == 0


def test_faults_change_at_run_time_through_the_control_file(tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = make_rsm(tmp_path)
    seg = make_segment()
    try:
        set_faults(tmp_path, {"all": {"error": "retriable"}})
        for call in (lambda: rsm.copy_log_segment_data(seg.metadata, seg.data),
                     lambda: rsm.fetch_log_segment(seg.metadata, 0), lambda: rsm.delete_log_segment_data(seg.metadata),
                     lambda: rsm.fetch_index(seg.metadata, IndexType.OFFSET)):
            with pytest.raises(RetriableRemoteStorageError, match="injected retriable"):
                call()
        assert not list((tmp_path / "remote").rglob("*.log"))  # the store never saw the copy
        set_faults(tmp_path, {"copy": {"error": "fatal"}})
        with pytest.raises(RemoteStorageError) as info:
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        assert not isinstance(info.value, RetriableRemoteStorageError)
        set_faults(tmp_path, None)  # removed: back to no faults
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        assert drain(rsm.fetch_log_segment(seg.metadata, 0)) == seg.log_bytes()
        status = rsm.status()
    finally:
        rsm.close()
    assert status["generation"] == 3 and status["spec"] == {}
    assert status["faults_injected"] == 5
    assert status["operations"]["copy"]["faults"] == {"retriable": 1, "fatal": 1}
    assert status["operations"]["copy"]["ok"] == 1


def test_latency_delays_the_call_then_lets_it_through(tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = make_rsm(tmp_path, **{"faults.spec": json.dumps({"fetch_segment": {"latency_ms": 300}})})
    seg = make_segment()
    try:
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        started = time.monotonic()
        assert drain(rsm.fetch_log_segment(seg.metadata, 0)) == seg.log_bytes()
        assert time.monotonic() - started >= 0.3
    finally:
        rsm.close()
    assert rsm.status()["operations"]["fetch_segment"]["faults"] == {"latency": 1}


def test_a_hang_ends_in_a_retriable_timeout_or_early_when_lifted_or_closed(tmp_path: Path,
                                                                          make_segment: MakeSegment) -> None:
    rsm = make_rsm(tmp_path)
    seg = make_segment()
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    set_faults(tmp_path, {"fetch_segment": {"hang_ms": 300}})
    started = time.monotonic()
    with pytest.raises(RetriableRemoteStorageError, match="timed out after 300 ms"):
        rsm.fetch_log_segment(seg.metadata, 0)
    assert 0.3 <= time.monotonic() - started < 2

    # lifted while hanging: the call proceeds at once and succeeds
    set_faults(tmp_path, {"fetch_segment": {"hang_ms": 60_000}})
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(drain(rsm.fetch_log_segment(seg.metadata, 0))))
    worker.start()
    time.sleep(0.2)
    started = time.monotonic()
    set_faults(tmp_path, None)
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - started < 1
    assert results == [seg.log_bytes()]

    # closed while hanging: a retriable error at once (a stopping broker never waits for a hang)
    set_faults(tmp_path, {"fetch_segment": {"hang_ms": 60_000}})
    errors: list[BaseException] = []

    def hang() -> None:
        try:
            rsm.fetch_log_segment(seg.metadata, 0)
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    worker = threading.Thread(target=hang)
    worker.start()
    time.sleep(0.2)
    rsm.close()
    worker.join(5)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], RetriableRemoteStorageError)


def test_partial_copy_uploads_a_truncated_log_then_fails(tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = make_rsm(tmp_path, **{"faults.spec": json.dumps({"copy": {"partial": True}})})
    seg = make_segment()
    try:
        with pytest.raises(RemoteStorageError, match="partial upload") as info:
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        assert not isinstance(info.value, RetriableRemoteStorageError)  # default: fatal, cleaned by the RLM at once
        assert isinstance(rsm.delegate, LocalTieredStorage)
        stored = rsm.delegate.segment_files(seg.metadata)
        assert stored["log"].stat().st_size == seg.data.log_segment.stat().st_size // 2  # torn upload left behind
        assert "index" in stored  # with its indexes, as a cut connection would leave them
        set_faults(tmp_path, {"copy": {"partial": True, "error": "retriable"}})
        with pytest.raises(RetriableRemoteStorageError):
            rsm.copy_log_segment_data(seg.metadata, seg.data)
    finally:
        rsm.close()
    assert seg.data.log_segment.stat().st_size == seg.metadata.segment_size_in_bytes  # the local file untouched
    assert rsm.status()["operations"]["copy"]["faults"] == {"partial": 2}


def test_vanished_objects_are_really_gone_and_answered_not_found(tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = make_rsm(tmp_path)
    seg = make_segment()
    try:
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        set_faults(tmp_path, {"fetch_index": {"vanish": True}})
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_index(seg.metadata, IndexType.OFFSET)
        set_faults(tmp_path, None)
        with pytest.raises(RemoteResourceNotFoundError):  # still gone without the fault: it was deleted
            rsm.fetch_log_segment(seg.metadata, 0)
        assert isinstance(rsm.delegate, LocalTieredStorage) and rsm.delegate.segment_files(seg.metadata) == {}
    finally:
        rsm.close()


def test_limit_topics_and_probability_select_the_faulted_calls(tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = make_rsm(tmp_path, **{"faults.seed": "7"})
    other = make_segment(topic="other")
    segs = [make_segment() for _ in range(3)]
    try:
        set_faults(tmp_path, {"copy": {"error": "retriable", "limit": 2, "topics": ["tiered"]}})
        rsm.copy_log_segment_data(other.metadata, other.data)  # another topic: never faulted
        outcomes = []
        for seg in segs:
            try:
                rsm.copy_log_segment_data(seg.metadata, seg.data)
                outcomes.append("ok")
            except RetriableRemoteStorageError:
                outcomes.append("fault")
        assert outcomes == ["fault", "fault", "ok"]
        set_faults(tmp_path, {"fetch_segment": {"error": "retriable", "probability": 0.5}})  # a new spec: new limit
        faulted = 0
        for _ in range(200):
            try:
                drain(rsm.fetch_log_segment(segs[2].metadata, 0, 10))
            except RetriableRemoteStorageError:
                faulted += 1
        assert 60 < faulted < 140
    finally:
        rsm.close()


def test_a_bad_control_file_is_ignored_until_fixed(tmp_path: Path, make_segment: MakeSegment,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    rsm = make_rsm(tmp_path)
    seg = make_segment()
    try:
        set_faults(tmp_path, {"copy": {"error": "retriable"}})
        with pytest.raises(RetriableRemoteStorageError):
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        (tmp_path / "faults.json").write_text('{"copy": {"error": ')  # half-written: the old spec stays
        with caplog.at_level(logging.ERROR, "strata.tiered.storage.faults"), \
                pytest.raises(RetriableRemoteStorageError):
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        assert "fault control file" in caplog.text and "ignored" in caplog.text
        (tmp_path / "faults.json").write_text('{"copy": {"eror": "fatal"}}')  # a typo is refused too
        with pytest.raises(RetriableRemoteStorageError):
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        set_faults(tmp_path, {})
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    finally:
        rsm.close()


def test_status_file_holds_the_counts(tmp_path: Path, make_segment: MakeSegment) -> None:
    status_file = tmp_path / "status.json"
    rsm = make_rsm(tmp_path, **{"faults.status.file": str(status_file), "faults.status.interval.ms": "10"})
    seg = make_segment()
    try:
        set_faults(tmp_path, {"copy": {"error": "retriable", "limit": 1}})
        with pytest.raises(RetriableRemoteStorageError):
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        deadline = time.monotonic() + 5
        while read_status(status_file)["operations"]["copy"]["ok"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        status = read_status(status_file)
    finally:
        rsm.close()
    assert status["faults_injected"] == 1
    assert status["operations"]["copy"] == {"calls": 2, "ok": 1, "failed": 1, "faults": {"retriable": 1}}
    assert status["spec"] == {"copy": {"error": "retriable", "limit": 1}}


@pytest.mark.parametrize(("spec", "message"), [
    ('{"copy": {"error": "boom"}}', "error must be one of"),
    ('{"upload": {"error": "fatal"}}', "unknown operation"),
    ('{"copy": {"latency": 5}}', "unknown fault field"),
    ('{"fetch_segment": {"partial": true}}', "copy only"),
    ('{"delete": {"vanish": true}}', "fetch_segment and fetch_index only"),
    ('{"copy": {"probability": 2}}', "within"),
    ('{"copy": {"hang_ms": -1}}', ">= 0"),
    ("[1]", "JSON object"),
])
def test_bad_specs_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_spec(spec)


def test_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="faults.delegate.class.name"):
        FaultInjectingRemoteStorageManager().configure({"dir": str(tmp_path)})
    with pytest.raises(ValueError, match="itself"):
        FaultInjectingRemoteStorageManager().configure({"faults.delegate.class.name": "faults"})
    with pytest.raises(ValueError, match="unknown operation"):
        make_rsm(tmp_path, **{"faults.spec": '{"nope": {}}'})
    assert parse_spec('{"all": {"partial": true, "vanish": true}}').keys() == {"copy", "fetch_segment",
                                                                                 "fetch_index"}
