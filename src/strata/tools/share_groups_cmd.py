"""``strata share-groups`` (``kafka-share-groups.sh``): list, describe, reset and delete KIP-932 share groups.

Kafka 4.2's ``ShareGroupCommand`` over the Kafka protocol, with its flags, checks and tables:

* ``--list [--state [states]]``: the share groups (ListGroups v5, type ``share``), with ``GROUP STATE``
  under ``--state``;
* ``--describe`` (``--group``/``--all-groups``): the start offset of each share-partition
  (DescribeShareGroupOffsets: ``GROUP TOPIC PARTITION START-OFFSET LAG``, ``LEADER-EPOCH`` before the start
  offset under ``--verbose``), or the members (``--members``: ``GROUP CONSUMER-ID HOST CLIENT-ID
  #PARTITIONS ASSIGNMENT``, ``MEMBER-EPOCH`` under ``--verbose``; ShareGroupDescribe) or the state
  (``--state``: ``GROUP COORDINATOR (ID) STATE #MEMBERS``, ``GROUP-EPOCH ASSIGNMENT-EPOCH`` under
  ``--verbose``);
* ``--reset-offsets --group G --topic T[:0,1] | --all-topics --to-earliest | --to-latest | --to-datetime D
  --dry-run | --execute``: new start offsets from ListOffsets, printed, and set (AlterShareGroupOffsets)
  only with ``--execute`` and only while the group is empty; a group that does not exist yet is created;
* ``--delete``: DeleteGroups of empty share groups; ``--delete-offsets --group G --topic T``: forget the
  group's offsets of whole topics (DeleteShareGroupOffsets).

The tables reuse ``strata consumer-groups``' pieces (topic:partition arguments, dates, the earliest/latest
and timestamp lookups, assignment strings); the requests are :class:`strata.tools.admin.KafkaAdmin`'s.

One difference on purpose, as in ``strata consumer-groups``: where Kafka prints ``Error: ...`` and still
exits 0 (an unknown group, a failed deletion), this command exits 1 so that scripts can tell.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

from strata.client.cluster import KafkaClientError
from strata.client.wire import WireError
from strata.tools.admin import GROUP_ID_NOT_FOUND, AdminError, GroupDescription, KafkaAdmin, SharePartitionOffset
from strata.tools.consumer_groups_cmd import (
    EARLIEST,
    LATEST,
    MISSING,
    GroupCommandError,
    _assignment_text,
    _log_offsets,
    _timestamp_offsets,
    _values,
    parse_datetime,
    parse_topic_partitions,
)
from strata.tools.kafka_cli import UsageError, has, invalid_with, open_admin, refuse_zookeeper, require, usage_exit

ACTIONS = ("list", "describe", "delete", "reset-offsets", "delete-offsets")
SCENARIOS = ("to-datetime", "to-earliest", "to-latest")
STATES = ("Empty", "Stable", "Dead")  # GroupState.groupStatesForType(SHARE)
INACTIVE = ("Empty", "Dead")
# DeleteShareGroupOffsets errors ShareGroupCommand prints as they are; the topic-level ones it leaves to the table
GROUP_ERRORS = (24, 69, 30, 68)  # INVALID_GROUP_ID, GROUP_ID_NOT_FOUND, GROUP_AUTHORIZATION_FAILED, NON_EMPTY_GROUP
TOPIC_ERRORS = (29, 3)  # TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION

TP = tuple[str, int]


def _sorted_specs(*names: str) -> str:
    """jopt-simple's option names, sorted, as ShareGroupCommandOptions joins them: ``[all-groups], [group]``."""
    return ", ".join(sorted(f"[{n}]" for n in names))


def check_args(args: argparse.Namespace) -> None:
    """ShareGroupCommandOptions.checkArgs, then the one-action check of ``main``."""
    require(args, "bootstrap-server")
    for option, attr, allowed in (("members", "members", ("describe",)), ("verbose", "members_verbose", ("describe",)),
                                  ("offsets", "offsets", ("describe",)), ("state", "state", ("describe", "list"))):
        if has(args, attr) and not any(has(args, a) for a in allowed):
            raise UsageError(f"Option(s) [{option}] are unavailable given other options on the command line")
    if args.describe:
        if not args.group and not args.all_groups:
            raise UsageError(f"Option [describe] takes one of these options: {_sorted_specs('group', 'all-groups')}")
        if sum(has(args, o) for o in ("members", "offsets", "state")) > 1:
            raise UsageError("Option [describe] takes at most one of these options: "
                             + _sorted_specs("members", "offsets", "state"))
        if args.state:  # a value (--state alone is the empty string)
            raise UsageError("Option [describe] does not take a value for [state]")
    if args.delete:
        if not args.group and not args.all_groups:
            raise UsageError("Option [delete] takes the options [group] or [all-groups]")
        if args.group and args.all_groups:
            raise UsageError("Option [delete] takes either [group] or [all-groups], not both.")
        if args.topic:
            raise UsageError("Option [delete] does not take the option: [topic]")
    if args.delete_offsets and (not args.group or not args.topic):
        raise UsageError(f"Option [delete-offsets] takes the following options: {_sorted_specs('group', 'topic')}")
    if args.reset_offsets:
        if args.dry_run and args.execute:
            raise UsageError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        if not args.dry_run and not args.execute:
            raise UsageError("Option [reset-offsets] takes the option: [execute] or [dry-run]")
        if not args.group:
            raise UsageError("Option [reset-offsets] takes the option: [group]")
        if not args.topic and not args.all_topics:
            raise UsageError("Option [reset-offsets] takes one of these options: "
                             + _sorted_specs("topic", "all-topics"))
        if not any(has(args, s) for s in SCENARIOS):
            raise UsageError(f"Option [reset-offsets] takes one of these options: {_sorted_specs(*SCENARIOS)}")
        for scenario in SCENARIOS:
            invalid_with(args, scenario, [s for s in SCENARIOS if s != scenario])
    invalid_with(args, "group", ["all-groups"])
    invalid_with(args, "group", ["list"])
    invalid_with(args, "topic", ["list", "describe"])
    if sum(has(args, a) for a in ACTIONS) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                         "--delete-offsets.")
    if (args.reset_offsets or args.delete_offsets) and len(args.group) > 1:
        raise UsageError("Found multiple arguments for option group, but you asked for only one")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if refuse_zookeeper(args, "kafka-share-groups.sh"):
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
            if args.describe:
                return describe(admin, args)
            if args.delete:
                return delete(admin, args)
            if args.delete_offsets:
                return delete_offsets(admin, args.group[0], args.topic)
            return reset_offsets(admin, args, args.group[0])
    except UsageError as e:
        return usage_exit(parser, str(e))
    except GroupCommandError as e:
        print(f"\nError: {e}")
        return 1
    except (AdminError, KafkaClientError, WireError) as e:
        cause = e.java() if isinstance(e, AdminError) else str(e)
        print(f"\nError: Executing share group command failed due to {cause}")
        return 1


# -- list ----------------------------------------------------------------------------------------

def list_groups(admin: KafkaAdmin, args: argparse.Namespace) -> int:
    """Kafka's listGroups: the ids, or ``GROUP STATE`` with ``--state`` (only the given states when it has a
    value)."""
    if args.state is None:
        for g in admin.list_share_groups():
            print(g.group_id)
        return 0
    listings = admin.list_share_groups(_values(args.state, STATES, "states"))
    fmt = f"%-{max([15, *(len(g.group_id) for g in listings)])}s %s"
    print(fmt % ("GROUP", "STATE"))
    for g in listings:
        print(fmt % (g.group_id, g.state))
    return 0


# -- describe ------------------------------------------------------------------------------------

def describe(admin: KafkaAdmin, args: argparse.Namespace) -> int:
    """Every group is described first (one that cannot be fails the command, as in Kafka), then printed in
    group order."""
    ids = [g.group_id for g in admin.list_share_groups()] if args.all_groups else args.group
    descriptions = {g: admin.describe_share_group(g) for g in sorted(set(ids))}
    verbose = bool(args.members_verbose)
    for group, desc in descriptions.items():
        if args.members:
            print_members(desc, verbose)
        elif args.state is not None:
            print_state(desc, verbose)
        else:
            print_offsets(group, admin.share_group_offsets(group), verbose)
        sys.stdout.flush()
    return 0


def maybe_print_empty_group_state(group: str, state: str, rows: int) -> bool:
    """Kafka's maybePrintEmptyGroupState: an error for a dead group, a note for an empty one; whether to print."""
    if state == "Dead":
        print(f"\nError: Share group '{group}' does not exist.")
    elif state == "Empty":
        print(f"\nShare group '{group}' has no active members.", file=sys.stderr)
    return state != "Dead" and rows > 0


def _lines(fmt: str, rows: Sequence[tuple[object, ...]]) -> None:
    """Kafka's ``printf("\\n...")`` per row, then ``println()``."""
    print("".join(fmt % row for row in rows))


def print_offsets(group: str, offsets: Mapping[TP, SharePartitionOffset | None], verbose: bool) -> None:
    """Kafka's printOffsets: a share-partition without a start offset shows ``-``."""
    if not offsets:
        print(f"\nShare group '{group}' has no offset information.")
        return
    g = max(15, len(group))
    t = max([15, *(len(topic) for topic, _ in offsets)])
    rows: list[tuple[object, ...]] = []
    for (topic, partition), info in sorted(offsets.items()):
        start, epoch, lag = (MISSING,) * 3 if info is None else (
            info.start_offset, _or_missing(info.leader_epoch), _or_missing(info.lag))
        rows.append((group, topic, partition, epoch, start, lag) if verbose else (group, topic, partition, start, lag))
    if verbose:
        _lines(f"\n%-{g}s %-{t}s %-10s %-13s %-13s %s",
               [("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"), *rows])
    else:
        _lines(f"\n%-{g}s %-{t}s %-10s %-13s %s", [("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"), *rows])


def _or_missing(value: int | None) -> object:
    return MISSING if value is None else value


def print_state(desc: GroupDescription, verbose: bool) -> None:
    """Kafka's printStates; ``--verbose`` adds GROUP-EPOCH and ASSIGNMENT-EPOCH."""
    maybe_print_empty_group_state(desc.group_id, desc.state, 1)
    node, host, port = desc.coordinator
    coordinator = f"{host}:{port}  ({node})"
    start = f"\n%-{max(15, len(desc.group_id))}s %-{max(25, len(coordinator))}s %-15s "
    if verbose:
        _lines(start + "%-12s %-17s %s", [
            ("GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"),
            (desc.group_id, coordinator, desc.state, desc.group_epoch, desc.assignment_epoch, len(desc.members))])
    else:
        _lines(start + "%s", [("GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"),
                              (desc.group_id, coordinator, desc.state, len(desc.members))])


def print_members(desc: GroupDescription, verbose: bool) -> None:
    """Kafka's printMembers: members by id; ``--verbose`` adds MEMBER-EPOCH. The assignment is
    ``t1:0,1;t2:0``, empty when there is none."""
    members = sorted(desc.members, key=lambda m: m.member_id)
    if not maybe_print_empty_group_state(desc.group_id, desc.state, len(members)):
        return
    g = max(15, len(desc.group_id))
    c = max([15, *(len(m.member_id) for m in members)])
    h = max([15, *(len(m.host) for m in members)])
    cl = max([15, *(len(m.client_id) for m in members)])
    start = f"\n%-{g}s %-{c}s %-{h}s %-{cl}s %-12s "
    rows: list[tuple[object, ...]] = []
    for m in members:
        assignment = _assignment_text(m.assignment) if m.assignment else ""
        cells: tuple[object, ...] = (desc.group_id, m.member_id, m.host, m.client_id, len(m.assignment))
        rows.append((*cells, m.member_epoch, assignment) if verbose else (*cells, assignment))
    if verbose:
        _lines(start + "%-13s %s", [("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH",
                                     "ASSIGNMENT"), *rows])
    else:
        _lines(start + "%s", [("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"), *rows])


# -- delete --------------------------------------------------------------------------------------

def delete(admin: KafkaAdmin, args: argparse.Namespace) -> int:
    """Kafka's deleteShareGroups: groups that are not share groups, are dead or not empty fail before any
    request (as the listing says); the others are deleted with DeleteGroups."""
    listed = {g.group_id: g for g in admin.list_share_groups()}
    groups = list(listed) if args.all_groups else list(dict.fromkeys(args.group))
    failed: dict[str, str] = {}
    for group in groups:
        listing = listed.get(group)
        if listing is None:
            failed[group] = f"java.lang.IllegalArgumentException: Group '{group}' is not a share group."
        elif listing.state == "Dead":
            failed[group] = f"java.lang.IllegalStateException: Share group '{group}' group state is DEAD."
        elif listing.state != "Empty":
            failed[group] = (f"org.apache.kafka.common.errors.GroupNotEmptyException: Share group '{group}' is not "
                             "EMPTY.")
    done = []
    for group in groups:
        if group in failed:
            continue
        try:
            admin.delete_group(group)
            done.append(group)
        except AdminError as e:
            failed[group] = e.java()
    quoted = ", ".join(f"'{g}'" for g in sorted(done))
    if not failed:
        print(f"Deletion of requested share groups ({quoted}) was successful.")
        return 0
    print("\nError: Deletion of some share groups failed:")
    for group, error in sorted(failed.items()):
        print(f"* Group '{group}' could not be deleted due to: {error}")
    if done:
        print(f"\nThese share groups were deleted successfully: {quoted}")
    return 1


def delete_offsets(admin: KafkaAdmin, group: str, topics: list[str]) -> int:
    """Kafka's deleteOffsets: a group-level error first (printed for the group errors it knows), then
    ``TOPIC STATUS`` per topic (every topic carries a group-level error too)."""
    results: dict[str, AdminError | None]
    try:
        results = admin.delete_share_group_offsets(group, topics)
        top = next((e for _, e in sorted(results.items()) if e is not None), None)
    except AdminError as e:
        top, results = e, dict.fromkeys(topics, e)
    if top is not None:
        if top.code in GROUP_ERRORS:
            print(f"\nError: {top}")
        elif top.code not in TOPIC_ERRORS:
            print(f"\nError: Encounter some unknown error: {top.java()}")
    fmt = f"\n%-{max([15, *(len(t) for t in results)])}s %s"
    text = "".join(fmt % row for row in [("TOPIC", "STATUS"), *(
        (topic, "Successful" if e is None else f"Error: {e}") for topic, e in sorted(results.items()))])
    print(text if results else "")
    return 0 if top is None else 1


# -- reset offsets -------------------------------------------------------------------------------

def reset_offsets(admin: KafkaAdmin, args: argparse.Namespace, group: str) -> int:
    """Kafka's resetOffsets: only an empty (or not yet existing) group; the plan is printed, and set with
    ``--execute``."""
    try:
        state = admin.describe_share_group(group).state
    except AdminError as e:
        if e.code != GROUP_ID_NOT_FOUND:  # printErrorAndExit
            print(e, file=sys.stderr)
            return 1
        state = "Dead"
    if state not in INACTIVE:
        print(f"Share group '{group}' is not empty.", file=sys.stderr)
        return 1
    try:
        partitions = partitions_to_reset(admin, args, group)
        check_partitions(admin, partitions)
        offsets = prepare(admin, args, partitions)
        if args.execute:
            admin.alter_share_group_offsets(group, offsets)
    except (AdminError, KafkaClientError) as e:  # Kafka prints the cause's message alone here
        raise GroupCommandError(f"Executing share group command failed due to {e}") from None
    fmt = f"\n%-{max(15, len(group))}s %-{max([15, *(len(t) for t, _ in offsets)])}s %-10s %s"
    _lines(fmt, [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                 *((group, t, p, o) for (t, p), o in sorted(offsets.items()))])
    return 0


def partitions_to_reset(admin: KafkaAdmin, args: argparse.Namespace, group: str) -> list[TP]:
    """``--topic t`` (every partition) or ``t:0,1``, else ``--all-topics``: the group's share-partitions."""
    if not args.topic:
        return sorted(admin.share_group_offsets(group))
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


def check_partitions(admin: KafkaAdmin, partitions: list[TP]) -> None:
    """OffsetsUtils.checkAllTopicPartitionsValid: every partition exists and has a leader."""
    topics = admin.cluster(sorted({t for t, _ in partitions})).topics if partitions else {}
    leaders = {(t.name, p.partition): p.leader for t in topics.values() for p in t.partitions}
    missing = [tp for tp in partitions if tp not in leaders]
    if missing:
        raise GroupCommandError("Executing share group command failed due to The partitions "
                                f'"{",".join(f"{t}-{p}" for t, p in missing)}" do not exist')
    leaderless = [tp for tp in partitions if leaders[tp] < 0]
    if leaderless:
        raise GroupCommandError("Executing share group command failed due to The partitions "
                                f'"{",".join(f"{t}-{p}" for t, p in leaderless)}" have no leader')


def prepare(admin: KafkaAdmin, args: argparse.Namespace, partitions: list[TP]) -> dict[TP, int]:
    """Kafka's prepareOffsetsToReset: the log start, the log end, or the first offset at a time."""
    if args.to_earliest:
        return _log_offsets(admin, partitions, EARLIEST, "starting")
    if args.to_latest:
        return _log_offsets(admin, partitions, LATEST, "ending")
    try:
        timestamp = parse_datetime(args.to_datetime)
    except GroupCommandError as e:  # the consumer command's wording, from the same parser
        raise GroupCommandError(str(e).replace("consumer group command", "share group command")) from None
    return _timestamp_offsets(admin, partitions, timestamp)
