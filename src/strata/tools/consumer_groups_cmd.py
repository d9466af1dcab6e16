"""``strata consumer-groups`` (``kafka-consumer-groups.sh``): list, describe, reset, delete groups.

Kafka 4.2's ``ConsumerGroupCommand`` over the Kafka protocol, with its flags, checks and tables, for
classic groups and KIP-848 consumer groups alike (a group is described as the admin client's
describeConsumerGroups does: ConsumerGroupDescribe, then DescribeGroups for a classic group):
``--describe`` shows per partition the committed offset, the log end offset and the lag
(``GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID``, with
``LEADER-EPOCH`` after ``PARTITION`` under ``--verbose``), or the members (``--members [--verbose]``:
then each member's ``CURRENT-EPOCH CURRENT-ASSIGNMENT TARGET-EPOCH TARGET-ASSIGNMENT``, and ``UPGRADED``
in a group with members of both protocols) or the state (``--state [--verbose]``: then ``GROUP-EPOCH
TARGET-ASSIGNMENT-EPOCH``); ``--list`` names the groups, with ``TYPE`` (Classic, Consumer) and ``STATE``
columns under ``--type``/``--state``; ``--reset-offsets`` plans new
offsets (``--to-earliest``, ``--to-latest``, ``--to-datetime``, ``--to-offset``, ``--shift-by``,
``--by-duration``, ``--to-current``, ``--from-file``) for ``--all-topics`` or ``--topic t[:0,1]``,
prints them, and commits them only with ``--execute``, and only while the group is inactive.

One difference on purpose: where Kafka prints ``Error: ...`` and still exits 0 (an unknown group,
a reset refused because the group is active), this command exits 1 so that scripts can tell.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from strata.client.cluster import KafkaClientError
from strata.client.wire import WireError
from strata.tools.admin import AdminError, GroupDescription, KafkaAdmin
from strata.tools.kafka_cli import UsageError, has, invalid_with, open_admin, refuse_zookeeper, require, usage_exit

ACTIONS = ("list", "describe", "delete", "reset-offsets", "delete-offsets")
SCENARIOS = ("to-offset", "shift-by", "to-datetime", "by-duration", "to-earliest", "to-latest", "to-current",
             "from-file")
MISSING = "-"
EARLIEST, LATEST = -2, -1
INACTIVE = ("Empty", "Dead")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
TYPES = ("Consumer", "Classic")

TP = tuple[str, int]


class GroupCommandError(Exception):
    """A failure Kafka reports as ``Error: <message>`` on stdout; exit code 1."""


def check_args(args: argparse.Namespace) -> None:
    """ConsumerGroupCommandOptions.checkArgs, then the one-action check of ``main``."""
    require(args, "bootstrap-server")
    for option, attr, allowed in (("members", "members", ("describe",)), ("verbose", "members_verbose", ("describe",)),
                                  ("offsets", "offsets", ("describe",)), ("state", "state", ("describe", "list")),
                                  ("type", "type", ("list",))):
        if has(args, attr) and not any(has(args, a) for a in allowed):
            raise UsageError(f"Option(s) [{option}] are unavailable given other options on the command line")
    if args.describe:
        if not args.group and not args.all_groups:
            raise UsageError("Option [describe] takes one of these options: [group], [all-groups]")
        if sum(has(args, o) for o in ("members", "offsets", "state")) > 1:
            raise UsageError("Option [describe] takes at most one of these options: [members], [offsets], [state]")
        if args.state:  # a value (--state alone is the empty string)
            raise UsageError("Option [describe] does not take a value for [state]")
    if args.delete:
        if not args.group and not args.all_groups:
            raise UsageError("Option [delete] takes one of these options: [group], [all-groups]")
        if args.topic:
            raise UsageError("The consumer does not support topic-specific offset deletion from a consumer group.")
    if args.delete_offsets and (not args.group or not args.topic):
        raise UsageError("Option [delete-offsets] takes the following options: [group], [topic]")
    if args.reset_offsets:
        if args.dry_run and args.execute:
            raise UsageError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        if not args.dry_run and not args.execute:
            print("WARN: No action will be performed as the --execute option is missing. In a future major release, "
                  "the default behavior of this command will be to prompt the user before executing the reset rather "
                  "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
                  "command and want to keep the current default behavior without prompting.", file=sys.stderr)
        if not args.group and not args.all_groups:
            raise UsageError("Option [reset-offsets] takes one of these options: [group], [all-groups]")
        for scenario in SCENARIOS:
            invalid_with(args, scenario, [s for s in SCENARIOS if s != scenario])
    invalid_with(args, "group", ["all-groups"])
    invalid_with(args, "group", ["list"])
    invalid_with(args, "topic", ["list", "describe"])
    if sum(has(args, a) for a in ACTIONS) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                         "--delete-offsets")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if refuse_zookeeper(args, "kafka-consumer-groups.sh"):
        return 1
    try:
        check_args(args)
        admin = open_admin(args)
    except UsageError as e:
        return usage_exit(parser, str(e))
    admin.retry_s = max(args.timeout, 0) / 1000  # Kafka's --timeout bounds the admin calls
    try:
        with admin:
            if args.list:
                return list_groups(admin, args)
            groups = sorted({g.group_id for g in admin.list_groups()}) if args.all_groups else list(args.group)
            if args.describe:
                return describe(admin, args, groups)
            if args.delete:
                return delete(admin, groups)
            if args.delete_offsets:
                return delete_offsets(admin, groups[0], args.topic)
            return reset_offsets(admin, args, groups)
    except UsageError as e:
        return usage_exit(parser, str(e))
    except GroupCommandError as e:
        print(f"\nError: {e}")
        return 1
    except (AdminError, KafkaClientError, WireError) as e:
        cause = e.java() if isinstance(e, AdminError) else str(e)
        print(f"\nError: Executing consumer group command failed due to {cause}")
        return 1


# -- list ----------------------------------------------------------------------------------------

def _values(text: str | None, valid: tuple[str, ...], what: str) -> list[str]:
    if not text:
        return []
    by_lower = {v.lower(): v for v in valid}
    parsed = [s.strip().lower() for s in text.split(",")]
    if any(p not in by_lower for p in parsed):
        plural = "state list" if what == "states" else "types list"
        raise UsageError(f"Invalid {plural} '{text}'. Valid {what} are: {', '.join(valid)}")
    return [by_lower[p] for p in parsed]


def list_groups(admin: KafkaAdmin, args: argparse.Namespace) -> int:
    with_state, with_type = args.state is not None, args.type is not None
    states = _values(args.state, STATES, "states")
    types = _values(args.type, TYPES, "types")
    listings = admin.list_groups(states, [t.lower() for t in types])
    if not with_state and not with_type:
        for g in listings:
            print(g.group_id)
        return 0
    width = max([15, *(len(g.group_id) for g in listings)]) + 10
    header, rows = ["GROUP"], [[g.group_id] for g in listings]
    fmt = f"%-{width}s"
    if with_type:
        header.append("TYPE")
        for row, g in zip(rows, listings, strict=True):
            row.append(g.group_type.capitalize())
        fmt += " %-20s"
    if with_state:
        header.append("STATE")
        for row, g in zip(rows, listings, strict=True):
            row.append(g.state)
        fmt += " %-20s"
    for row in [header, *rows]:
        print(fmt % tuple(row))
    return 0


# -- describe ------------------------------------------------------------------------------------

def should_print(group: str, state: str, rows: int) -> bool:
    """Kafka's shouldPrintMemberState: a message for dead, empty and rebalancing groups."""
    if state == "Dead":
        raise GroupCommandError(f"Consumer group '{group}' does not exist.")
    if state == "Empty":
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state in REBALANCING:
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
    return rows > 0


def describe(admin: KafkaAdmin, args: argparse.Namespace, groups: list[str]) -> int:
    failed = 0
    verbose = bool(args.members_verbose)
    for group in sorted(groups):
        try:
            desc = admin.describe_group(group)
            if args.members:
                print_members(desc, verbose)
            elif args.state is not None:
                print_state(desc, verbose)
            else:
                print_offsets(admin, desc, verbose)
        except GroupCommandError as e:
            print(f"\nError: {e}")
            failed = 1
        sys.stdout.flush()
    return failed


def offset_rows(admin: KafkaAdmin, desc: GroupDescription) -> list[tuple[str, ...]]:
    """Rows for the assigned partitions (biggest assignment first), then committed but unassigned ones:
    group, topic, partition, leader epoch, offset, log end offset, lag, member, host, client."""
    committed = admin.committed_offsets_and_epochs(desc.group_id)
    owners: list[tuple[TP, tuple[str, str, str]]] = []
    for m in sorted((m for m in desc.members if m.assignment), key=lambda m: -len(m.assignment)):
        owners += [(tp, (m.member_id, m.host, m.client_id)) for tp in sorted(m.assignment)]
    assigned = {tp for tp, _ in owners}
    owners += [(tp, (MISSING, MISSING, MISSING)) for tp in sorted(committed) if tp not in assigned]
    ends = admin.offsets([tp for tp, _ in owners], LATEST)
    rows = []
    for (topic, partition), (member, host, client) in owners:
        offset, epoch = committed.get((topic, partition), (None, None))
        end = ends.get((topic, partition))
        lag = end - offset if offset is not None and end is not None else None
        rows.append((desc.group_id, topic, str(partition), _text(epoch), _text(offset), _text(end), _text(lag),
                     member, host, client))
    return rows


def _text(value: int | None) -> str:
    return MISSING if value is None else str(value)


def print_offsets(admin: KafkaAdmin, desc: GroupDescription, verbose: bool = False) -> None:
    """Kafka's printOffsets; ``--verbose`` adds the committed offsets' LEADER-EPOCH."""
    rows = offset_rows(admin, desc)
    if not should_print(desc.group_id, desc.state, len(rows)):
        return
    g = max([15, *(len(r[0]) for r in rows)])
    t = max([15, *(len(r[1]) for r in rows)])
    c = max([15, *(len(r[7]) for r in rows)])
    h = max([15, *(len(r[8]) for r in rows)])
    header = ("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "HOST", "CLIENT-ID")
    epoch = "%-15s " if verbose else ""
    fmt = f"%-{g}s %-{t}s %-10s {epoch}%-15s %-15s %-15s %-{c}s %-{h}s %s"
    print()
    for row in [header, *rows]:
        print(fmt % (row if verbose else row[:3] + row[4:]))


def _assignment_text(assignment: tuple[TP, ...] | None) -> str:
    """Kafka 4's getAssignmentString: ``t1:0,1;t2:0``, topics sorted; ``-`` for none."""
    if not assignment:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    return ";".join(sorted(f"{topic}:{','.join(map(str, sorted(ps)))}" for topic, ps in by_topic.items()))


def print_members(desc: GroupDescription, verbose: bool) -> None:
    """Kafka's printMembers: ``--verbose`` adds each member's epoch and assignment, the group's target
    assignment epoch and the member's target assignment (``-`` for a classic group), and UPGRADED when a
    consumer group has members of both protocols."""
    members = desc.members
    show = should_print(desc.group_id, desc.state, len(members))
    g, c, i, h, cl, ca, ta = 15, 15, 17, 15, 15, 20, 20
    with_instance = has_classic = has_consumer = False
    if show:
        for m in members:
            g, c, h, cl = max(g, len(desc.group_id)), max(c, len(m.member_id)), max(h, len(m.host)), \
                max(cl, len(m.client_id))
            i = max(i, len(m.group_instance_id or ""))
            with_instance = with_instance or bool(m.group_instance_id)
            ca = max(ca, len(_assignment_text(m.assignment)))
            ta = max(ta, len(_assignment_text(m.target_assignment)))
            has_classic = has_classic or m.upgraded is False
            has_consumer = has_consumer or m.upgraded is True
    if with_instance:
        fmt = f"%-{g}s %-{c}s %-{i}s %-{h}s %-{cl}s %-15s "
        header: tuple[str, ...] = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    else:
        fmt = f"%-{g}s %-{c}s %-{h}s %-{cl}s %-15s "
        header = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    upgrade = has_classic and has_consumer
    extra = f"%-15s %-{ca}s %-15s %-{ta}s" + (" %s" if upgrade else "")
    extra_header = ("CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT",
                    *(("UPGRADED",) if upgrade else ()))
    print("\n" + fmt % header + (extra % extra_header if verbose else ""))
    for m in members:
        cells = (desc.group_id, m.member_id, *((m.group_instance_id or "",) if with_instance else ()), m.host,
                 m.client_id, len(m.assignment))
        details = ""
        if verbose:
            values = (_text(m.member_epoch), _assignment_text(m.assignment), _text(desc.assignment_epoch),
                      _assignment_text(m.target_assignment))
            if upgrade:
                values += (MISSING if m.upgraded is None else str(m.upgraded).lower(),)
            details = extra % values
        print(fmt % cells + details)


def print_state(desc: GroupDescription, verbose: bool = False) -> None:
    """Kafka's printStates; ``--verbose`` adds a consumer group's GROUP-EPOCH and TARGET-ASSIGNMENT-EPOCH."""
    if not should_print(desc.group_id, desc.state, 1):
        return
    node, host, port = desc.coordinator
    coordinator = f"{host}:{port}  ({node})"
    start = f"%-{max(15, len(desc.group_id))}s %-{max(25, len(coordinator))}s %-20s %-20s "
    fmt = start + ("%-15s %-25s %s" if verbose else "%s")
    header: tuple[object, ...] = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE")
    row: tuple[object, ...] = (desc.group_id, coordinator, desc.assignor or MISSING, desc.state)
    if verbose:
        header += ("GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH")
        row += (_text(desc.group_epoch), _text(desc.assignment_epoch))
    print("\n" + fmt % (*header, "#MEMBERS"))
    print(fmt % (*row, len(desc.members)))


# -- delete --------------------------------------------------------------------------------------

def delete(admin: KafkaAdmin, groups: list[str]) -> int:
    done, failed = [], {}
    for group in groups:
        try:
            admin.delete_group(group)
            done.append(group)
        except AdminError as e:
            failed[group] = e
    if not failed:
        print(f"Deletion of requested consumer groups ('{', '.join(done)}') was successful.")
        return 0
    print("\nError: Deletion of some consumer groups failed:")
    for group, e in failed.items():
        print(f"* Group '{group}' could not be deleted due to: java.util.concurrent.ExecutionException: {e.java()}")
    if done:
        print(f"\nThese consumer groups were deleted successfully: '{', '.join(done)}'")
    return 1


def delete_offsets(admin: KafkaAdmin, group: str, topics: list[str]) -> int:
    partitions: list[TP] = []
    missing: list[str] = []
    for arg in topics:
        if ":" in arg:
            partitions += parse_topic_partitions(arg)
        else:
            state = admin.cluster([arg]).topics.get(arg)
            if state is None:
                missing.append(arg)
            else:
                partitions += [(arg, p.partition) for p in state.partitions]
    status: dict[TP, str] = {(t, -1): "Error: :org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This "
                                      "server does not host this topic-partition." for t in missing}
    code = 0
    try:
        results = admin.delete_offsets(group, partitions) if partitions else {}
    except AdminError as e:
        messages = {24: f"'{group}' is not valid.", 69: f"'{group}' does not exist.",
                    30: f"Access to '{group}' is not authorized.",
                    68: f"Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty."}
        print(f"\nError: {messages.get(e.code, f'Encounter some unknown error: {e.exception}')}")
        return 1
    for tp, err in results.items():
        status[tp] = "Successful" if err == 0 else f"Error: :{AdminError(err).java()}"
    if any(s != "Successful" for s in status.values()):
        print("\nError: Encounter some partition level error, see the follow-up details:")
        code = 1
    else:
        print(f"Request succeed for deleting offsets with topic {', '.join(topics)} group {group}")
    fmt = "%-30s %-15s %-15s"
    print("\n" + fmt % ("TOPIC", "PARTITION", "STATUS"))
    for (topic, partition), text in sorted(status.items()):
        print(fmt % (topic, partition if partition >= 0 else "Not Provided", text))
    return code


# -- reset offsets -------------------------------------------------------------------------------

def parse_topic_partitions(arg: str) -> list[TP]:
    """``topic:0,1,2`` (Kafka's parseTopicsWithPartitions)."""
    parts = arg.split(":")
    if len(parts) != 2:
        raise UsageError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    topic, partitions = parts
    out = []
    for p in partitions.split(","):
        try:
            out.append((topic, int(p)))
        except ValueError:
            raise UsageError(f"Invalid partition '{p}' specified in topic arg '{arg}''") from None
    return out


def partitions_to_reset(admin: KafkaAdmin, args: argparse.Namespace, group: str) -> list[TP]:
    if args.all_topics:
        return sorted(admin.committed_offsets(group))
    if args.topic:
        out: list[TP] = []
        names = [t for t in args.topic if ":" not in t]
        for arg in args.topic:
            if ":" in arg:
                out += parse_topic_partitions(arg)
        topics = admin.cluster(names).topics if names else {}
        for name in names:
            if name not in topics:
                raise AdminError(3)  # the admin client's describeTopics fails the same way
            out += [(name, p.partition) for p in topics[name].partitions]
        return out
    if not args.from_file:
        raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    return []


def parse_datetime(text: str) -> int:
    """Kafka's Utils.getDateTime: ``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone, UTC when there is none."""
    if "T" not in text:
        raise GroupCommandError("Executing consumer group command failed due to java.text.ParseException: Error "
                                "parsing timestamp. It does not contain a 'T' according to ISO8601 format")
    date, _, clock = text.partition("T")
    if not any(ch in clock for ch in "+-Z"):
        text += "Z"
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise GroupCommandError("Executing consumer group command failed due to java.text.ParseException: "
                                f'Unparseable date: "{text}"') from None
    return int(parsed.astimezone(UTC).timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    """Java's Duration.parse for ``PnDTnHnMn.nS`` (sign allowed), in milliseconds."""
    m = re.fullmatch(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+(?:\.\d+)?)S)?)?",
                     text.strip(), re.IGNORECASE)
    if not m or not any(m.groups()[1:]) or text.upper().endswith("T"):
        raise GroupCommandError("Executing consumer group command failed due to "
                                "java.time.format.DateTimeParseException: Text cannot be parsed to a Duration")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups()[1:])
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return int((-total if m.group(1) == "-" else total) * 1000)


def read_plan(path: str, groups: list[str]) -> dict[str, dict[TP, int]]:
    """``--from-file``: ``topic,partition,offset`` for one group, ``group,topic,partition,offset`` otherwise."""
    try:
        with open(path, newline="") as f:
            lines = [row for row in csv.reader(f) if row]
    except OSError as e:
        raise GroupCommandError(f"Executing consumer group command failed due to {e}") from None
    plan: dict[str, dict[TP, int]] = {}
    try:
        for row in lines:
            if len(groups) == 1 and len(row) == 3:
                plan.setdefault(groups[0], {})[(row[0], int(row[1]))] = int(row[2])
            else:
                plan.setdefault(row[0], {})[(row[1], int(row[2]))] = int(row[3])
    except (ValueError, IndexError):
        raise GroupCommandError(f"Executing consumer group command failed due to invalid CSV in {path}") from None
    return plan


def _clamp(admin: KafkaAdmin, requested: Mapping[TP, int]) -> dict[TP, int]:
    """Kafka's checkOffsetsRange: offsets outside [log start, log end] move to the nearest end."""
    starts, ends = admin.offsets(requested, EARLIEST), admin.offsets(requested, LATEST)
    out = {}
    for tp, offset in requested.items():
        end, start = ends.get(tp), starts.get(tp)
        name = f"{tp[0]}-{tp[1]}"
        if end is not None and offset > end:
            print(f"WARN New offset ({offset}) is higher than latest offset for topic partition {name}. "
                  f"Value will be set to {end}", file=sys.stderr)
            offset = end
        elif start is not None and offset < start:
            print(f"WARN New offset ({offset}) is lower than earliest offset for topic partition {name}. "
                  f"Value will be set to {start}", file=sys.stderr)
            offset = start
        out[tp] = offset
    return out


def _log_offsets(admin: KafkaAdmin, partitions: list[TP], spec: int, what: str) -> dict[TP, int]:
    found = admin.offsets(partitions, spec)
    for tp in partitions:
        if found.get(tp) is None:
            raise UsageError(f"Error getting {what} offset of topic partition: {tp[0]}-{tp[1]}")
    return {tp: found[tp] for tp in partitions if found[tp] is not None}  # type: ignore[misc]


def _timestamp_offsets(admin: KafkaAdmin, partitions: list[TP], timestamp: int) -> dict[TP, int]:
    found = admin.offsets(partitions, timestamp)
    out, empty = {}, []
    for tp in partitions:
        offset = found.get(tp)
        if offset is None or offset < 0:
            print(f"\nWarn: Partition {tp[1]} from topic {tp[0]} is empty. Falling back to latest known offset.")
            empty.append(tp)
        else:
            out[tp] = offset
    out.update(_log_offsets(admin, empty, LATEST, "ending") if empty else {})
    return out


def prepare(admin: KafkaAdmin, args: argparse.Namespace, group: str, partitions: list[TP],
            plan: dict[str, dict[TP, int]] | None) -> dict[TP, int]:
    """The new offsets of one group, per Kafka's prepareOffsetsToReset."""
    if args.to_offset is not None:
        return _clamp(admin, dict.fromkeys(partitions, args.to_offset))
    if args.to_earliest:
        return _log_offsets(admin, partitions, EARLIEST, "starting")
    if args.to_latest:
        return _log_offsets(admin, partitions, LATEST, "ending")
    if args.shift_by is not None:
        committed = admin.committed_offsets(group)
        requested = {}
        for tp in partitions:
            if committed.get(tp) is None:
                raise UsageError(f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no current "
                                 "committed offset")
            requested[tp] = committed[tp] + args.shift_by  # type: ignore[operator]
        return _clamp(admin, requested)
    if args.to_datetime is not None:
        return _timestamp_offsets(admin, partitions, parse_datetime(args.to_datetime))
    if args.by_duration is not None:
        return _timestamp_offsets(admin, partitions, int(time.time() * 1000) - parse_duration_ms(args.by_duration))
    if plan is not None:
        if group not in plan:
            raise GroupCommandError(f"No reset plan for group {group} found")
        return _clamp(admin, plan[group])
    if args.to_current:
        committed = admin.committed_offsets(group)
        out = {tp: c for tp in partitions if (c := committed.get(tp)) is not None}
        missing = [tp for tp in partitions if tp not in out]
        out.update(_log_offsets(admin, missing, LATEST, "ending") if missing else {})
        return out
    raise UsageError("Option '[reset-offsets]' requires one of the following scenarios: "
                     + ", ".join(f"[{s}]" for s in SCENARIOS))


def reset_offsets(admin: KafkaAdmin, args: argparse.Namespace, groups: list[str]) -> int:
    plan = read_plan(args.from_file, groups) if args.from_file else None
    result: dict[str, dict[TP, int]] = {}
    failed = 0
    for group in sorted(groups):
        state = admin.describe_group(group).state
        if state not in INACTIVE:
            print(f"\nError: Assignments can only be reset if the group '{group}' is inactive, but the current state "
                  f"is {state}.")
            result[group] = {}
            failed = 1
            continue
        offsets = prepare(admin, args, group, partitions_to_reset(admin, args, group), plan)
        if args.execute:
            admin.commit_offsets(group, offsets)
        result[group] = offsets
    if args.export:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for group, offsets in result.items():
            for (topic, partition), offset in sorted(offsets.items()):
                writer.writerow([topic, partition, offset] if len(groups) == 1 else [group, topic, partition, offset])
        print(out.getvalue())
    elif result:
        fmt = "%-30s %-30s %-10s %-15s"
        print("\n" + fmt % ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"))
        for group, offsets in result.items():
            for (topic, partition), offset in sorted(offsets.items()):
                print(fmt % (group, topic, partition, offset))
    return failed
