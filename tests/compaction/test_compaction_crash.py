"""``kill -9`` during log cleaning: at each of the cleaner's crash points (a half-written ``.cleaned``
segment, a whole one before the swap, a swap begun, old segments half deleted) and at random moments
while the cleaner works. After each restart the log must equal the model: every acknowledged record is
there or superseded by a later record of its key, no superseded record survives once the cleaner has
caught up, offsets only increase, and every segment, index and checkpoint file passes ``dump-log``'s checks.

``make test`` runs one cycle per crash point and two random kills; ``make soak`` runs many random ones.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from tests.broker.harness import BrokerProcess
from tests.compaction.harness import create, read_all, wait_until

from strata.log.dump import DumpOptions, dump_paths, has_problems

POINTS = ["cleaner.clean.after_append", "cleaner.before_swap", "cleaner.swap.after_swap_suffix",
          "cleaner.swap.after_delete_old:2"]
PROPS = {"log.cleaner.backoff.ms": "50", "log.retention.check.interval.ms": "200",
         "log.flush.offset.checkpoint.interval.ms": "200", "log.initial.task.delay.ms": "200"}
Record = tuple[int, bytes, bytes]


class Model:
    """What was acknowledged: (offset, key, value) per delivery report."""

    def __init__(self) -> None:
        self.acked: dict[int, tuple[bytes, bytes]] = {}

    def produce(self, b: BrokerProcess, rng: random.Random, n: int, keys: int, tag: int) -> None:
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2, "batch.size": 4096,
                      "message.timeout.ms": 10_000, "retries": 0})

        def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                self.acked[msg.offset()] = (msg.key(), msg.value())

        for i in range(n):
            p.produce("c", key=b"k%d" % rng.randrange(keys), value=b"v%d-%d" % (tag, i), on_delivery=delivered)
            if i % 200 == 0:
                p.poll(0)
        p.flush(15)

    def check(self, got: list[tuple[int, bytes | None, bytes | None]], caught_up: bool) -> None:
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets)), "offsets must only increase"
        present = {o: (k, v) for o, k, v in got}
        latest: dict[bytes, int] = {}
        for o, k, _ in got:
            assert k is not None
            latest[k] = max(latest.get(k, -1), o)
        for o, (k, v) in self.acked.items():
            if o in present:
                assert present[o] == (k, v), f"offset {o} holds {present[o]}, acknowledged {(k, v)}"
            else:
                assert latest.get(k, -1) > o, f"acknowledged record {o} of {k!r} lost (latest {latest.get(k)})"
        if caught_up:
            last_acked: dict[bytes, int] = {}
            for o, (k, _v) in self.acked.items():
                last_acked[k] = max(last_acked.get(k, -1), o)
            for o, k, _ in got:
                assert k is not None
                if o < last_acked.get(k, -1):
                    raise AssertionError(f"superseded record {o} of {k!r} kept (latest {last_acked[k]})")


def files_ok(b: BrokerProcess) -> None:
    events = list(dump_paths([b.data_dir / "logs" / "c-0"], DumpOptions()))
    assert not has_problems(events), [e for e in events if e.kind == "problem"][:5]


def wait_dead(b: BrokerProcess, timeout_s: float = 60.0) -> bool:
    assert b.proc is not None
    try:
        b.proc.wait(timeout_s)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: the point was not reached
        return False
    b.proc = None
    return True


def run_cycle(b: BrokerProcess, model: Model, rng: random.Random, kind: str, cycle: int,
              monkeypatch: pytest.MonkeyPatch) -> None:
    if kind == "random":
        b.start()
        killer_at = time.monotonic() + rng.uniform(0.5, 3.0)
        model.produce(b, rng, 3000, 300, cycle)
        time.sleep(max(0.0, killer_at - time.monotonic()))
        b.kill()
    else:
        monkeypatch.setenv("STRATA_CRASH_POINT", kind)
        try:
            b.start()
        finally:
            monkeypatch.delenv("STRATA_CRASH_POINT")
        model.produce(b, rng, 3000, 300, cycle)
        assert wait_dead(b), f"crash point {kind} not reached:\n{b.tail()}"
        assert f"crash point {kind.split(':')[0]} reached" in b.tail(), b.tail()
    b.start()
    model.check(read_all(b, "c"), caught_up=False)
    # filler under fresh keys rolls the segments holding the model's records, so the cleaner reaches them
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "batch.size": 4096})
    for i in range(400):
        p.produce("c", key=b"filler-%d-%d" % (cycle, i), value=b"f")
    p.flush(15)
    wait_until("the cleaner to catch up after the restart", lambda: _caught_up(b, model), timeout_s=60)
    b.stop()
    files_ok(b)


def _caught_up(b: BrokerProcess, model: Model) -> bool:
    got = [r for r in read_all(b, "c") if not (r[1] or b"").startswith(b"filler-")]
    try:
        model.check(got, caught_up=True)
    except AssertionError:
        model.check(got, caught_up=False)  # never a loss, only a cleaning still to come
        return False
    return True


def run(tmp_path: Path, kinds: list[str], seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    b = BrokerProcess(tmp_path / "broker", PROPS)
    b.start()
    create(b, "c", **{"segment.bytes": "8192", "delete.retention.ms": "600000"})
    b.stop()
    model = Model()
    try:
        for cycle, kind in enumerate(kinds):
            run_cycle(b, model, rng, kind, cycle, monkeypatch)
    except BaseException:
        print(f"\nCOMPACTION CRASH FAILED: seed={seed} kinds={kinds}")
        raise
    finally:
        if b.proc is not None:
            b.kill()


def _seed() -> int:
    text = os.environ.get("STRATA_SOAK_SEED")
    return int(text) if text else random.SystemRandom().randrange(1 << 30)


def test_kill_during_cleaning_loses_nothing_and_leaves_valid_files(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    run(tmp_path, [*POINTS, "random", "random"], _seed(), monkeypatch)


@pytest.mark.slow
def test_kill_during_cleaning_soak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seed = _seed()
    rng = random.Random(seed)
    kinds = [rng.choice([*POINTS, "random", "random", "random"]) for _ in range(40)]
    run(tmp_path, kinds, seed, monkeypatch)

