"""A single broker with the embedded (local-directory) remote store, where diskless topics live."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.tiered.harness import tiered_props


def diskless_broker(tmp: Path, **extra: str) -> BrokerProcess:
    return BrokerProcess(tmp / "broker", tiered_props(tmp / "remote", **extra))


def create_diskless(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config={"diskless.enable": "true", **configs})],
                                  operation_timeout=30)
    futures[name].result(30)


def wal_objects(tmp: Path) -> list[Path]:
    """The WAL objects in the store (the local store keeps an object as a file under its key)."""
    root = tmp / "remote" / "diskless" / "wal"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
