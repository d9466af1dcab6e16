"""Rebalance time of a 50-member group when one more member joins: KIP-848 against the classic protocol.

    .venv/bin/python bench/group_bench.py [--quick] [--members N] [--partitions P] [--reps R]

One broker; a topic of P partitions; N confluent-kafka consumers (one thread each, polling) in a group that is
already stable. Then one more member subscribes, and the clock runs until the group is stable again: every
member's assignment non-empty and, for the consumer protocol, the group Stable in ConsumerGroupDescribe (all
members reconciled to the target), for the classic protocol Stable in DescribeGroups with the new member
assigned. Both groups heartbeat every 500 ms (classic: the client's ``heartbeat.interval.ms``; consumer:
the broker's ``group.consumer.heartbeat.interval.ms``). The classic members use librdkafka's default
assignors (range, roundrobin: eager, every member gives everything up and rejoins). Target (issue 30):
consumer / classic <= 0.5. Also reported: broker CPU-seconds during the rebalance.

Writes bench/out/group_bench.json. The broker is stopped by its pid at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.broker.harness import BrokerProcess  # noqa: E402

from cluster_bench import cpu_seconds  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
PROPS = {"group.consumer.min.heartbeat.interval.ms": "500", "group.consumer.heartbeat.interval.ms": "500",
         "group.consumer.min.session.timeout.ms": "10000", "group.consumer.session.timeout.ms": "30000",
         "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}
TARGET = 0.5


class Members:
    """N consumers of one group, each polled by its own thread until :meth:`close`."""

    def __init__(self, bootstrap: str, group: str, protocol: str) -> None:
        self.bootstrap, self.group, self.protocol = bootstrap, group, protocol
        self.consumers: list[Consumer] = []
        # what each consumer owns, read by its own polling thread: a Consumer called from two threads at once
        # (assignment() while another thread is in poll()) blocks until the poll returns, or longer
        self.owned: dict[int, int] = {}
        self.history: list[tuple[float, int, frozenset[int]]] = []  # (time, consumer, partitions) at each change
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def add(self, topic: str) -> Consumer:
        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group, "group.protocol": self.protocol,
                "log_level": 3, "enable.auto.commit": False}
        if self.protocol == "classic":
            conf.update({"heartbeat.interval.ms": 500, "session.timeout.ms": 30000})
        c = Consumer(conf)
        c.subscribe([topic])
        self.consumers.append(c)
        t = threading.Thread(target=self._poll, args=(c,), daemon=True)
        t.start()
        self._threads.append(t)
        return c

    def _poll(self, c: Consumer) -> None:
        last: frozenset[int] = frozenset()
        while not self._stop.is_set():
            c.poll(0.02)
            now = frozenset(tp.partition for tp in c.assignment())
            self.owned[id(c)] = len(now)
            if now != last:
                self.history.append((time.perf_counter(), id(c), now))
                last = now

    def assigned(self, c: Consumer) -> int:
        return self.owned.get(id(c), 0)

    def all_assigned(self) -> bool:
        return all(self.assigned(c) for c in self.consumers)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)
        for c in self.consumers:
            c.close()


def downtime(history: list[tuple[float, int, frozenset[int]]], partitions: int, start: float, end: float) -> float:
    """Partition-seconds in [start, end] during which no member owned the partition: what consumers feel."""
    owned: dict[int, frozenset[int]] = {}
    holders = [0] * partitions
    last = start
    total = 0.0
    for t, consumer, now in sorted(history):
        if t > start:
            total += (min(t, end) - last) * sum(1 for h in holders if h == 0)
            last = min(t, end)
        for p in owned.get(consumer, frozenset()):
            holders[p] -= 1
        for p in now:
            holders[p] += 1
        owned[consumer] = now
    total += max(end - last, 0.0) * sum(1 for h in holders if h == 0)
    return total


def stable(admin: AdminClient, group: str, members: int) -> bool:
    g = admin.describe_consumer_groups([group])[group].result(10)
    return str(g.state).endswith("STABLE") and len(g.members) == members


def wait(cond, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise SystemExit(f"timed out: {what}")


def one_run(broker: BrokerProcess, protocol: str, n: int, partitions: int, rep: int) -> dict:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    topic = f"rebalance-{protocol}-{rep}"
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    group = f"bench-{protocol}-{rep}"
    members = Members(broker.bootstrap, group, protocol)
    try:
        for _ in range(n):
            members.add(topic)
        wait(lambda: members.all_assigned() and stable(admin, group, n), 300, f"{n} {protocol} members stable")
        time.sleep(1.0)  # let the last heartbeats settle
        cpu0 = cpu_seconds(broker.pid())
        started = time.perf_counter()
        newcomer = members.add(topic)
        wait(lambda: members.assigned(newcomer) > 0 and members.all_assigned() and stable(admin, group, n + 1), 300,
             f"the {protocol} group stable again")
        seconds = time.perf_counter() - started
        cpu = cpu_seconds(broker.pid()) - cpu0
        down = downtime(list(members.history), partitions, started, started + seconds)
    finally:
        members.close()
    return {"protocol": protocol, "seconds": seconds, "broker_cpu_s": cpu, "partition_downtime_s": down}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 members, 2 repetitions")
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    n, reps = (20, 2) if args.quick else (args.members, args.reps)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="group-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker", PROPS).start()
        try:
            for rep in range(reps):
                for protocol in ("consumer", "classic"):
                    runs.append(one_run(broker, protocol, n, args.partitions, rep))
                    print(f"  rep {rep} {protocol:<8} {runs[-1]['seconds']:6.2f} s  "
                          f"partitions down {runs[-1]['partition_downtime_s']:7.2f} partition-s  "
                          f"broker {runs[-1]['broker_cpu_s']:5.2f} CPU-s", flush=True)
        finally:
            broker.stop()
    median = {p: statistics.median(r["seconds"] for r in runs if r["protocol"] == p) for p in ("consumer", "classic")}
    cpu = {p: statistics.median(r["broker_cpu_s"] for r in runs if r["protocol"] == p) for p in ("consumer", "classic")}
    down = {p: statistics.median(r["partition_downtime_s"] for r in runs if r["protocol"] == p)
            for p in ("consumer", "classic")}
    ratio = median["consumer"] / median["classic"]
    down_ratio = down["consumer"] / down["classic"] if down["classic"] else 0.0
    result = {"members": n, "partitions": args.partitions, "runs": runs, "median_s": median,
              "median_broker_cpu_s": cpu, "median_partition_downtime_s": down, "ratio": ratio,
              "downtime_ratio": down_ratio, "target": TARGET, "pass": ratio <= TARGET}
    print(f"group rebalance, {n} members + 1 joining, {args.partitions} partitions: consumer protocol "
          f"{median['consumer']:.2f} s, classic {median['classic']:.2f} s, ratio {ratio:.2f} "
          f"(target <= {TARGET}) {'PASS' if ratio <= TARGET else 'FAIL'}; broker CPU-s "
          f"{cpu['consumer']:.2f} / {cpu['classic']:.2f}; partitions unowned meanwhile {down['consumer']:.2f} / "
          f"{down['classic']:.2f} partition-s (ratio {down_ratio:.3f})")
    OUT.mkdir(exist_ok=True)
    (OUT / "group_bench.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
