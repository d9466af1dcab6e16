"""``strata topics`` (``kafka-topics.sh``): create, list, describe, alter and delete topics.

Kafka 3.9's ``TopicCommand`` over the Kafka protocol: the same flags and checks, the same output
(``Created topic t.``, one name a line for ``--list``, the tab-separated ``--describe`` lines), the
same failures (``Error while executing topic command : ...`` on stdout, exit code 1). ``--topic``
is a regular expression except with ``--create``, as in Kafka.
"""

from __future__ import annotations

import argparse
import re
import sys

from strata.client.cluster import KafkaClientError
from strata.client.wire import WireError
from strata.tools.admin import RESOURCE_TOPIC, AdminError, ConfigEntry, KafkaAdmin, TopicState, uuid_text
from strata.tools.kafka_cli import (
    UsageError,
    error_class,
    has,
    invalid_with,
    open_admin,
    optional,
    refuse_zookeeper,
    require,
    usage_exit,
)

ACTIONS = ("create", "list", "alter", "describe", "delete")
REPORTS = ("under-replicated-partitions", "unavailable-partitions", "under-min-isr-partitions",
           "at-min-isr-partitions")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})  # Topic.isInternal
DEFAULT_CONFIG = 5  # DescribeConfigs config_source: ConfigEntry.isDefault()
MAX_REPLICATION_FACTOR = 32767
ALTER_CONFIG_HINT = " (the kafka-configs CLI supports altering topic configs with a --bootstrap-server option)"


class CommandError(Exception):
    """An IllegalArgumentException of TopicCommand: printed as the command's error, exit code 1."""


def check_args(args: argparse.Namespace) -> None:
    """TopicCommandOptions.checkArgs, in Kafka's order."""
    if sum(has(args, a) for a in ACTIONS) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    if not has(args, "bootstrap-server"):
        raise UsageError("--bootstrap-server must be specified")
    if args.describe and args.if_exists and not args.topic and not args.topic_id:
        raise UsageError("--topic or --topic-id is required to describe a topic")
    if not args.list and not args.describe:
        require(args, "topic")
    if args.alter:
        if args.config:
            raise UsageError('Option combination "[[bootstrap-server], [config]]" can\'t be used with option '
                             f'"[alter]"{ALTER_CONFIG_HINT}')
        require(args, "partitions")
    invalid_with(args, "config", [a for a in ACTIONS if a not in ("alter", "create")])
    invalid_with(args, "delete-config", ["bootstrap-server", *(a for a in ACTIONS if a != "alter")])
    invalid_with(args, "partitions", [a for a in ACTIONS if a not in ("alter", "create")])
    invalid_with(args, "replication-factor", [a for a in ACTIONS if a != "create"])
    invalid_with(args, "replica-assignment", [a for a in ACTIONS if a not in ("alter", "create")])
    if args.create:
        invalid_with(args, "replica-assignment", ["partitions", "replication-factor"])
    for report in REPORTS:
        invalid_with(args, report, ["topics-with-overrides", *(a for a in ACTIONS if a != "describe")])
    invalid_with(args, "topics-with-overrides", [*REPORTS, *(a for a in ACTIONS if a != "describe")])
    invalid_with(args, "if-exists", [a for a in ACTIONS if a not in ("alter", "delete", "describe")])
    invalid_with(args, "if-not-exists", [a for a in ACTIONS if a != "create"])
    invalid_with(args, "exclude-internal", [a for a in ACTIONS if a not in ("list", "describe")])


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if refuse_zookeeper(args, "kafka-topics.sh"):
        return 1
    try:
        check_args(args)
        admin = open_admin(args)
    except UsageError as e:
        return usage_exit(parser, str(e))
    try:
        with admin:
            if args.create:
                create(admin, args)
            elif args.alter:
                alter(admin, args)
            elif args.list:
                print("\n".join(matching_topics(admin, args.topic, args.exclude_internal)))
            elif args.describe:
                describe(admin, args)
            else:
                delete(admin, args)
    except (AdminError, CommandError, KafkaClientError, WireError) as e:
        print(f"Error while executing topic command : {e}")
        print(f"ERROR {error_class(e)}: {e} (org.apache.kafka.tools.TopicCommand)", file=sys.stderr)
        return 1
    return 0


# -- parsing -------------------------------------------------------------------------------------

def parse_configs(items: list[str] | None) -> dict[str, str]:
    """``--config k=v`` as TopicCommand splits it (on ``=`` with spaces around; exactly one ``=``)."""
    out = {}
    for item in items or []:
        parts = re.split(r"\s*=\s*", item)
        while parts and parts[-1] == "":  # Java's String.split drops trailing empty strings
            parts.pop()
        if len(parts) != 2:
            raise CommandError('requirement failed: Invalid topic config: all configs to be added must be in the '
                               'format "key=val".')
        out[parts[0].strip()] = parts[1].strip()
    return out


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """``1:2,2:3`` -> {0: [1, 2], 1: [2, 3]} with Kafka's checks."""
    out: dict[int, list[int]] = {}
    for i, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise CommandError(f'For input string: "{part}"') from None
        dupes = sorted({b for b in brokers if brokers.count(b) > 1})
        if dupes:
            raise CommandError("Partition replica lists may not contain duplicate entries: "
                               + ",".join(map(str, dupes)))
        out[i] = brokers
        if len(brokers) != len(out[0]):
            raise CommandError(f"Partition {i} has different replication factor: [{', '.join(map(str, brokers))}]")
    return out


def topic_filter(raw: str) -> re.Pattern[str]:
    """Kafka's TopicFilter.IncludeList: commas mean "or", spaces and surrounding quotes are dropped."""
    regex = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", raw.strip().replace(",", "|").replace(" ", "")))
    try:
        return re.compile(regex)
    except re.error:
        raise CommandError(f"{regex} is an invalid regex.") from None


def matching_topics(admin: KafkaAdmin, pattern: str | None, exclude_internal: bool) -> list[str]:
    """Sorted names of the topics ``--topic`` matches (all when absent), internal ones unless excluded."""
    topics = admin.cluster().topics
    regex = topic_filter(pattern) if pattern is not None else None
    out = []
    for name in sorted(topics):
        if exclude_internal and (name in INTERNAL_TOPICS or topics[name].internal):
            continue
        if regex is None or regex.fullmatch(name):
            out.append(name)
    return out


def ensure_exists(found: list[str], requested: str | None, if_exists: bool) -> None:
    if requested and not if_exists and not found:
        # Kafka formats the Optional itself: "Topic 'Optional[t]' does not exist as expected"
        raise CommandError(f"Topic '{optional(requested)}' does not exist as expected")


# -- actions -------------------------------------------------------------------------------------

def create(admin: KafkaAdmin, args: argparse.Namespace) -> None:
    name = args.topic
    if "." in name or "_" in name:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
              "collide. To avoid issues it is best to use either, but not both.")
    if args.replication_factor is not None and not 1 <= args.replication_factor <= MAX_REPLICATION_FACTOR:
        raise CommandError(f"The replication factor must be between 1 and {MAX_REPLICATION_FACTOR} inclusive")
    if args.partitions is not None and args.partitions < 1:
        raise CommandError("The partitions must be greater than 0")
    configs = parse_configs(args.config)
    assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
    try:
        admin.create_topic(name, args.partitions if args.partitions is not None else -1,
                           args.replication_factor if args.replication_factor is not None else -1,
                           assignment, configs)
    except AdminError as e:
        if e.exception == "TopicExistsException" and args.if_not_exists:
            return
        raise
    print(f"Created topic {name}.")


def alter(admin: KafkaAdmin, args: argparse.Namespace) -> None:
    topics = matching_topics(admin, args.topic, args.exclude_internal)
    ensure_exists(topics, args.topic, args.if_exists)
    if not topics:
        return
    assignments = None
    if args.replica_assignment:
        full = parse_replica_assignment(args.replica_assignment)
        states = admin.cluster(topics).topics
        assignments = {t: [ids for p, ids in sorted(full.items()) if p >= len(states[t].partitions)]
                       for t in topics if t in states}
    admin.create_partitions(dict.fromkeys(topics, args.partitions), assignments)


def delete(admin: KafkaAdmin, args: argparse.Namespace) -> None:
    topics = matching_topics(admin, args.topic, args.exclude_internal)
    ensure_exists(topics, args.topic, args.if_exists)
    admin.delete_topics(topics)


def describe(admin: KafkaAdmin, args: argparse.Namespace) -> None:
    cluster = admin.cluster()
    if args.topic_id:
        chosen = [t for t in cluster.topics.values() if uuid_text(t.topic_id) == args.topic_id
                  and not (args.exclude_internal and t.name in INTERNAL_TOPICS)]
        if not chosen and not args.if_exists:
            raise CommandError(f"TopicId '{args.topic_id}' does not exist as expected")
    else:
        names = matching_topics(admin, args.topic, args.exclude_internal)
        ensure_exists(names, args.topic, args.if_exists)
        chosen = [cluster.topics[n] for n in names if n in cluster.topics]
    live = set(cluster.brokers)
    for topic in chosen:
        configs = admin.describe_configs(RESOURCE_TOPIC, topic.name)
        _print_topic(topic, configs, live, args)


def _min_isr(configs: list[ConfigEntry]) -> int:
    for c in configs:
        if c.name == "min.insync.replicas" and c.value is not None:
            return int(c.value)
    return 1


def _print_topic(topic: TopicState, configs: list[ConfigEntry], live: set[int], args: argparse.Namespace) -> None:
    reports = [r for r in REPORTS if has(args, r)]
    overrides = [c for c in configs if c.source != DEFAULT_CONFIG]
    if not reports and (not args.topics_with_overrides or overrides):
        rf = len(topic.partitions[0].replicas) if topic.partitions else 0
        line = f"Topic: {topic.name}"
        if topic.topic_id is not None and topic.topic_id.int != 0:
            line += f"\tTopicId: {uuid_text(topic.topic_id)}"
        line += f"\tPartitionCount: {len(topic.partitions)}\tReplicationFactor: {rf}"
        line += "\tConfigs: " + ",".join(f"{c.name}={c.value}" for c in overrides)
        print(line)
    if args.topics_with_overrides:
        return
    min_isr = _min_isr(configs)
    for p in topic.partitions:
        has_leader = p.leader >= 0
        shown = not reports or any((
            "under-replicated-partitions" in reports and len(p.replicas) > len(p.isr),
            "unavailable-partitions" in reports and (not has_leader or p.leader not in live),
            "under-min-isr-partitions" in reports and (not has_leader or len(p.isr) < min_isr),
            "at-min-isr-partitions" in reports and len(p.isr) == min_isr,
        ))
        if shown:
            print(f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {p.leader if has_leader else 'none'}"
                  f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
                  "\tElr: N/A\tLastKnownElr: N/A")
