"""Replica rejoin with tiered storage (issue 14): the time a new replica needs to join the ISR.

    .venv/bin/python bench/rejoin_bench.py [--quick] [--local-mib L] [--ratio R]

Three brokers on a local ZooKeeper share one ``local`` remote store. Two topics, one partition each on
brokers [1, 2], get the same N + L bytes (N = R x L, 1 KiB records, acks=all): ``rejoin-tiered`` keeps L
bytes locally (``local.retention.bytes``) and the rest in remote storage; ``rejoin-local`` is not tiered
(all N + L bytes on every replica, the baseline). Each partition is then reassigned to [1, 2, 3]: broker 3,
empty, must build a replica. Measured per topic, in the same run: seconds from the reassignment to broker 3
in the ISR, bytes broker 3 wrote for the partition, and broker 3's CPU-seconds. Target (issue 14): the ratio
tracks L / (N + L); at R = 20, rejoining is at least 10x faster than with everything local.

Writes bench/out/rejoin_bench.json. Every process is stopped by its pid at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.broker.kafka_wire import WireClient  # noqa: E402
from tests.cluster.harness import Cluster, wait_until  # noqa: E402

from cluster_bench import cpu_seconds, produce_bulk  # noqa: E402
from strata.tools.zookeeper import ZooKeeperServer  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
ALTER_PARTITION_REASSIGNMENTS = 45


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.log")) if path.is_dir() else 0


def reassign(cluster: Cluster, topic: str, replicas: list[int]) -> None:
    controller = next(b for b in cluster.brokers if cluster.admin().list_topics(timeout=10).controller_id == b)
    with WireClient(cluster.brokers[controller].bootstrap) as w:
        r = w.call(ALTER_PARTITION_REASSIGNMENTS, 0, timeout=30_000, topics=[{"name": topic, "partitions": [
            {"partition_index": 0, "replicas": replicas}]}])
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0, r


def measure(cluster: Cluster, topic: str) -> dict:
    cpu0 = cpu_seconds(cluster.brokers[3].pid())
    started = time.perf_counter()
    reassign(cluster, topic, [1, 2, 3])
    wait_until(lambda: 3 in cluster.metadata(topic).partitions[0].isrs, 900, f"broker 3 in the ISR of {topic}",
               interval_s=0.02)
    seconds = time.perf_counter() - started
    written = dir_bytes(cluster.brokers[3].data_dir / "logs" / f"{topic}-0")
    return {"seconds_to_isr": seconds, "bytes_on_new_replica": written,
            "new_replica_cpu_s": cpu_seconds(cluster.brokers[3].pid()) - cpu0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (L = 4 MiB)")
    parser.add_argument("--local-mib", type=int, help="L: MiB kept locally by the tiered topic (default 16)")
    parser.add_argument("--ratio", type=int, default=20, help="R: remote bytes / local bytes (default 20)")
    args = parser.parse_args(argv)
    local_mib = args.local_mib or (4 if args.quick else 16)
    total = local_mib * (args.ratio + 1) << 20
    segment = (local_mib << 20) // 4
    results: dict = {"cpus": os.cpu_count(), "local_mib": local_mib, "ratio_remote_to_local": args.ratio,
                     "total_mib": total >> 20}
    with tempfile.TemporaryDirectory(prefix="strata-rejoin-bench-") as tmp:
        store = Path(tmp) / "store"
        zk = ZooKeeperServer(Path(tmp) / "zk").start().wait_ready()
        cluster = Cluster(zk.connect + "/bench", Path(tmp), 3, {
            "zookeeper.session.timeout.ms": "2000", "replica.fetch.max.bytes": str(8 << 20),
            "replica.fetch.response.max.bytes": str(32 << 20), "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "local", "rsm.config.dir": str(store),
            "remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "500",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "5"})
        try:
            cluster.start()
            admin = cluster.admin()
            common = {"segment.bytes": str(segment), "retention.ms": "-1", "retention.bytes": "-1"}
            admin.create_topics([
                NewTopic("rejoin-tiered", 1, replica_assignment=[[1, 2]], config={
                    **common, "remote.storage.enable": "true", "local.retention.bytes": str(local_mib << 20)}),
                NewTopic("rejoin-local", 1, replica_assignment=[[1, 2]], config=common)])["rejoin-local"].result(30)
            for topic in ("rejoin-tiered", "rejoin-local"):
                cluster.wait_full_isr(topic)
                produce_bulk(cluster.bootstrap, topic, total, "all")
            bound = (local_mib << 20) + 3 * segment
            for broker in (1, 2):
                wait_until(lambda b=broker: dir_bytes(cluster.brokers[b].data_dir / "logs" / "rejoin-tiered-0")
                           <= bound, 600, f"broker {broker} holding only the local tail", interval_s=0.2)
            results["tiered"] = measure(cluster, "rejoin-tiered")
            results["all_local"] = measure(cluster, "rejoin-local")
            results["speedup"] = results["all_local"]["seconds_to_isr"] / results["tiered"]["seconds_to_isr"]
            results["bytes_ratio"] = results["tiered"]["bytes_on_new_replica"] / \
                max(1, results["all_local"]["bytes_on_new_replica"])
            print(json.dumps(results, indent=1))
        finally:
            cluster.stop()
            zk.stop()
    OUT.mkdir(exist_ok=True)
    (OUT / "rejoin_bench.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
