"""The broker process: composition root, listener, periodic work and clean shutdown.

Startup: ``meta.properties`` per log dir (Kafka's format: cluster id, node id), the topic
registry, the logs (recovered from their recovery points unless the clean-shutdown marker is
there), the group coordinator, then the listener. The one line ``strata broker ready on
HOST:PORT`` is logged only when connections are accepted, so scripts and tests can wait for it.

Shutdown (SIGTERM/SIGINT): stop accepting, wake long polls, close client sockets, then close
every log, write checkpoints and the clean-shutdown marker (``LogManager.shutdown``).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import signal
import socket
import uuid
from pathlib import Path
from typing import Any

from strata.broker.connection import ClientConnection
from strata.broker.dispatch import handlers
from strata.broker.group.coordinator import GroupCoordinator
from strata.broker.partitions import ReplicaManager
from strata.broker.producer_ids import ProducerIdManager
from strata.broker.topics import TopicInfo, TopicRegistry
from strata.common import SystemClock, ThreadScheduler, TopicPartition
from strata.config import LogConfig
from strata.config.broker_config import BrokerConfig
from strata.errors import ApiError, ErrorCode, KafkaStorageError
from strata.log.checkpoints import atomic_write
from strata.log.manager import LogManager

log = logging.getLogger("strata.broker")
lifecycle = logging.getLogger("strata.lifecycle")  # startup/shutdown lines, shown at the default level

META_PROPERTIES = "meta.properties"


def _read_properties(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def ensure_meta_properties(log_dirs: tuple[Path, ...], node_id: int, cluster_id: str | None) -> str:
    """Kafka's ``meta.properties`` (version 1): every dir must agree on cluster id and node id."""
    found: str | None = None
    for d in log_dirs:
        d.mkdir(parents=True, exist_ok=True)
        path = d / META_PROPERTIES
        if path.exists():
            props = _read_properties(path)
            if int(props.get("node.id", node_id)) != node_id:
                raise KafkaStorageError(f"{path} belongs to node.id {props.get('node.id')}, this broker is {node_id}")
            cid = props.get("cluster.id")
            if found is not None and cid != found:
                raise KafkaStorageError(f"log dirs disagree on cluster.id: {found} vs {cid} in {path}")
            found = cid
    if cluster_id is not None and found is not None and cluster_id != found:
        raise KafkaStorageError(f"cluster.id {cluster_id} differs from {found} stored in meta.properties")
    cid = found or cluster_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    for d in log_dirs:
        path = d / META_PROPERTIES
        if not path.exists():
            directory_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            atomic_write(path, (f"#\n#{'Strata'}\nnode.id={node_id}\ndirectory.id={directory_id}\n"
                                f"version=1\ncluster.id={cid}\n").encode())
    return cid


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.clock = SystemClock()
        self.scheduler = ThreadScheduler()
        self.cluster_id = ensure_meta_properties(config.log_dirs, config.node_id, config.cluster_id)
        self.topics = TopicRegistry(config.log_dirs[0], config.log_config)
        self.topics.load()
        self.logs = LogManager(config.log_dirs, self.topics.config, self.clock, self.scheduler)
        self.replicas = ReplicaManager(config.node_id, self.logs, self.topics)
        self.producer_ids = ProducerIdManager(config.log_dirs[0])
        self.groups: Any = None  # the group coordinator, set in start() (see strata.broker.group)
        self.shutting_down = False
        self._server_sock: socket.socket | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self.port = config.listener.port

    # -- what handlers use --------------------------------------------------------------------

    def broker_entry(self) -> dict[str, Any]:
        adv = self.config.advertised_listener
        port = adv.port if adv.port else self.port
        return {"node_id": self.node_id, "host": adv.host, "port": port, "rack": None}

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        info = self.topics.create(name, partitions, configs)
        self.replicas.open_topic(info)
        log.info("created topic %s (%d partitions, id %s)", name, partitions, info.topic_id)
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.topics.delete(name)
        self.replicas.close_topic(info)
        if self.groups is not None:
            self.groups.on_topic_deleted(name)
        log.info("deleted topic %s", name)
        return info

    # -- admin --------------------------------------------------------------------------------
    # Topic administration (CreatePartitions, AlterConfigs, DeleteRecords): the registry is changed
    # first (it is what a restart trusts), then the live logs follow.

    def add_partitions(self, name: str, count: int) -> TopicInfo:
        """Grow ``name`` to ``count`` partitions (the handler has checked it is an increase)."""
        info = self.topics.get(name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        old = info.partitions
        info = self.topics.set_partitions(name, count)
        self.replicas.add_partitions(info, old)
        log.info("topic %s: %d -> %d partitions", name, old, count)
        return info

    def set_topic_configs(self, name: str, overrides: dict[str, str]) -> LogConfig:
        """Replace the topic's overrides (persisted), then apply them to its open logs at once."""
        effective = self.topics.set_configs(name, overrides)
        self.replicas.apply_config(name)
        log.info("topic %s: config overrides now %s", name, overrides)
        return effective

    def delete_records(self, tp: TopicPartition, offset: int) -> int:
        """DeleteRecords on one partition; returns the new log start offset (the low watermark).

        The log start offsets are checkpointed at once so a ``kill -9`` cannot bring the deleted
        records back (Kafka waits for the periodic checkpoint; one small write here is cheap).
        """
        low = self.replicas.get_log(tp).delete_records(offset)
        self.logs.checkpoint()
        return low

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        handlers()  # import every handler module before the first request
        self.logs.startup()
        self._drop_orphan_logs()
        for info in self.topics:
            self.replicas.open_topic(info)  # partitions created while we were down, or lost dirs
        self.groups = GroupCoordinator(self)
        await self.groups.start()
        listener = self.config.listener
        sock = socket.socket(socket.AF_INET6 if ":" in listener.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listener.host, listener.port))
        sock.listen(256)
        sock.setblocking(False)
        self._server_sock = sock
        self.port = sock.getsockname()[1]
        loop = asyncio.get_running_loop()
        self._background.append(loop.create_task(self._accept_loop(sock)))
        self._background.append(loop.create_task(self._periodic(self.config.log_retention_check_interval_ms,
                                                                 self.logs.cleanup_logs, "retention")))
        self._background.append(loop.create_task(self._periodic(
            self.config.log_flush_offset_checkpoint_interval_ms or 60_000, self.logs.checkpoint, "checkpoint")))
        self._background.append(loop.create_task(self._periodic(1000, self.logs.flush_dirty_logs, "flush")))
        lifecycle.info("strata broker ready on %s:%d", listener.host, self.port)

    def _drop_orphan_logs(self) -> None:
        """Logs the registry does not know (a delete interrupted by a crash) are deleted, not served.

        The registry is written before partition directories are renamed away, so after a ``kill -9``
        in between, the directories of a deleted topic (or of a partition beyond the topic's count)
        are still there; a stale topic id is caught when the topic's logs are opened.
        """
        for tp in list(self.logs.logs):
            info = self.topics.get(tp.topic)
            if info is None or tp.partition >= info.partitions:
                log.warning("deleting %s: its topic is not in the registry (interrupted deletion)", tp)
                self.logs.delete_log(tp)

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, addr = await loop.sock_accept(sock)
            except OSError as e:
                if self.shutting_down:
                    return
                log.warning("accept failed: %s", e)
                await asyncio.sleep(0.1)
                continue
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = f"{addr[0]}:{addr[1]}"
            task = loop.create_task(ClientConnection(self, client, peer).run())
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _periodic(self, interval_ms: int, fn: Any, name: str) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:
                log.exception("periodic %s failed", name)

    async def stop(self) -> None:
        if self.shutting_down:
            return
        self.shutting_down = True
        lifecycle.info("shutting down")
        if self._server_sock is not None:
            self._server_sock.close()
        for task in self._background:
            task.cancel()
        for task in list(self._connections):
            task.cancel()
        self.replicas.wake_all()
        await asyncio.gather(*self._background, *self._connections, return_exceptions=True)
        if self.groups is not None:
            await self.groups.stop()
        self.logs.shutdown()
        self.scheduler.shutdown(run_pending=False)
        lifecycle.info("strata broker stopped")
        self._stopped.set()

    async def serve_forever(self) -> None:
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: loop.create_task(self.stop()))
        await self._stopped.wait()


def serve(config: BrokerConfig) -> None:
    asyncio.run(Broker(config).serve_forever())
