"""``strata tiers``: where each partition's data lives, local disk or remote storage.

The broker publishes the view at ``GET /v1/tiers`` on its admin HTTP port. The tool only knows
the Kafka bootstrap address, like every other Kafka tool, so it first asks the broker where that
port is: Metadata gives the node id of the broker it is talking to, and DescribeConfigs on that
BROKER resource gives ``metrics.host`` and ``metrics.port`` (the broker reports the port it
actually bound). Then it fetches the JSON and prints one row per partition.

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

COLUMNS = ("TOPIC", "PARTITION", "LOG-START", "LOCAL-START", "REMOTE-END", "END", "LOCAL-SEGS", "LOCAL-BYTES",
           "REMOTE-SEGS", "REMOTE-BYTES", "COPY-LAG")


class TiersError(Exception):
    """A failure to report to the user as one line (exit code 1)."""


def add_tiers_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> argparse.ArgumentParser:
    """Add ``tiers`` to the ``strata`` subcommands (``parents``: shared options such as ``-v``)."""
    p = subparsers.add_parser(
        "tiers", parents=list(parents), help="show local and remote (tiered) storage per partition",
        description="Show, per partition, the offsets and sizes held on local disk and in remote storage, and "
                    "what is not yet uploaded. Reads the broker's admin HTTP endpoint (metrics.port), found "
                    "through the Kafka bootstrap address.",
    )
    p.add_argument("--bootstrap", "--bootstrap-server", dest="bootstrap", default=DEFAULT_BOOTSTRAP,
                   metavar="HOST:PORT", help=f"the broker's Kafka listener (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--topic", default=None, help="only this topic's partitions")
    p.add_argument("--all", action="store_true", dest="show_internal",
                   help="include internal topics (__consumer_offsets, __remote_log_metadata)")
    p.add_argument("--json", action="store_true", help="print the broker's JSON instead of a table")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, metavar="SECONDS",
                   help=f"network timeout (default {TIMEOUT_S:g})")
    p.set_defaults(func=_cmd_tiers, command_parser=p)
    return p


def _cmd_tiers(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    return main_tiers(args)


def main_tiers(args: argparse.Namespace) -> int:
    """Run ``strata tiers``; 0 on success, 1 with a one-line message on stderr otherwise."""
    timeout = getattr(args, "timeout", TIMEOUT_S)
    try:
        payload = fetch_tiers(args.bootstrap, timeout)
    except TiersError as e:
        print(f"strata tiers: {e}", file=sys.stderr)
        return 1
    topic = getattr(args, "topic", None)
    if topic is not None:
        payload = {**payload, "partitions": [p for p in payload["partitions"] if p.get("topic") == topic]}
        if not payload["partitions"]:
            print(f"strata tiers: topic {topic!r} has no partitions on broker {payload.get('broker_id')}",
                  file=sys.stderr)
            return 1
    elif not getattr(args, "show_internal", False):
        payload = {**payload, "partitions": [p for p in payload["partitions"]
                                             if not str(p.get("topic", "")).startswith("__")]}
    if args.json:
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_table(payload))
    return 0


# -- talking to the broker ----------------------------------------------------------------------

def metrics_endpoint(bootstrap: str, timeout_s: float = TIMEOUT_S) -> tuple[str, int]:
    """(host, port) of the admin HTTP endpoint of the broker at ``bootstrap``."""
    from strata.client.wire import KafkaWire, WireError

    try:
        with KafkaWire(bootstrap, timeout_s) as conn:
            node_id = _connected_node_id(conn, conn.host, conn.port)
            resp = conn.call(DESCRIBE_CONFIGS, 1, include_synonyms=False, resources=[
                {"resource_type": RESOURCE_BROKER, "resource_name": str(node_id),
                 "configuration_keys": ["metrics.port", "metrics.host"]}])
            host = conn.host
    except WireError as e:
        raise TiersError(f"broker unreachable: {e}") from None
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
    # a wildcard bind address is not something to connect to: the bootstrap host reaches it too
    return (host if metrics_host in _WILDCARD_HOSTS else metrics_host), port


def _connected_node_id(conn: Any, host: str, port: int) -> int:
    """The node id of the broker behind this connection (DescribeConfigs BROKER must name it)."""
    meta = conn.call(METADATA, 1, topics=[])
    brokers = list(meta.brokers)
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
    raise TiersError(f"cannot tell which of brokers {sorted(int(b.node_id) for b in brokers)} is at {host}:{port}: "
                     "use the broker's advertised address as --bootstrap")


def fetch_tiers(bootstrap: str, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """The ``/v1/tiers`` document of the broker at ``bootstrap``."""
    host, port = metrics_endpoint(bootstrap, timeout_s)
    return fetch_tiers_http(host, port, timeout_s)


def fetch_tiers_http(host: str, port: int, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """GET ``/v1/tiers`` from the admin endpoint directly (no Kafka round trip)."""
    url_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    url = f"http://{url_host}:{port}/v1/tiers"
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


def _row(p: dict[str, Any]) -> tuple[str, ...]:
    tiered = bool(p.get("remote_storage_enable", False))

    def remote(text: str) -> str:
        return text if tiered else "-"

    return (
        str(p.get("topic", "?")),
        str(p.get("partition", "?")),
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
    """The table ``strata tiers`` prints, with a warning line per partition whose last copy failed.

    Columns for remote storage show ``-`` on partitions without ``remote.storage.enable``; an
    offset of -1 (nothing uploaded yet) shows ``-`` too.
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
        error = p.get("last_copy_error")
        if error:
            lines.append(f"WARNING: {p.get('topic')}-{p.get('partition')}: last copy to remote storage failed: {error}")
    return "\n".join(lines) + "\n"
