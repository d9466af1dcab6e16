"""``strata transactions``: open transactions where an operator looks for a stuck last stable offset.

A ``read_committed`` consumer that stops making progress, or a tiered partition that stops uploading,
usually has one cause: a transaction that stays open, holding the partition's last stable offset (LSO)
at its first offset. This command shows, over the Kafka port only (so it works against any broker):

* per partition (**Metadata** for the leaders; the brokers' answers below go to each leader, one request
  per API for all the partitions it leads): the **high watermark** (ListOffsets -1, read_uncommitted),
  the **LSO** (ListOffsets -1 with ``isolation_level`` 1, read_committed), and the partition's open
  transactions from **DescribeProducers** (KIP-664): producer id and epoch, first offset, and how long
  ago the producer last wrote (its ``last_timestamp``);
* the coordinators' view: **ListTransactions** to every broker (each coordinates its own ids) and
  **DescribeTransactions** to the broker that listed them: transactional id, state, producer id and
  epoch, timeout, start time and partitions.

The two are joined on the producer id: an open transaction on a partition is shown with its
transactional id when a coordinator lists that producer with the partition in an open transaction. The
age of the oldest open transaction of a partition (the one whose first offset is the LSO) is the
coordinator's start time when it knows the transaction, else the time since its producer last wrote (a
lower bound, what Kafka's ``kafka-transactions.sh find-hanging`` uses). A partition whose LSO has been
held longer than ``--stuck-after-ms`` (default Kafka's ``transaction.max.timeout.ms``, 15 minutes: no
transaction may legitimately last longer) is flagged as a possible hanging transaction; when no
coordinator knows the transaction it is a hanging one in Kafka's sense (``find-hanging`` would list it).

Exit code 0, or 1 when a broker could not be reached (named on stderr; the rest is still printed).
``--json`` prints ``brokers``, ``partitions`` (each with ``open_transactions``) and ``transactions``.

This module is imported when the CLI parser is built, so it imports kio (through
:mod:`strata.client.wire`) only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from strata.tools.args import non_negative_int

DEFAULT_BOOTSTRAP = "localhost:9092"
TIMEOUT_S = 10.0
DEFAULT_STUCK_AFTER_MS = 900_000  # Kafka's transaction.max.timeout.ms default
LIST_OFFSETS, LIST_OFFSETS_V = 2, 7
DESCRIBE_PRODUCERS, DESCRIBE_PRODUCERS_V = 61, 0
DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_V = 65, 0
LIST_TRANSACTIONS, LIST_TRANSACTIONS_V = 66, 0
LATEST = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})

COLUMNS = ("TOPIC", "PARTITION", "LEADER", "HIGH-WATERMARK", "LSO", "OPEN-TXNS", "OLDEST-TXN-AGE", "STATUS")
TXN_COLUMNS = ("TRANSACTIONAL-ID", "COORDINATOR", "STATE", "PRODUCER-ID", "EPOCH", "TIMEOUT-MS", "AGE",
               "PARTITIONS")

TP = tuple[str, int]


class TransactionsError(Exception):
    """A failure to report to the user as one line (exit code 1)."""


def add_transactions_parser(subparsers: Any,
                            parents: Sequence[argparse.ArgumentParser] = ()) -> argparse.ArgumentParser:
    """Add ``transactions`` to the ``strata`` subcommands (``parents``: shared options such as ``-v``)."""
    p = subparsers.add_parser(
        "transactions", parents=list(parents),
        help="show open transactions per partition (LSO vs high watermark) and the coordinators' view",
        description="Show, per partition, its leader, high watermark and last stable offset (LSO), the open "
                    "transactions holding the LSO (DescribeProducers: producer id, epoch, first offset, time "
                    "since the producer last wrote) and flag a partition whose LSO has been held longer than "
                    "--stuck-after-ms as a possible hanging transaction; then every transactional id the "
                    "coordinators know (ListTransactions + DescribeTransactions). Needs only the Kafka port.",
    )
    p.add_argument("--bootstrap", "--bootstrap-server", dest="bootstrap", default=DEFAULT_BOOTSTRAP,
                   metavar="HOST:PORT", help=f"the brokers' Kafka listener, a comma list (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--topic", default=None, help="only this topic's partitions")
    p.add_argument("--all", action="store_true", dest="show_internal",
                   help="include internal topics (__consumer_offsets holds transactional offset commits)")
    p.add_argument("--open-only", action="store_true",
                   help="only partitions with an open transaction (or an LSO below the high watermark) and only "
                        "open transactions (Ongoing, PrepareCommit, PrepareAbort, PrepareEpochFence)")
    p.add_argument("--stuck-after-ms", type=non_negative_int, default=DEFAULT_STUCK_AFTER_MS, metavar="MS",
                   help="flag a partition whose LSO has been held longer than this (default "
                        f"{DEFAULT_STUCK_AFTER_MS}, Kafka's transaction.max.timeout.ms)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, metavar="SECONDS",
                   help=f"network timeout (default {TIMEOUT_S:g})")
    p.add_argument("--command-config", metavar="FILE", default=None,
                   help="client properties for a secured listener, as Kafka's tools take them: security.protocol, "
                        "sasl.mechanism, sasl.jaas.config, ssl.truststore.location... (docs/tools.md)")
    p.set_defaults(func=_cmd_transactions, command_parser=p)
    return p


def _cmd_transactions(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    return main_transactions(args)


def main_transactions(args: argparse.Namespace) -> int:
    """Run ``strata transactions``; 0 on success, 1 with one line per problem on stderr otherwise."""
    from strata.tools.kafka_cli import command_config_security

    topic = getattr(args, "topic", None)
    try:
        payload = fetch_transactions(
            args.bootstrap, getattr(args, "timeout", TIMEOUT_S), topic=topic,
            include_internal=topic is not None or getattr(args, "show_internal", False),
            stuck_after_ms=getattr(args, "stuck_after_ms", DEFAULT_STUCK_AFTER_MS),
            security=command_config_security(args, TransactionsError))
    except TransactionsError as e:
        print(f"strata transactions: {e}", file=sys.stderr)
        return 1
    if topic is not None and not payload["partitions"]:
        print(f"strata transactions: topic {topic!r} not found", file=sys.stderr)
        return 1
    for b in payload["brokers"]:
        if b.get("error"):
            print(f"strata transactions: broker {b['broker_id']}: {b['error']}", file=sys.stderr)
    if getattr(args, "open_only", False):
        payload = open_only(payload)
    if args.json:
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_report(payload))
    return 1 if any(b.get("error") for b in payload["brokers"]) else 0


# -- talking to the brokers ---------------------------------------------------------------------

def fetch_transactions(bootstrap: str, timeout_s: float = TIMEOUT_S, *, topic: str | None = None,
                       include_internal: bool = False, stuck_after_ms: int = DEFAULT_STUCK_AFTER_MS,
                       now_ms: Callable[[], int] | None = None, security: Any = None) -> dict[str, Any]:
    """``{"brokers", "partitions", "transactions", "stuck_after_ms", "now_ms"}`` (the module docstring says
    from where). A broker that cannot be reached has an ``error``; its partitions carry an ``error`` and
    no offsets. Raises TransactionsError when no bootstrap broker can be reached. ``security``: a
    :class:`strata.client.security.ClientSecurity` for a secured listener."""
    from strata.client.wire import WireError
    from strata.tools.admin import KafkaAdmin
    from strata.tools.kafka_cli import unreachable

    clock = now_ms or (lambda: int(time.time() * 1000))
    try:
        admin = KafkaAdmin(bootstrap, timeout_s, client_id="strata-transactions", security=security)
    except WireError as e:
        raise TransactionsError(unreachable(e)) from None
    with admin:
        try:
            state = admin.cluster(None if topic is None else [topic])
        except WireError as e:
            raise TransactionsError(unreachable(e)) from None
        partitions = _partitions(state, topic, include_internal)
        brokers: list[dict[str, Any]] = []
        transactions: list[dict[str, Any]] = []
        answers: dict[int, _Answers] = {}
        for broker_id in sorted(state.brokers):
            host, port = state.brokers[broker_id]
            entry: dict[str, Any] = {"broker_id": broker_id, "host": host, "port": port}
            brokers.append(entry)
            led = [(p["topic"], p["partition"]) for p in partitions if p["leader"] == broker_id]
            try:
                answers[broker_id] = _ask_leader(admin, broker_id, led)
                transactions += _coordinator_view(admin, broker_id, entry)
            except WireError as e:
                entry["error"] = unreachable(e)
        now = clock()
    by_producer = _open_by_producer(transactions)
    # "no coordinator lists it" means something only when every coordinator answered
    complete = not any(b.get("error") or b.get("coordinator_error") for b in brokers)
    for p in partitions:
        _merge(p, answers, state.brokers, by_producer, now, stuck_after_ms, complete)
    for t in transactions:
        start = t.get("transaction_start_time_ms", -1)
        t["age_ms"] = now - start if isinstance(start, int) and start >= 0 else None
    transactions.sort(key=lambda t: (t["transactional_id"], t["coordinator"]))
    return {"now_ms": now, "stuck_after_ms": stuck_after_ms, "brokers": brokers, "partitions": partitions,
            "transactions": transactions}


def _partitions(state: Any, topic: str | None, include_internal: bool) -> list[dict[str, Any]]:
    out = []
    for t in sorted(state.topics.values(), key=lambda t: str(t.name)):
        name = str(t.name)
        if (topic is not None and name != topic) or (
                not include_internal and (t.internal or name.startswith("__"))):
            continue
        for p in t.partitions:
            out.append({"topic": name, "partition": p.partition, "leader": p.leader})
    return out


class _Answers:
    """What one leader said about the partitions it leads."""

    def __init__(self) -> None:
        self.high_watermark: dict[TP, int | str] = {}
        self.lso: dict[TP, int | str] = {}
        self.producers: dict[TP, list[dict[str, int]] | str] = {}


def _ask_leader(admin: Any, broker_id: int, led: Sequence[TP]) -> _Answers:
    out = _Answers()
    if not led:
        return out
    out.high_watermark = _list_offsets(admin, broker_id, led, READ_UNCOMMITTED)
    out.lso = _list_offsets(admin, broker_id, led, READ_COMMITTED)
    from strata.client.wire import WireError

    try:
        body = admin.call_node(broker_id, DESCRIBE_PRODUCERS, DESCRIBE_PRODUCERS_V, topics=[
            {"name": t, "partition_indexes": ps} for t, ps in _by_topic(led).items()])
    except WireError as e:  # a broker without KIP-664 closes the connection: its offsets are still worth showing
        out.producers = dict.fromkeys(led, f"failed ({e})")
        return out
    for t in body.topics:
        for part in t.partitions:
            tp = (str(t.name), int(part.partition_index))
            code = int(part.error_code)
            if code != 0:
                out.producers[tp] = _error_name(code) + (f" ({part.error_message})" if part.error_message else "")
                continue
            out.producers[tp] = [
                {"producer_id": int(s.producer_id), "producer_epoch": int(s.producer_epoch),
                 "last_sequence": int(s.last_sequence), "last_timestamp": int(s.last_timestamp),
                 "coordinator_epoch": int(s.coordinator_epoch),
                 "current_txn_start_offset": int(s.current_txn_start_offset)}
                for s in part.active_producers]
    return out


def _by_topic(keys: Iterable[TP]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(set(keys)):
        out.setdefault(topic, []).append(partition)
    return out


def _list_offsets(admin: Any, broker_id: int, keys: Sequence[TP], isolation: int) -> dict[TP, int | str]:
    """ListOffsets -1 of every partition in ``keys``: the high watermark (read_uncommitted) or the LSO
    (read_committed); per partition the offset or the name of the broker's error."""
    body = admin.call_node(broker_id, LIST_OFFSETS, LIST_OFFSETS_V, replica_id=-1, isolation_level=isolation,
                           topics=[{"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                                               "timestamp": LATEST} for p in ps]}
                                   for t, ps in _by_topic(keys).items()])
    out: dict[TP, int | str] = {}
    for t in body.topics:
        for part in t.partitions:
            code = int(part.error_code)
            out[(str(t.name), int(part.partition_index))] = int(part.offset) if code == 0 else _error_name(code)
    return out


def _coordinator_view(admin: Any, broker_id: int, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The transactional ids broker ``broker_id`` coordinates, described; a coordinator that cannot answer
    (loading, not available) is noted in ``entry["coordinator_error"]``."""
    listed = admin.call_node(broker_id, LIST_TRANSACTIONS, LIST_TRANSACTIONS_V, state_filters=[],
                             producer_id_filters=[])
    if int(listed.error_code) != 0:
        entry["coordinator_error"] = f"ListTransactions: {_error_name(listed.error_code)}"
        return []
    listing = {str(t.transactional_id): t for t in listed.transaction_states}
    ids = sorted(listing)
    if not ids:
        return []
    from strata.client.wire import WireError

    try:
        states = list(admin.call_node(broker_id, DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_V,
                                      transactional_ids=ids).transaction_states)
    except WireError:
        # one id the broker cannot describe, or kio cannot decode (it refuses the -1 start time of an id that
        # never began a transaction), fails the whole batch: ask id by id, and keep what ListTransactions said
        # of an id that cannot be described (a broker that went down fails the ListTransactions again: raised)
        states = []
        for tid in ids:
            try:
                states += admin.call_node(broker_id, DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_V,
                                          transactional_ids=[tid]).transaction_states
            except WireError as e:
                admin.call_node(broker_id, LIST_TRANSACTIONS, LIST_TRANSACTIONS_V, state_filters=[],
                                producer_id_filters=[])
                t = listing[tid]
                states.append(_Undescribed(tid, str(t.transaction_state), int(t.producer_id), str(e)))
    out = []
    for s in states:
        if isinstance(s, _Undescribed):
            listed_only: dict[str, Any] = {"transactional_id": s.transactional_id, "coordinator": broker_id,
                                           "state": s.state, "producer_id": s.producer_id, "partitions": []}
            if s.state != "Empty":  # an Empty one has nothing more to say: no transaction, no partitions
                listed_only["error"] = (f"DescribeTransactions failed ({s.error}); state and producer id from "
                                        "ListTransactions")
            out.append(listed_only)
            continue
        t: dict[str, Any] = {"transactional_id": str(s.transactional_id), "coordinator": broker_id}
        code = int(s.error_code)
        if code != 0:  # it moved or expired between the two requests
            t["error"] = _error_name(code)
        else:
            t.update({"state": str(s.transaction_state), "producer_id": int(s.producer_id),
                      "producer_epoch": int(s.producer_epoch),
                      "transaction_timeout_ms": _millis(s.transaction_timeout),
                      "transaction_start_time_ms": _epoch_millis(s.transaction_start_time),
                      "partitions": [[str(tp.topic), int(p)] for tp in s.topics for p in tp.partitions]})
        out.append(t)
    return out


class _Undescribed:
    """An id ListTransactions listed but DescribeTransactions could not describe."""

    def __init__(self, transactional_id: str, state: str, producer_id: int, error: str) -> None:
        self.transactional_id = transactional_id
        self.state = state
        self.producer_id = producer_id
        self.error = error


def _millis(value: Any) -> int:
    """kio gives int32 durations as timedeltas."""
    total = getattr(value, "total_seconds", None)
    return int(round(total() * 1000)) if total is not None else int(value)


def _epoch_millis(value: Any) -> int:
    """kio gives int64 epoch millis as aware datetimes, -1 (none) as None."""
    if value is None:
        return -1
    ts = getattr(value, "timestamp", None)
    return int(round(ts() * 1000)) if ts is not None else int(value)


def _error_name(code: Any) -> str:
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(int(code)).name.upper()
    except ValueError:
        return f"error {int(code)}"


# -- joining ------------------------------------------------------------------------------------

def _open_by_producer(transactions: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    out: dict[int, list[Mapping[str, Any]]] = {}
    for t in transactions:
        if t.get("state") in OPEN_STATES:
            out.setdefault(int(t["producer_id"]), []).append(t)
    return out


def _merge(p: dict[str, Any], answers: Mapping[int, _Answers], alive: Mapping[int, Any],
           by_producer: Mapping[int, list[Mapping[str, Any]]], now: int, stuck_after_ms: int,
           coordinators_complete: bool = True) -> None:
    """Fill partition ``p`` in place: offsets, open transactions (joined with the coordinators' view), status."""
    tp = (p["topic"], p["partition"])
    leader = p["leader"]
    view = answers.get(leader)
    p["open_transactions"] = []
    if leader < 0:
        p["error"] = "no leader (offline)"
        return
    if view is None:
        p["error"] = f"leader {leader} " + ("unreachable" if leader in alive else "not in the cluster metadata")
        return
    errors = []
    for key, got in (("high_watermark", view.high_watermark.get(tp, "no answer")),
                     ("last_stable_offset", view.lso.get(tp, "no answer"))):
        if isinstance(got, int):
            p[key] = got
        else:
            errors.append(f"ListOffsets {key}: {got}")
    producers = view.producers.get(tp, "no answer")
    if isinstance(producers, str):
        errors.append(f"DescribeProducers: {producers}")
        producers = []
    if errors:
        p["error"] = "; ".join(errors)
    p["producer_count"] = len(producers)
    for s in sorted((s for s in producers if s["current_txn_start_offset"] >= 0),
                    key=lambda s: s["current_txn_start_offset"]):
        txn = dict(s)
        last = s["last_timestamp"]
        txn["last_write_age_ms"] = now - last if last >= 0 else None
        known = [t for t in by_producer.get(s["producer_id"], ())
                 if [p["topic"], p["partition"]] in t.get("partitions", [])]
        if known:
            t = known[0]
            txn.update({"transactional_id": t["transactional_id"], "state": t["state"],
                        "coordinator": t["coordinator"]})
            start = t.get("transaction_start_time_ms", -1)
            txn["transaction_age_ms"] = now - start if start >= 0 else None
        p["open_transactions"].append(txn)
    _status(p, stuck_after_ms, coordinators_complete)


def _status(p: dict[str, Any], stuck_after_ms: int, coordinators_complete: bool) -> None:
    """The oldest open transaction's age (what holds the LSO) and whether it looks stuck."""
    txns = p["open_transactions"]
    if not txns:
        p["oldest_transaction_age_ms"] = None
        p["stuck"] = False
        return
    oldest = txns[0]  # sorted by first offset: the one whose first offset is the LSO
    age = oldest.get("transaction_age_ms")
    if age is None:
        age = oldest.get("last_write_age_ms")
    p["oldest_transaction_age_ms"] = age
    p["stuck"] = age is not None and age > stuck_after_ms
    p["hanging"] = p["stuck"] and coordinators_complete and "transactional_id" not in oldest


def open_only(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` with only the partitions that have an open transaction (or an LSO below the high
    watermark, or an error) and only the open transactions of the coordinators."""
    def keep(p: Mapping[str, Any]) -> bool:
        hw, lso = p.get("high_watermark"), p.get("last_stable_offset")
        return bool(p.get("open_transactions")) or bool(p.get("error")) or (
            isinstance(hw, int) and isinstance(lso, int) and lso < hw)

    return {**payload, "partitions": [p for p in payload.get("partitions", []) if keep(p)],
            "transactions": [t for t in payload.get("transactions", [])
                             if t.get("state") in OPEN_STATES or (t.get("error") and not t.get("state"))]}


# -- formatting ---------------------------------------------------------------------------------

def format_duration(ms: int | float | None) -> str:
    """``850ms``, ``12.3s``, ``5m12s``, ``2h03m``, ``3d04h``; ``-`` when unknown."""
    if ms is None:
        return "-"
    ms = max(0, int(ms))
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    s = ms // 1000
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86_400}d{s % 86_400 // 3600:02d}h"


def _offset(value: Any) -> str:
    return str(value) if isinstance(value, int) and value >= 0 else "-"


def _status_text(p: Mapping[str, Any]) -> str:
    if p.get("error"):
        return "ERROR"
    if p.get("hanging"):
        return "HANGING?"
    if p.get("stuck"):
        return "STUCK?"
    return "open" if p.get("open_transactions") else "ok"


def _row(p: Mapping[str, Any]) -> tuple[str, ...]:
    leader = p.get("leader")
    return (str(p.get("topic", "?")), str(p.get("partition", "?")),
            str(leader) if isinstance(leader, int) and leader >= 0 else "-",
            _offset(p.get("high_watermark")), _offset(p.get("last_stable_offset")),
            str(len(p.get("open_transactions") or ())) if "producer_count" in p else "-",
            format_duration(p.get("oldest_transaction_age_ms")), _status_text(p))


def format_open_transaction(t: Mapping[str, Any]) -> str:
    """``producer 1000 epoch 0: first offset 3, last write 12.3s ago; transactional id orders (Ongoing, 14.0s)``."""
    line = (f"producer {t.get('producer_id')} epoch {t.get('producer_epoch')}: first offset "
            f"{t.get('current_txn_start_offset')}, last write {format_duration(t.get('last_write_age_ms'))} ago")
    if t.get("transactional_id") is not None:
        line += (f"; transactional id {t['transactional_id']} ({t.get('state')} on coordinator "
                 f"{t.get('coordinator')}, open {format_duration(t.get('transaction_age_ms'))})")
    else:
        line += "; no coordinator lists it"
    return line


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]], left: Iterable[int]) -> list[str]:
    """Aligned columns: those in ``left`` (text) to the left, the others (numbers) to the right."""
    table = [tuple(columns), *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    lefts = set(left)

    def line(r: Sequence[str]) -> str:
        cells = [c.ljust(w) if i in lefts else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        return "  ".join(cells).rstrip()

    return [line(r) for r in table]


def _txn_row(t: Mapping[str, Any]) -> tuple[str, ...]:
    def opt(key: str) -> str:
        value = t.get(key)
        return "-" if value is None else str(value)

    parts = ",".join(f"{topic}-{p}" for topic, p in t.get("partitions") or ()) or "-"
    state = t.get("state")
    return (str(t.get("transactional_id")), opt("coordinator"), str(state) if state else "?", opt("producer_id"),
            opt("producer_epoch"), opt("transaction_timeout_ms"),
            format_duration(t.get("age_ms")) if state in OPEN_STATES else "-", parts)


def format_report(payload: Mapping[str, Any]) -> str:
    """The partition table (each row followed by its open transactions), the coordinators' table, then a
    warning per partition whose LSO looks stuck (or that could not be read)."""
    partitions = sorted(payload.get("partitions", []), key=lambda p: (str(p.get("topic", "")), p.get("partition", 0)))
    lines: list[str] = []
    if partitions:
        table = _table(COLUMNS, [_row(p) for p in partitions], left=(0, len(COLUMNS) - 1))
        lines.append(table[0])
        for p, row in zip(partitions, table[1:], strict=True):
            lines.append(row)
            lines.extend("  " + format_open_transaction(t) for t in p.get("open_transactions") or ())
    else:
        lines.append("no partitions")
    lines.append("")
    transactions = payload.get("transactions", [])
    if transactions:
        lines.extend(_table(TXN_COLUMNS, [_txn_row(t) for t in transactions], left=(0, 2, len(TXN_COLUMNS) - 1)))
    else:
        lines.append("no transactional ids")
    for t in transactions:
        if t.get("error"):
            lines.append(f"WARNING: transactional id {t.get('transactional_id')} (coordinator {t.get('coordinator')}): "
                         f"{t['error']}")
    for b in payload.get("brokers", []):
        if b.get("coordinator_error"):
            lines.append(f"WARNING: coordinator {b['broker_id']}: {b['coordinator_error']}")
    stuck_after = payload.get("stuck_after_ms", DEFAULT_STUCK_AFTER_MS)
    for p in partitions:
        name = f"{p.get('topic')}-{p.get('partition')}"
        if p.get("error"):
            lines.append(f"WARNING: {name}: {p['error']}")
        if p.get("stuck"):
            oldest = p["open_transactions"][0]
            if oldest.get("transactional_id") is not None:
                who = f"transactional id {oldest['transactional_id']} ({oldest.get('state')})"
            elif p.get("hanging"):
                who = ("no coordinator lists it: a hanging transaction (kafka-transactions.sh find-hanging would "
                       "list it; its leader aborts it once its producer is silent for transaction.max.timeout.ms)")
            else:
                who = "not found in the coordinators that answered"
            lines.append(f"WARNING: {name}: LSO held at {p.get('last_stable_offset')} for at least "
                         f"{format_duration(p.get('oldest_transaction_age_ms'))} (more than --stuck-after-ms "
                         f"{stuck_after}) by producer {oldest.get('producer_id')} epoch "
                         f"{oldest.get('producer_epoch')}: possible hanging transaction; {who}")
    return "\n".join(lines) + "\n"
