"""``strata tiers``: where each partition's data lives, local disk or remote storage, and who leads it.

Each broker publishes the view of its own replicas at ``GET /v1/tiers`` on its admin HTTP port.
The tool only knows a Kafka bootstrap address, like every other Kafka tool. Metadata (all topics)
gives the brokers and, per partition, the leader, the replicas and the ISR. A partition's tier
state is read from its leader (the replica whose log end, high watermark and uploads are the
partition's): for each leader broker the tool asks that broker, over its own Kafka listener,
DescribeConfigs on its BROKER resource for ``metrics.host`` and ``metrics.port`` (the port it
actually bound), fetches its ``/v1/tiers`` and keeps the rows of the partitions it leads. The
bootstrap broker's endpoint is always asked too, so a broker without one is reported even when it
leads nothing. A single broker is simply the leader of everything.

One row per partition: its leader, replicas and ISR, then both tiers' offsets and sizes. A broker
that cannot be read (down, no metrics endpoint) is named on stderr, its partitions show ``-`` and
the exit code is 1.

This module is imported when the CLI parser is built, so it imports kio (through
:mod:`strata.client.wire`) only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

DEFAULT_BOOTSTRAP = "localhost:9092"
TIMEOUT_S = 10.0
METADATA = 3
DESCRIBE_CONFIGS = 32
RESOURCE_BROKER = 4
_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")

COLUMNS = ("TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOCAL-START", "REMOTE-END", "END",
           "LOCAL-SEGS", "LOCAL-BYTES", "REMOTE-SEGS", "REMOTE-BYTES", "COPY-LAG")


class TiersError(Exception):
    """A failure to report to the user as one line (exit code 1)."""


def add_tiers_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> argparse.ArgumentParser:
    """Add ``tiers`` to the ``strata`` subcommands (``parents``: shared options such as ``-v``)."""
    p = subparsers.add_parser(
        "tiers", parents=list(parents), help="show local and remote (tiered) storage per partition",
        description="Show, per partition, its leader, replicas and ISR, the offsets and sizes held on local disk "
                    "and in remote storage, and what is not yet uploaded. Reads each leader broker's admin HTTP "
                    "endpoint (metrics.port), found through the Kafka bootstrap address.",
    )
    p.add_argument("--bootstrap", "--bootstrap-server", dest="bootstrap", default=DEFAULT_BOOTSTRAP,
                   metavar="HOST:PORT", help=f"the broker's Kafka listener (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--topic", default=None, help="only this topic's partitions")
    p.add_argument("--all", action="store_true", dest="show_internal",
                   help="include internal topics (__consumer_offsets, __remote_log_metadata)")
    p.add_argument("--json", action="store_true", help="print the merged JSON instead of a table")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, metavar="SECONDS",
                   help=f"network timeout (default {TIMEOUT_S:g})")
    p.set_defaults(func=_cmd_tiers, command_parser=p)
    return p


def _cmd_tiers(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    return main_tiers(args)


def main_tiers(args: argparse.Namespace) -> int:
    """Run ``strata tiers``; 0 on success, 1 with one line per problem on stderr otherwise."""
    timeout = getattr(args, "timeout", TIMEOUT_S)
    topic = getattr(args, "topic", None)
    try:
        payload = fetch_tiers(args.bootstrap, timeout, topic=topic,
                              include_internal=topic is not None or getattr(args, "show_internal", False))
    except TiersError as e:
        print(f"strata tiers: {e}", file=sys.stderr)
        return 1
    if topic is not None and not payload["partitions"]:
        print(f"strata tiers: topic {topic!r} not found", file=sys.stderr)
        return 1
    failed = [b for b in payload["brokers"] if b.get("error")]
    for b in failed:
        print(f"strata tiers: broker {b['broker_id']}: {b['error']}", file=sys.stderr)
    if failed and all(b.get("error") for b in payload["brokers"]):
        return 1  # nothing could be read: the errors say why, an empty table would not
    if args.json:
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_table(payload))
    return 1 if failed else 0


# -- talking to the brokers ---------------------------------------------------------------------

def metrics_endpoint(bootstrap: str, timeout_s: float = TIMEOUT_S) -> tuple[str, int]:
    """(host, port) of the admin HTTP endpoint of the broker at ``bootstrap``."""
    from strata.client.wire import KafkaWire, WireError

    try:
        with KafkaWire(bootstrap, timeout_s) as conn:
            brokers = list(conn.call(METADATA, 1, topics=[]).brokers)
            node_id = _connected_node_id(brokers, conn.host, conn.port)
            if node_id is None:
                raise TiersError(f"cannot tell which of brokers {sorted(int(b.node_id) for b in brokers)} is at "
                                 f"{conn.host}:{conn.port}: use the broker's advertised address as --bootstrap")
            return _metrics_endpoint_of(conn, node_id)
    except WireError as e:
        raise TiersError(f"broker unreachable: {e}") from None


def _metrics_endpoint_of(conn: Any, node_id: int) -> tuple[str, int]:
    """Ask the broker behind ``conn`` (node ``node_id``) where its admin HTTP endpoint is."""
    resp = conn.call(DESCRIBE_CONFIGS, 1, include_synonyms=False, resources=[
        {"resource_type": RESOURCE_BROKER, "resource_name": str(node_id),
         "configuration_keys": ["metrics.port", "metrics.host"]}])
    (result,) = resp.results
    if int(result.error_code) != 0:
        raise TiersError(f"DescribeConfigs for broker {node_id} failed: {result.error_code.name}"
                         + (f" ({result.error_message})" if result.error_message else ""))
    values = {c.name: c.value for c in result.configs}
    port_text = values.get("metrics.port")
    if port_text is None:
        raise TiersError("the broker does not report metrics.port: metrics endpoint not available")
    try:
        port = int(port_text)
    except ValueError:
        raise TiersError(f"the broker reports an invalid metrics.port {port_text!r}") from None
    if port <= 0:
        raise TiersError("metrics endpoint disabled on the broker: set metrics.port")
    metrics_host = (values.get("metrics.host") or "").strip()
    # a wildcard bind address is not something to connect to: the broker's Kafka host reaches it too
    return (conn.host if metrics_host in _WILDCARD_HOSTS else metrics_host), port


def _connected_node_id(brokers: Sequence[Any], host: str, port: int) -> int | None:
    """The node id of the broker at ``host:port`` among Metadata's ``brokers`` (None: cannot tell)."""
    if not brokers:
        raise TiersError("the broker's Metadata lists no brokers")
    if len(brokers) == 1:
        return int(brokers[0].node_id)
    for b in brokers:
        if b.port == port and b.host == host:
            return int(b.node_id)
    same_port = [b for b in brokers if b.port == port]
    if len(same_port) == 1:
        return int(same_port[0].node_id)
    return None


def fetch_tiers(bootstrap: str, timeout_s: float = TIMEOUT_S, *, topic: str | None = None,
                include_internal: bool = True) -> dict[str, Any]:
    """The cluster's partitions (or ``topic``'s), each with its leader's ``/v1/tiers`` row and its
    leader, replicas and ISR: ``{"brokers": [...], "partitions": [...]}``.

    ``brokers`` lists every broker asked, with its ``tiers_url`` or the ``error`` that kept it from
    answering; a partition whose leader could not be read (or that has no leader) carries only its
    metadata. Raises TiersError when the bootstrap broker itself cannot be reached.
    """
    from strata.client.wire import KafkaWire, WireError

    try:
        with KafkaWire(bootstrap, timeout_s) as conn:
            meta = conn.call(METADATA, 1, topics=None)
            addresses = {int(b.node_id): (str(b.host), int(b.port)) for b in meta.brokers}
            self_id = _connected_node_id(list(meta.brokers), conn.host, conn.port)
            partitions = []
            for t in sorted(meta.topics, key=lambda t: str(t.name)):
                name = str(t.name)
                if (topic is not None and name != topic) or (
                        not include_internal and (t.is_internal or name.startswith("__"))):
                    continue
                if int(t.error_code) != 0:
                    continue
                for p in sorted(t.partitions, key=lambda p: int(p.partition_index)):
                    partitions.append({"topic": name, "partition": int(p.partition_index),
                                       "leader": int(p.leader_id), "replicas": [int(r) for r in p.replica_nodes],
                                       "isr": [int(r) for r in p.isr_nodes]})
            asked = {p["leader"] for p in partitions if p["leader"] in addresses}
            if self_id is not None:
                asked.add(self_id)
            brokers: list[dict[str, Any]] = []
            rows: dict[int, dict[tuple[str, int], dict[str, Any]]] = {}
            for broker_id in sorted(asked):
                host, port = addresses.get(broker_id, (conn.host, conn.port))
                entry: dict[str, Any] = {"broker_id": broker_id, "host": host, "port": port}
                brokers.append(entry)
                try:
                    if broker_id == self_id:
                        http_host, http_port = _metrics_endpoint_of(conn, broker_id)
                    else:
                        http_host, http_port = _other_broker_endpoint(host, port, broker_id, timeout_s)
                    doc = fetch_tiers_http(http_host, http_port, timeout_s)
                except TiersError as e:
                    entry["error"] = str(e)
                    continue
                entry["tiers_url"] = _tiers_url(http_host, http_port)
                rows[broker_id] = {(str(r.get("topic")), int(r.get("partition", -1))): r for r in doc["partitions"]}
    except WireError as e:
        raise TiersError(f"broker unreachable: {e}") from None
    merged = []
    for p in partitions:
        row = rows.get(p["leader"], {}).get((p["topic"], p["partition"]))
        merged.append({**row, **p} if row is not None else p)
    return {"brokers": brokers, "partitions": merged}


def _other_broker_endpoint(host: str, port: int, broker_id: int, timeout_s: float) -> tuple[str, int]:
    from strata.client.wire import KafkaWire, WireError

    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        with KafkaWire(address, timeout_s) as conn:
            return _metrics_endpoint_of(conn, broker_id)
    except WireError as e:
        raise TiersError(f"broker unreachable: {e}") from None


def _tiers_url(host: str, port: int) -> str:
    url_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{url_host}:{port}/v1/tiers"


def fetch_tiers_http(host: str, port: int, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """GET ``/v1/tiers`` from the admin endpoint directly (no Kafka round trip)."""
    url = _tiers_url(host, port)
    # no proxies: the endpoint is the broker's own, usually on localhost; *_proxy variables would misroute it
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_s) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as e:
        raise TiersError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise TiersError(f"metrics endpoint {url} unreachable: {reason}") from None
    try:
        payload = json.loads(raw)
    except ValueError as e:
        raise TiersError(f"{url}: not JSON ({e})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("partitions"), list):
        raise TiersError(f"{url}: unexpected document (no partitions list)")
    return payload


# -- formatting ---------------------------------------------------------------------------------

def format_bytes(n: int | float | None) -> str:
    """Binary units with one decimal: 512 B, 1.2 MiB, 3.0 GiB."""
    if n is None:
        return "-"
    value = float(n)
    if abs(value) < 1024:
        return f"{int(value)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def _offset(value: Any) -> str:
    return "-" if value is None or (isinstance(value, int) and value < 0) else str(value)


def _replica_list(ids: Any) -> str:
    return ",".join(str(r) for r in ids) if ids else "-"


def _row(p: dict[str, Any]) -> tuple[str, ...]:
    leader = p.get("leader")
    head = (str(p.get("topic", "?")), str(p.get("partition", "?")),
            str(leader) if isinstance(leader, int) and leader >= 0 else "-",
            _replica_list(p.get("replicas")), _replica_list(p.get("isr")))
    if "log_end_offset" not in p:  # no tier state: the partition has no leader, or it could not be read
        return head + ("-",) * (len(COLUMNS) - len(head))
    tiered = bool(p.get("remote_storage_enable", False))

    def remote(text: str) -> str:
        return text if tiered else "-"

    return head + (
        _offset(p.get("log_start_offset")),
        _offset(p.get("local_log_start_offset")),
        remote(_offset(p.get("highest_offset_in_remote_storage"))),
        _offset(p.get("log_end_offset")),
        str(p.get("local_segments", 0)),
        format_bytes(p.get("local_bytes", 0)),
        remote(str(p.get("remote_segments", 0))),
        remote(format_bytes(p.get("remote_bytes", 0))),
        remote(format_bytes(p.get("copy_lag_bytes", 0))),
    )


def format_table(payload: dict[str, Any]) -> str:
    """The table ``strata tiers`` prints, with a warning line per partition without a leader and per
    partition whose last copy failed.

    Columns for remote storage show ``-`` on partitions without ``remote.storage.enable``; an
    offset of -1 (nothing uploaded yet) shows ``-`` too; a partition without tier state (no
    leader, or its leader could not be read) shows ``-`` in every tier column.
    """
    partitions = sorted(payload.get("partitions", []), key=lambda p: (str(p.get("topic", "")), p.get("partition", 0)))
    if not partitions:
        return "no partitions\n"
    rows = [COLUMNS, *(_row(p) for p in partitions)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = []
    for r in rows:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    for p in partitions:
        if isinstance(p.get("leader"), int) and p["leader"] < 0:
            lines.append(f"WARNING: {p.get('topic')}-{p.get('partition')}: no leader (offline)")
        error = p.get("last_copy_error")
        if error:
            lines.append(f"WARNING: {p.get('topic')}-{p.get('partition')}: last copy to remote storage failed: {error}")
    return "\n".join(lines) + "\n"
