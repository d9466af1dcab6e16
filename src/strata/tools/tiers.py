"""``strata tiers``: where each partition's data lives, local disk or remote storage, who leads it,
and what each replica holds locally.

Everything the table needs comes over the Kafka port, so ``strata tiers --bootstrap HOST:PORT``
works against any broker, with or without an admin HTTP endpoint:

* **Metadata** (all topics, or ``--topic``): the brokers, and per partition its leader, replicas and ISR.
* **DescribeConfigs** on the TOPIC resources: ``remote.storage.enable`` and the local retention
  (``local.retention.bytes`` / ``local.retention.ms``, with the ``retention.*`` they default to).
* **ListOffsets** to each partition's leader, one request per spec for all the partitions it leads:
  -2 (log start), -4 (earliest local, KIP-405), -5 (latest tiered, KIP-1005) and -1 (the high
  watermark, shown as END).
* **ListOffsets -4 with replica_id -2** (Kafka's "debugging consumer", which any replica answers
  from its own local log) to the broker of every other replica: its local log start. A broker that
  answers only as leader says NOT_LEADER_OR_FOLLOWER; that replica's local log start shows ``?``.
* **DescribeLogDirs** to every broker: the size of each partition's log on that broker, i.e. the
  local bytes of every replica, leader or follower.

Kafka has no API for the remote tier's bytes and segment count or the copy lag. The remote tier's
extent in offsets is [log start, latest tiered], so REMOTE-OFFSETS (latest tiered - log start + 1)
is derived from -5 and -2. The byte and segment columns come from the leader's admin HTTP
endpoint when it has one: for each leader broker the tool asks DescribeConfigs on its BROKER
resource for ``metrics.port`` / ``metrics.host`` (the port it actually bound) and, when the port
is set, reads ``GET /v1/tiers`` and keeps the rows of the partitions that broker leads (also their
local segment count, last copy error and the scrubber's findings). Without an endpoint (``metrics.port`` -1, or
``--no-http``) those columns show ``-``. The HTTP endpoint is optional: when it is advertised but
cannot be read, a line on stderr says so and the rest of the table is still printed (exit 0).

The output is one row per partition (its leader, replicas and ISR, both tiers' offsets and sizes),
each followed by one line per replica, in Metadata's replica order::

      replica 2 (follower, in ISR): local log start 41200, 3.1 MiB local

then a line per tiered topic with its local retention, and warnings (no leader, a leader that
could not say where its tiers are, a failed copy, damage the leader's scrubber found in the partition's
remote segments). A broker of the Metadata that cannot be reached over the Kafka port is named on
stderr, its partitions and replicas show ``-`` / ``?`` and the exit code is 1. ``--json`` prints the
same data: ``brokers``, ``topics`` and ``partitions``, each partition with ``replica_states``.

This module is imported when the CLI parser is built, so it imports kio (through
:mod:`strata.client.wire`) only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DEFAULT_BOOTSTRAP = "localhost:9092"
TIMEOUT_S = 10.0
METADATA = 3
LIST_OFFSETS, LIST_OFFSETS_V = 2, 9  # v9: -5 (latest tiered, KIP-1005)
DESCRIBE_CONFIGS = 32
DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_V = 35, 1
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")

EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, LATEST = -2, -4, -5, -1
CONSUMER, DEBUGGING_CONSUMER = -1, -2  # ListOffsets replica_id: answered by the leader / by any replica
LEADER_SPECS = {EARLIEST: "log_start_offset", EARLIEST_LOCAL: "local_log_start_offset",
                LATEST_TIERED: "highest_offset_in_remote_storage", LATEST: "high_watermark"}
TOPIC_CONFIG_KEYS = ("remote.storage.enable", "local.retention.bytes", "local.retention.ms", "retention.bytes",
                     "retention.ms", "diskless.enable")
HTTP_ONLY_KEYS = ("topic_id", "log_end_offset", "local_segments", "remote_segments", "remote_bytes",
                  "copy_lag_segments", "copy_lag_bytes", "last_copy_error", "diskless", "wal_bytes",
                  "wal_start_offset", "consolidated_offset", "scrub")

COLUMNS = ("TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOCAL-START", "REMOTE-END", "END",
           "LOCAL-SEGS", "LOCAL-BYTES", "REMOTE-OFFSETS", "REMOTE-SEGS", "REMOTE-BYTES", "COPY-LAG")

TP = tuple[str, int]  # (topic, partition)


class TiersError(Exception):
    """A failure to report to the user as one line (exit code 1)."""


def add_tiers_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> argparse.ArgumentParser:
    """Add ``tiers`` to the ``strata`` subcommands (``parents``: shared options such as ``-v``)."""
    p = subparsers.add_parser(
        "tiers", parents=list(parents), help="show local and remote (tiered) storage per partition and replica",
        description="Show, per partition, its leader, replicas and ISR, the offsets and sizes held on local disk "
                    "and in remote storage, and each replica's local log start and local bytes. Needs only the "
                    "Kafka port (Metadata, DescribeConfigs, ListOffsets, DescribeLogDirs); remote bytes, "
                    "segments and copy lag come from a leader's admin HTTP endpoint (metrics.port) when it has one.",
    )
    p.add_argument("--bootstrap", "--bootstrap-server", dest="bootstrap", default=DEFAULT_BOOTSTRAP,
                   metavar="HOST:PORT", help=f"the brokers' Kafka listener, a comma list (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--topic", default=None, help="only this topic's partitions")
    p.add_argument("--all", action="store_true", dest="show_internal",
                   help="include internal topics (__consumer_offsets, __remote_log_metadata)")
    p.add_argument("--json", action="store_true", help="print the merged JSON instead of a table")
    p.add_argument("--no-http", action="store_false", dest="http",
                   help="use only the Kafka port: do not read the leaders' admin HTTP endpoints (remote bytes, "
                        "segments and copy lag then show -)")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, metavar="SECONDS",
                   help=f"network timeout (default {TIMEOUT_S:g})")
    p.add_argument("--command-config", metavar="FILE", default=None,
                   help="client properties for a secured listener, as Kafka's tools take them: security.protocol, "
                        "sasl.mechanism, sasl.jaas.config, ssl.truststore.location... (docs/tools.md)")
    p.set_defaults(func=_cmd_tiers, command_parser=p)
    return p


def _cmd_tiers(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    return main_tiers(args)


def main_tiers(args: argparse.Namespace) -> int:
    """Run ``strata tiers``; 0 on success, 1 with one line per problem on stderr otherwise."""
    from strata.tools.kafka_cli import command_config_security

    timeout = getattr(args, "timeout", TIMEOUT_S)
    topic = getattr(args, "topic", None)
    try:
        payload = fetch_tiers(args.bootstrap, timeout, topic=topic,
                              include_internal=topic is not None or getattr(args, "show_internal", False),
                              http=getattr(args, "http", True),
                              security=command_config_security(args, TiersError))
    except TiersError as e:
        print(f"strata tiers: {e}", file=sys.stderr)
        return 1
    if topic is not None and not payload["partitions"]:
        print(f"strata tiers: topic {topic!r} not found", file=sys.stderr)
        return 1
    failed = [b for b in payload["brokers"] if b.get("error")]
    for b in payload["brokers"]:
        if b.get("error"):
            print(f"strata tiers: broker {b['broker_id']}: {b['error']}", file=sys.stderr)
        elif b.get("http_error"):
            print(f"strata tiers: broker {b['broker_id']}: {b['http_error']} (remote bytes, segments and copy lag "
                  f"of its partitions not shown)", file=sys.stderr)
    if failed and all(b.get("error") for b in payload["brokers"]):
        return 1  # nothing could be read: the errors say why, an empty table would not
    if args.json:
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_table(payload))
    return 1 if failed else 0


# -- talking to the brokers ---------------------------------------------------------------------

def metrics_endpoint(bootstrap: str, timeout_s: float = TIMEOUT_S, security: Any = None) -> tuple[str, int]:
    """(host, port) of the admin HTTP endpoint of the broker at ``bootstrap`` (``security``: a
    :class:`strata.client.security.ClientSecurity` for a secured listener)."""
    from strata.client.wire import KafkaWire, WireError
    from strata.tools.kafka_cli import unreachable

    try:
        with KafkaWire(bootstrap, timeout_s, security=security) as conn:
            brokers = list(conn.call(METADATA, 1, topics=[]).brokers)
            node_id = _connected_node_id(brokers, conn.host, conn.port)
            if node_id is None:
                raise TiersError(f"cannot tell which of brokers {sorted(int(b.node_id) for b in brokers)} is at "
                                 f"{conn.host}:{conn.port}: use the broker's advertised address as --bootstrap")
            return _metrics_endpoint_of(conn.call, conn.host, node_id)
    except WireError as e:
        raise TiersError(unreachable(e)) from None


def _metrics_endpoint_of(call: Any, host: str, node_id: int) -> tuple[str, int]:
    """Ask broker ``node_id`` (``call`` sends it a request; ``host`` is its Kafka host) where its admin
    HTTP endpoint is."""
    resp = call(DESCRIBE_CONFIGS, 1, include_synonyms=False, resources=[
        {"resource_type": RESOURCE_BROKER, "resource_name": str(node_id),
         "configuration_keys": ["metrics.port", "metrics.host"]}])
    (result,) = resp.results
    if int(result.error_code) != 0:
        raise TiersError(f"DescribeConfigs for broker {node_id} failed: {_error_name(result.error_code)}"
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
    return (host if metrics_host in _WILDCARD_HOSTS else metrics_host), port


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


def _error_name(code: Any) -> str:
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(int(code)).name.upper()
    except ValueError:
        return f"error {int(code)}"


def fetch_tiers(bootstrap: str, timeout_s: float = TIMEOUT_S, *, topic: str | None = None,
                include_internal: bool = True, http: bool = True, security: Any = None) -> dict[str, Any]:
    """The cluster's partitions (or ``topic``'s) with their tier state and their replicas' local state:
    ``{"brokers": [...], "topics": [...], "partitions": [...]}`` (the module docstring says from where).

    ``brokers`` lists every broker of the Metadata, each with the ``error`` that kept it from
    answering over the Kafka port, and for leaders its ``tiers_url`` (or ``http_error``) when
    ``http`` is on and it has an admin endpoint. A partition whose leader could not say where its
    tiers are (none, unreachable, an error: ``error``) carries no offsets. Raises TiersError when
    no bootstrap broker can be reached. ``security``: a :class:`strata.client.security.ClientSecurity`
    for a secured listener (TLS, SASL).
    """
    from strata.client.wire import WireError
    from strata.tools.admin import KafkaAdmin
    from strata.tools.kafka_cli import unreachable

    try:
        admin = KafkaAdmin(bootstrap, timeout_s, client_id="strata-tiers", security=security)
    except WireError as e:
        raise TiersError(unreachable(e)) from None
    with admin:
        try:
            state = admin.cluster(None if topic is None else [topic])
            partitions = _partitions(state, topic, include_internal)
            topics = _topic_configs(admin, sorted({p["topic"] for p in partitions}))
        except WireError as e:
            raise TiersError(unreachable(e)) from None
        brokers = []
        views: dict[int, _BrokerView] = {}
        for broker_id in sorted(state.brokers):
            host, port = state.brokers[broker_id]
            entry: dict[str, Any] = {"broker_id": broker_id, "host": host, "port": port}
            brokers.append(entry)
            try:
                views[broker_id] = _ask_broker(admin, broker_id, partitions)
            except WireError as e:
                entry["error"] = unreachable(e)
                continue
            if http and any(p["leader"] == broker_id for p in partitions):
                _read_http(admin, broker_id, host, timeout_s, entry, views[broker_id])
    configs = {t["topic"]: t for t in topics}
    for p in partitions:
        _merge(p, views, state.brokers, configs.get(p["topic"], {}))
    return {"brokers": brokers, "topics": topics, "partitions": partitions}


def _partitions(state: Any, topic: str | None, include_internal: bool) -> list[dict[str, Any]]:
    out = []
    for t in sorted(state.topics.values(), key=lambda t: str(t.name)):
        name = str(t.name)
        if (topic is not None and name != topic) or (
                not include_internal and (t.internal or name.startswith("__"))):
            continue
        for p in t.partitions:
            out.append({"topic": name, "partition": p.partition, "leader": p.leader, "replicas": list(p.replicas),
                        "isr": list(p.isr)})
    return out


def _topic_configs(admin: Any, names: Sequence[str]) -> list[dict[str, Any]]:
    """Per topic, the configs of TOPIC_CONFIG_KEYS (or the ``error`` DescribeConfigs gave)."""
    if not names:
        return []
    body = admin.call_any(DESCRIBE_CONFIGS, 4, include_synonyms=False, include_documentation=False, resources=[
        {"resource_type": RESOURCE_TOPIC, "resource_name": name, "configuration_keys": list(TOPIC_CONFIG_KEYS)}
        for name in names])
    out = []
    for r in body.results:
        entry: dict[str, Any] = {"topic": str(r.resource_name)}
        if int(r.error_code) != 0:
            entry["error"] = _error_name(r.error_code) + (f" ({r.error_message})" if r.error_message else "")
        else:
            entry["configs"] = {str(c.name): c.value for c in r.configs}
        out.append(entry)
    return sorted(out, key=lambda e: e["topic"])


class _BrokerView:
    """What one broker said about the selected partitions."""

    def __init__(self) -> None:
        self.sizes: dict[TP, int] = {}  # DescribeLogDirs: partition size on this broker's disk
        self.offsets: dict[int, dict[TP, int | str]] = {}  # ListOffsets spec -> offset or error name (leader)
        self.local_start: dict[TP, int | str] = {}  # ListOffsets -4 replica_id -2 (replicas it follows)
        self.http_rows: dict[TP, dict[str, Any]] = {}  # its /v1/tiers rows


def _ask_broker(admin: Any, broker_id: int, partitions: Sequence[dict[str, Any]]) -> _BrokerView:
    view = _BrokerView()
    led = [(p["topic"], p["partition"]) for p in partitions if p["leader"] == broker_id]
    followed = [(p["topic"], p["partition"]) for p in partitions
                if p["leader"] != broker_id and broker_id in p["replicas"]]
    wanted = {(p["topic"], p["partition"]) for p in partitions}
    if wanted:
        body = admin.call_node(broker_id, DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_V, topics=_log_dirs_filter(wanted))
        for result in body.results:
            if int(result.error_code) != 0:
                continue  # an offline log dir: its partitions' sizes stay unknown
            for t in result.topics:
                for part in t.partitions:
                    tp = (str(t.name), int(part.partition_index))
                    if tp in wanted and not part.is_future_key:
                        view.sizes[tp] = view.sizes.get(tp, 0) + int(part.partition_size)
    for spec in LEADER_SPECS:
        view.offsets[spec] = _list_offsets(admin, broker_id, led, spec, CONSUMER)
    view.local_start = _list_offsets(admin, broker_id, followed, EARLIEST_LOCAL, DEBUGGING_CONSUMER)
    return view


def _log_dirs_filter(wanted: Iterable[TP]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(wanted):
        by_topic.setdefault(topic, []).append(partition)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def _list_offsets(admin: Any, broker_id: int, keys: Sequence[TP], spec: int, replica_id: int) -> dict[TP, int | str]:
    """One ListOffsets request for ``spec`` of every partition in ``keys`` (Kafka refuses a partition twice
    in one request); per partition the offset, or the name of the error the broker answered."""
    if not keys:
        return {}
    topics: dict[str, list[dict[str, int]]] = {}
    for topic, partition in keys:
        topics.setdefault(topic, []).append({"partition_index": partition, "current_leader_epoch": -1,
                                             "timestamp": spec})
    body = admin.call_node(broker_id, LIST_OFFSETS, LIST_OFFSETS_V, replica_id=replica_id, isolation_level=0,
                           topics=[{"name": t, "partitions": ps} for t, ps in topics.items()])
    out: dict[TP, int | str] = {}
    for t in body.topics:
        for part in t.partitions:
            code = int(part.error_code)
            out[(str(t.name), int(part.partition_index))] = int(part.offset) if code == 0 else _error_name(code)
    return out


def _read_http(admin: Any, broker_id: int, host: str, timeout_s: float, entry: dict[str, Any],
               view: _BrokerView) -> None:
    """The leader's ``/v1/tiers`` rows into ``view`` when it advertises an endpoint; an endpoint that is
    advertised but unreadable is noted as ``http_error``, one that is not advertised is not an error."""
    from strata.client.wire import WireError

    try:
        http_host, http_port = _metrics_endpoint_of(
            lambda *a, **kw: admin.call_node(broker_id, *a, **kw), host, broker_id)
    except (TiersError, WireError):
        return  # no endpoint (metrics.port -1 or not a Strata broker): the Kafka port's answers are all there is
    try:
        doc = fetch_tiers_http(http_host, http_port, timeout_s)
    except TiersError as e:
        entry["http_error"] = str(e)
        return
    entry["tiers_url"] = _tiers_url(http_host, http_port)
    for row in doc["partitions"]:
        if isinstance(row, dict):
            view.http_rows[(str(row.get("topic")), int(row.get("partition", -1)))] = row


def _merge(p: dict[str, Any], views: Mapping[int, _BrokerView], alive: Mapping[int, Any],
           topic: Mapping[str, Any]) -> None:
    """Fill partition ``p`` in place: the leader's offsets and sizes, its HTTP row, each replica's state."""
    tp = (p["topic"], p["partition"])
    leader = p["leader"]
    leader_view = views.get(leader)
    enabled = (topic.get("configs") or {}).get("remote.storage.enable")
    http_row = leader_view.http_rows.get(tp) if leader_view is not None else None
    if enabled is not None:
        p["remote_storage_enable"] = enabled.lower() == "true"
    elif http_row is not None and "remote_storage_enable" in http_row:
        p["remote_storage_enable"] = bool(http_row["remote_storage_enable"])
    else:
        p["remote_storage_enable"] = None
    if leader < 0:
        p["error"] = "no leader (offline)"
    elif leader_view is None:
        p["error"] = f"leader {leader} " + ("unreachable" if leader in alive else "not in the cluster metadata")
    else:
        answers = {key: leader_view.offsets[spec].get(tp, "no answer") for spec, key in LEADER_SPECS.items()}
        failed = {key: v for key, v in answers.items() if isinstance(v, str)}
        if failed:
            reasons = sorted(set(failed.values()))
            p["error"] = f"ListOffsets to leader {leader}: " + (
                reasons[0] if len(reasons) == 1 else ", ".join(f"{key} {v}" for key, v in failed.items()))
        else:
            p.update(answers)
            p["remote_offsets"] = remote_offsets(p)
        if tp in leader_view.sizes:
            p["local_bytes"] = leader_view.sizes[tp]
        if http_row is not None:
            p.update({k: http_row[k] for k in HTTP_ONLY_KEYS if k in http_row})
    states = []
    for r in p["replicas"]:
        s: dict[str, Any] = {"broker_id": r, "role": "leader" if r == leader else "follower", "in_isr": r in p["isr"],
                             "local_log_start_offset": None, "local_bytes": None}
        view = views.get(r)
        if view is None:
            s["error"] = f"broker {r} " + ("unreachable" if r in alive else "not in the cluster metadata")
        else:
            start = (view.offsets[EARLIEST_LOCAL] if r == leader else view.local_start).get(tp, "no answer")
            if isinstance(start, int):
                s["local_log_start_offset"] = start
            else:
                s["error"] = f"ListOffsets: {start}"
            s["local_bytes"] = view.sizes.get(tp)
            if s["local_bytes"] is None:
                s["error"] = "; ".join(filter(None, [s.get("error"), "no local log (DescribeLogDirs)"]))
        states.append(s)
    p["replica_states"] = states


def remote_offsets(p: Mapping[str, Any]) -> int | None:
    """How many offsets remote storage holds, [log start, latest tiered]; None when not known."""
    start, end = p.get("log_start_offset"), p.get("highest_offset_in_remote_storage")
    if not isinstance(start, int) or not isinstance(end, int) or start < 0:
        return None
    return max(end - start + 1, 0)


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


def _row(p: Mapping[str, Any]) -> tuple[str, ...]:
    leader = p.get("leader")
    head = (str(p.get("topic", "?")), str(p.get("partition", "?")),
            str(leader) if isinstance(leader, int) and leader >= 0 else "-",
            _replica_list(p.get("replicas")), _replica_list(p.get("isr")))
    if "log_start_offset" not in p:  # no tier state: the partition has no leader, or it could not be read
        return head + ("-",) * (len(COLUMNS) - len(head))
    tiered = p.get("remote_storage_enable") is not False  # unknown (no config answer): show what there is

    def remote(text: str) -> str:
        return text if tiered else "-"

    def opt(key: str, fmt: Any = str) -> str:
        value = p.get(key)
        return "-" if value is None else fmt(value)

    span = remote_offsets(p)
    return head + (
        _offset(p.get("log_start_offset")),
        _offset(p.get("local_log_start_offset")),
        remote(_offset(p.get("highest_offset_in_remote_storage"))),
        _offset(p.get("high_watermark", p.get("log_end_offset"))),
        opt("local_segments"),
        opt("local_bytes", format_bytes),
        remote("-" if span is None else str(span)),
        remote(opt("remote_segments")),
        remote(opt("remote_bytes", format_bytes)),
        remote(opt("copy_lag_bytes", format_bytes)),
    )


def format_replica(s: Mapping[str, Any]) -> str:
    """``replica 2 (follower, in ISR): local log start 41200, 3.1 MiB local``; ``?`` for what is unknown."""
    start = s.get("local_log_start_offset")
    size = s.get("local_bytes")
    line = (f"replica {s.get('broker_id')} ({s.get('role')}, {'in' if s.get('in_isr') else 'not in'} ISR): "
            f"local log start {'?' if start is None else start}, {'?' if size is None else format_bytes(size)} local")
    return line + (f" ({s['error']})" if s.get("error") else "")


def _retention(configs: Mapping[str, Any], key: str, fallback: str, fmt: Any) -> str:
    value = configs.get(key)
    text = f"{key}={value}"
    if value == "-2":
        return text + f" (as {fallback}={configs.get(fallback, '?')})"
    if value == "-1":
        return text + " (unlimited)"
    try:
        return text + f" ({fmt(int(value))})" if fmt is not None else text
    except (TypeError, ValueError):
        return text


def format_topic(t: Mapping[str, Any]) -> str | None:
    """A tiered topic's local retention (None for a topic that does not tier), or why its configs are unknown."""
    if t.get("error"):
        return f"topic {t.get('topic')}: configs unknown ({t['error']})"
    configs = t.get("configs") or {}
    if str(configs.get("diskless.enable")).lower() == "true":
        return (f"topic {t.get('topic')}: diskless.enable=true (any broker takes its produce into WAL objects; "
                f"its replicas consolidate them into the remote tier); retention: "
                f"{_retention(configs, 'retention.bytes', '', format_bytes)}, "
                f"{_retention(configs, 'retention.ms', '', None)}")
    if str(configs.get("remote.storage.enable")).lower() != "true":
        return None
    return (f"topic {t.get('topic')}: remote.storage.enable=true; local retention: "
            f"{_retention(configs, 'local.retention.bytes', 'retention.bytes', format_bytes)}, "
            f"{_retention(configs, 'local.retention.ms', 'retention.ms', None)}")


def format_diskless(p: Mapping[str, Any]) -> str:
    """A diskless partition's WAL and consolidation, as the answering broker sees them."""
    wal = format_bytes(p["wal_bytes"]) if "wal_bytes" in p else "?"
    text = f"diskless: {wal} in WAL objects"
    if "wal_start_offset" in p:
        text += f" from offset {p['wal_start_offset']}"
    if "consolidated_offset" in p:
        text += f"; consolidated into the local log up to offset {p['consolidated_offset']}"
    else:
        text += "; no consolidated replica on the answering broker"
    return text


def format_table(payload: Mapping[str, Any]) -> str:
    """The table ``strata tiers`` prints: a row per partition followed by a line per replica, a line per
    tiered topic, then a warning line per partition without a leader (or whose leader could not be read)
    and per partition whose last copy failed or whose remote segments the leader's scrubber found damaged.

    Columns for remote storage show ``-`` on partitions without ``remote.storage.enable``; an
    offset of -1 (nothing uploaded yet) shows ``-`` too; a partition without tier state (no
    leader, or its leader could not be read) shows ``-`` in every tier column; a value the brokers
    did not give (sizes without an admin HTTP endpoint) shows ``-``.
    """
    partitions = sorted(payload.get("partitions", []), key=lambda p: (str(p.get("topic", "")), p.get("partition", 0)))
    if not partitions:
        return "no partitions\n"
    rows = [COLUMNS, *(_row(p) for p in partitions)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]

    def line(r: Sequence[str]) -> str:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        return "  ".join(cells).rstrip()

    lines = [line(COLUMNS)]
    for p, r in zip(partitions, rows[1:], strict=True):
        lines.append(line(r))
        if p.get("diskless"):  # leaderless: its replicas consolidate from the WAL rather than follow a leader
            lines.append("  " + format_diskless(p))
        lines.extend("  " + format_replica(s) for s in p.get("replica_states") or ())
    for t in payload.get("topics", []):
        text = format_topic(t)
        if text:
            lines.append(text)
    for p in partitions:
        name = f"{p.get('topic')}-{p.get('partition')}"
        if isinstance(p.get("leader"), int) and p["leader"] < 0:
            lines.append(f"WARNING: {name}: no leader (offline)")
        elif p.get("error"):
            lines.append(f"WARNING: {name}: {p['error']}")
        error = p.get("last_copy_error")
        if error:
            lines.append(f"WARNING: {name}: last copy to remote storage failed: {error}")
        if (scrub := format_scrub(p.get("scrub"))) is not None:
            lines.append(f"WARNING: {name}: {scrub}")
    return "\n".join(lines) + "\n"


def format_scrub(scrub: Any) -> str | None:
    """The leader's scrubber findings in a partition's remote segments, as one line (None: none found)."""
    if not isinstance(scrub, Mapping) or not scrub.get("findings"):
        return None
    n = int(scrub["findings"])
    text = f"the remote log scrubber found {n} damaged or missing object{'s' if n != 1 else ''} in remote storage"
    problems = scrub.get("problems") or []
    if problems and isinstance(problems[0], Mapping):
        first = problems[0]
        text += (f"; first: segment {first.get('segment_id')} (offsets {first.get('start_offset')}-"
                 f"{first.get('end_offset')}): {first.get('kind')} {first.get('key')}: {first.get('detail')}")
    return text + " (the leader's log has one WARNING per finding)"
