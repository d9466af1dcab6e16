"""The ``strata`` command: ``serve``, ``dump-log``, ``demo``, ``tiers``, ``bucket``, ``transactions``, ``version``,
and Kafka's tools.

``topics``, ``configs``, ``consumer-groups``, ``share-groups`` and ``remote-log-metadata-migration`` take the
flags of ``kafka-topics.sh``, ``kafka-configs.sh``, ``kafka-consumer-groups.sh``, ``kafka-share-groups.sh`` and
``kafka-remote-log-metadata-migration.sh`` (``bin/`` has wrappers by those names); their
logic is in :mod:`strata.tools`, and their exit codes are Kafka's: 1 for any failure, Kafka's own
argument checks included (a flag argparse does not know is still 2).

Exit codes otherwise: 0 when everything dumped is consistent, 1 when any inconsistency or invalid
batch was found (or the demo failed), 2 for usage errors.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strata import __version__
from strata.tools.bucket import add_bucket_parser
from strata.tools.tiers import add_tiers_parser
from strata.tools.transactions import add_transactions_parser

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
DEFAULT_DEMO_DIR = Path("data") / "demo"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of bytes")
    return value


def build_parser() -> argparse.ArgumentParser:
    verbose = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's -v adds to the top-level count instead of resetting it.
    verbose.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                         help="log more (-v INFO, -vv DEBUG); the default is WARNING")

    parser = argparse.ArgumentParser(prog="strata", description="Strata: a Kafka-compatible broker.")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more (-v INFO, -vv DEBUG); the default is WARNING")
    parser.add_argument("--version", action="version", version=f"strata {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    dump = commands.add_parser(
        "dump-log", parents=[verbose], help="dump and verify log segments, indexes and checkpoints",
        description="Dump the files of a partition directory like Kafka's kafka-dump-log, verifying each "
                    "index against its log. Exit code 1 when anything is inconsistent.",
    )
    dump.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                      help="a .log, .index, .timeindex, .txnindex, .snapshot or checkpoint file, or a directory")
    dump.add_argument("--files", default=None, metavar="FILE1,FILE2",
                      help="comma-separated files (kafka-dump-log's spelling)")
    dump.add_argument("--print-data-log", "--records", dest="print_data", action="store_true",
                      help="one line per record, with key and payload")
    dump.add_argument("--deep-iteration", dest="deep", action="store_true",
                      help="one line per record, without key and payload")
    dump.add_argument("--index-sanity-check", action="store_true",
                      help="run the broker's startup sanity check on indexes (entries are verified, not listed)")
    dump.add_argument("--verify-index-only", action="store_true",
                      help="verify index entries without listing them")
    dump.add_argument("--max-bytes", type=_positive_int, default=None, metavar="N",
                      help="dump only the batches within the first N bytes of each .log")
    dump.add_argument("--json", action="store_true", help="machine-readable output: a JSON list, one object a file")
    dump.set_defaults(func=_cmd_dump_log, command_parser=dump)

    demo = commands.add_parser(
        "demo", parents=[verbose], help="write a sample partition log and dump it",
        description="Write a sample partition log (all codecs, several segments, idempotent and "
                    "transactional producers, an aborted transaction) under DIR, then dump it.",
    )
    demo.add_argument("--dir", type=Path, default=DEFAULT_DEMO_DIR,
                      help=f"where to write it (default ./{DEFAULT_DEMO_DIR}); emptied first")
    demo.set_defaults(func=_cmd_demo, command_parser=demo)

    serve = commands.add_parser(
        "serve", parents=[verbose], help="run the broker",
        description="Run the Kafka-compatible broker. Configuration uses Kafka's server.properties keys; "
                    "--set overrides the file. Unknown keys or invalid values stop startup with the key named.",
    )
    serve.add_argument("--config", type=Path, default=None, metavar="FILE", help="a server.properties file")
    serve.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override one config key (repeatable)")
    serve.set_defaults(func=_cmd_serve, command_parser=serve)

    add_tiers_parser(commands, parents=[verbose])
    add_bucket_parser(commands, parents=[verbose])
    add_transactions_parser(commands, parents=[verbose])
    _add_topics_parser(commands)
    _add_configs_parser(commands)
    _add_consumer_groups_parser(commands)
    _add_share_groups_parser(commands)
    _add_acls_parser(commands)
    _add_remote_log_metadata_migration_parser(commands)
    version = commands.add_parser("version", parents=[verbose], help="print the version")
    version.set_defaults(func=_cmd_version, command_parser=version)
    return parser


# -- Kafka's command-line tools (flags as in Kafka 3.9; checks and output in strata.tools.*_cmd) ---------------

def _kafka_tool_parser(commands: Any, name: str, kafka_name: str, help_text: str) -> argparse.ArgumentParser:
    """A subcommand with the connection options every Kafka tool has (the tool modules load when it runs)."""
    p = commands.add_parser(name, help=f"{help_text} ({kafka_name}'s flags)",
                            description=f"{help_text}, with the flags and output of Kafka's {kafka_name} "
                                        f"(bin/{kafka_name} runs this command).")
    p.add_argument("--bootstrap-server", metavar="<String: server to connect to>",
                   help="REQUIRED: The Kafka server(s) to connect to (HOST:PORT,...).")
    p.add_argument("--command-config", metavar="<String: command config property file>",
                   help="Property file containing configs to be passed to Admin Client (client.id, "
                        "request.timeout.ms, and security.protocol, sasl.mechanism, sasl.jaas.config, ssl.* for "
                        "SSL, SASL_PLAINTEXT and SASL_SSL listeners).")
    p.add_argument("--zookeeper", metavar="<String: urls>", help=argparse.SUPPRESS)  # refused with a message
    p.add_argument("--version", action="version", version=f"{__version__} (strata)")
    return p


def _add_topics_parser(commands: Any) -> None:
    p = _kafka_tool_parser(commands, "topics", "kafka-topics.sh", "Create, delete, describe, or change a topic")
    for action, text in (("list", "List all available topics."), ("create", "Create a new topic."),
                         ("delete", "Delete a topic."), ("describe", "List details for the given topics."),
                         ("alter", "Alter the number of partitions and replica assignment.")):
        p.add_argument(f"--{action}", action="store_true", help=text)
    p.add_argument("--topic", metavar="<String: topic>",
                   help="The topic to create, alter, describe or delete; a regular expression except with --create.")
    p.add_argument("--topic-id", metavar="<String: topic-id>", help="The topic-id to describe.")
    p.add_argument("--config", action="append", metavar="<String: name=value>",
                   help="A topic configuration override for the topic being created (repeatable).")
    p.add_argument("--delete-config", action="append", metavar="<String: name>",
                   help="Not supported with --bootstrap-server (use kafka-configs.sh).")
    p.add_argument("--partitions", type=int, metavar="<Integer: # of partitions>",
                   help="The number of partitions for the topic being created or altered.")
    p.add_argument("--replication-factor", type=int, metavar="<Integer: replication factor>",
                   help="The replication factor for each partition in the topic being created.")
    p.add_argument("--replica-assignment", metavar="<String: b1:b2,b3:b4,...>",
                   help="Manual partition-to-broker assignments for the topic being created or altered.")
    for flag, text in (("under-replicated-partitions", "only show under replicated partitions"),
                       ("unavailable-partitions", "only show partitions whose leader is not available"),
                       ("under-min-isr-partitions", "only show partitions whose isr count is less than the minimum"),
                       ("at-min-isr-partitions", "only show partitions whose isr count is equal to the minimum"),
                       ("topics-with-overrides", "only show topics that have overridden configs")):
        p.add_argument(f"--{flag}", action="store_true", help=f"if set when describing topics, {text}")
    p.add_argument("--if-exists", action="store_true",
                   help="if set when altering or deleting or describing topics, act only if the topic exists")
    p.add_argument("--if-not-exists", action="store_true",
                   help="if set when creating topics, act only if the topic does not already exist")
    p.add_argument("--exclude-internal", action="store_true",
                   help="exclude internal topics when running list or describe command")
    p.add_argument("--partition-size-limit-per-response", type=int, metavar="<Integer>", help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_kafka_tool, tool="topics_cmd", command_parser=p)


def _add_configs_parser(commands: Any) -> None:
    p = _kafka_tool_parser(commands, "configs", "kafka-configs.sh",
                           "Describe or alter topic, broker, client quota and SCRAM user configs")
    p.add_argument("--describe", action="store_true", help="List configs for the given entity.")
    p.add_argument("--alter", action="store_true", help="Alter the configuration for the entity.")
    p.add_argument("--all", action="store_true",
                   help="List all configs for the given topic or broker (includes static and default configs).")
    p.add_argument("--entity-type", action="append", metavar="<String>",
                   help="Type of entity (topics/clients/users/brokers/broker-loggers; ips and client-metrics are "
                        "not in Strata). 'users' and 'clients' may be given together.")
    p.add_argument("--entity-name", dest="entity_names", action="append", metavar="<String>",
                   help="Name of entity (topic name/client id/user principal name/broker id)")
    p.add_argument("--entity-default", dest="entity_names", action="append_const", const="",
                   help="Default entity name for clients/users/brokers (applies to the corresponding --entity-type)")
    p.add_argument("--add-config", metavar="<String>",
                   help="Key Value pairs of configs to add: 'k1=v1,k2=[v1,v2,v2],k3=v3'. For users and clients: "
                        "producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate; for "
                        "users also 'SCRAM-SHA-256=[iterations=8192,password=secret]' (and SCRAM-SHA-512).")
    p.add_argument("--add-config-file", metavar="<String>", help="Path to a properties file with configs to add.")
    p.add_argument("--delete-config", action="append", metavar="<String>", help="config keys to remove 'k1,k2'")
    p.add_argument("--force", action="store_true", help="Suppress console prompts")
    p.add_argument("--topic", metavar="<String>", help="The topic's name.")
    p.add_argument("--client", metavar="<String>", help="The client's ID.")
    p.add_argument("--client-defaults", action="store_true", help="The config defaults for all clients.")
    p.add_argument("--user", metavar="<String>", help="The user's principal name.")
    p.add_argument("--user-defaults", action="store_true", help="The config defaults for all users.")
    p.add_argument("--broker", metavar="<String>", help="The broker's ID.")
    p.add_argument("--broker-defaults", action="store_true", help="The config defaults for all brokers.")
    p.add_argument("--broker-logger", metavar="<String>", help="The broker's ID for its logger config.")
    p.add_argument("--ip", metavar="<String>", help="The IP address (IP quotas are not in Strata).")
    p.add_argument("--ip-defaults", action="store_true", help="The config defaults for all IPs (not in Strata).")
    p.set_defaults(func=_cmd_kafka_tool, tool="configs_cmd", command_parser=p)


def _add_consumer_groups_parser(commands: Any) -> None:
    p = _kafka_tool_parser(commands, "consumer-groups", "kafka-consumer-groups.sh",
                           "List, describe, delete consumer groups and reset their offsets")
    p.add_argument("--group", action="append", metavar="<String: consumer group>",
                   help="The consumer group we wish to act on (repeatable).")
    p.add_argument("--topic", action="append", metavar="<String: topic>",
                   help="The topic (for --reset-offsets also topic:0,1,2) to act on (repeatable).")
    p.add_argument("--all-topics", action="store_true",
                   help="Consider all topics assigned to a group in the `reset-offsets` process.")
    p.add_argument("--list", action="store_true", help="List all consumer groups.")
    p.add_argument("--describe", action="store_true",
                   help="Describe consumer group and list offset lag (number of messages not yet processed).")
    p.add_argument("--all-groups", action="store_true", help="Apply to all consumer groups.")
    p.add_argument("--delete", action="store_true", help="Pass in groups to delete their offsets and ownership.")
    p.add_argument("--delete-offsets", action="store_true", help="Delete offsets of consumer group.")
    p.add_argument("--timeout", type=int, default=5000, metavar="<Long: timeout (ms)>",
                   help="The timeout for some use cases (default 5000).")
    p.add_argument("--reset-offsets", action="store_true",
                   help="Reset offsets of consumer group; --dry-run (the default) or --execute.")
    p.add_argument("--dry-run", action="store_true", help="Only show results without executing changes.")
    p.add_argument("--execute", action="store_true", help="Execute operation.")
    p.add_argument("--export", action="store_true", help="Export operation execution to a CSV format.")
    p.add_argument("--to-offset", type=int, metavar="<Long: offset>", help="Reset offsets to a specific offset.")
    p.add_argument("--from-file", metavar="<String: path to CSV file>",
                   help="Reset offsets to values defined in CSV file.")
    p.add_argument("--to-datetime", metavar="<String: datetime>",
                   help="Reset offsets to offset from datetime. Format: 'YYYY-MM-DDTHH:mm:SS.sss'")
    p.add_argument("--by-duration", metavar="<String: duration>",
                   help="Reset offsets to offset by duration from current timestamp. Format: 'PnDTnHnMnS'")
    p.add_argument("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    p.add_argument("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    p.add_argument("--to-current", action="store_true", help="Reset offsets to current offset.")
    p.add_argument("--shift-by", type=int, metavar="<Long: number-of-offsets>",
                   help="Reset offsets shifting current offset by 'n', where 'n' can be positive or negative.")
    p.add_argument("--members", action="store_true", help="Describe members of the group.")
    p.add_argument("--verbose", dest="members_verbose", action="store_true",
                   help="Provide additional information: epochs and assignments with --members, epochs with --state, "
                        "leader epochs with --offsets.")
    p.add_argument("--offsets", action="store_true",
                   help="Describe the group's partitions with their offset lag (the default of --describe).")
    p.add_argument("--state", nargs="?", const="", metavar="<String>",
                   help="With --describe the group's state; with --list the state of all groups, or only those in "
                        "the given states (stable,empty,...).")
    p.add_argument("--type", nargs="?", const="", metavar="<String>",
                   help="With --list, the groups' types, or only those of the given types (classic,consumer).")
    p.set_defaults(func=_cmd_kafka_tool, tool="consumer_groups_cmd", command_parser=p)


def _add_share_groups_parser(commands: Any) -> None:
    p = _kafka_tool_parser(commands, "share-groups", "kafka-share-groups.sh",
                           "List, describe, delete share groups (KIP-932) and reset their offsets")
    p.add_argument("--group", action="append", metavar="<String: share group>",
                   help="The share group we wish to act on (repeatable).")
    p.add_argument("--topic", action="append", metavar="<String: topic>",
                   help="The topic whose offset information should be deleted or included in the reset offset "
                        "process; for --reset-offsets also topic:0,1,2 (repeatable).")
    p.add_argument("--all-topics", action="store_true",
                   help="Consider all topics assigned to a share group in the 'reset-offsets' process.")
    p.add_argument("--list", action="store_true", help="List all share groups.")
    p.add_argument("--describe", action="store_true", help="Describe share group, members and offset information.")
    p.add_argument("--all-groups", action="store_true", help="Apply to all share groups.")
    p.add_argument("--delete", action="store_true", help="Delete share group.")
    p.add_argument("--delete-offsets", action="store_true",
                   help="Delete offsets of share group. Supports one share group at the time, and multiple topics.")
    p.add_argument("--timeout", type=int, default=30000, metavar="<Long: timeout (ms)>",
                   help="The timeout for some use cases (default 30000).")
    p.add_argument("--reset-offsets", action="store_true",
                   help="Reset offsets of share group (one group, inactive): --dry-run or --execute, one of "
                        "--to-datetime, --to-earliest, --to-latest, and --all-topics or --topic.")
    p.add_argument("--dry-run", action="store_true", help="Only show results without executing changes.")
    p.add_argument("--execute", action="store_true", help="Execute operation.")
    p.add_argument("--to-datetime", metavar="<String: datetime>",
                   help="Reset offsets to offset from datetime. Format: 'YYYY-MM-DDThh:mm:ss.sss'")
    p.add_argument("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    p.add_argument("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    p.add_argument("--members", action="store_true", help="Describe members of the group (with --describe).")
    p.add_argument("--offsets", action="store_true",
                   help="Describe the group's share-partitions with their start offsets (the default of --describe).")
    p.add_argument("--verbose", dest="members_verbose", action="store_true",
                   help="Provide additional information when describing the group: member epochs with --members, "
                        "epochs with --state, leader epochs with --offsets.")
    p.add_argument("--state", nargs="?", const="", metavar="<String>",
                   help="With --describe the group's state; with --list the state of all groups, or only those in "
                        "the given states (Empty, Stable, Dead).")
    p.set_defaults(func=_cmd_kafka_tool, tool="share_groups_cmd", command_parser=p)


def _add_acls_parser(commands: Any) -> None:
    p = _kafka_tool_parser(commands, "acls", "kafka-acls.sh", "Add, remove and list ACLs")
    for action, text in (("add", "Indicates you are trying to add ACLs."),
                         ("remove", "Indicates you are trying to remove ACLs."),
                         ("list", "List ACLs for the specified resource, use --topic <topic> or --group <group> or "
                                  "--cluster to specify a resource.")):
        p.add_argument(f"--{action}", action="store_true", help=text)
    for flag, text in (("topic", "topic to which ACLs should be added or removed. A value of '*' indicates ACL "
                                 "should apply to all topics."),
                       ("group", "Consumer Group to which the ACLs should be added or removed. A value of '*' "
                                 "indicates the ACLs should apply to all groups."),
                       ("transactional-id", "The transactionalId to which ACLs should be added or removed. A value "
                                            "of '*' indicates the ACLs should apply to all transactionalIds."),
                       ("delegation-token", "Delegation token to which ACLs should be added or removed. A value of "
                                            "'*' indicates ACL should apply to all tokens."),
                       ("user-principal", "Specifies a user principal as a resource in relation with the operation "
                                          "(CreateTokens, DescribeTokens).")):
        p.add_argument(f"--{flag}", action="append", metavar=f"<String: {flag}>", help=f"{text} (repeatable)")
    p.add_argument("--cluster", action="store_true", help="Add/Remove cluster ACLs.")
    p.add_argument("--idempotent", action="store_true",
                   help="Enable idempotence for the producer (with --producer: IdempotentWrite on the cluster).")
    p.add_argument("--resource-pattern-type", metavar="<ANY|MATCH|LITERAL|PREFIXED>",
                   help="The type of the resource pattern or pattern filter (default: LITERAL). When adding acls, "
                        "'literal' or 'prefixed'; when listing or removing also 'any' (any pattern type, exactly "
                        "this name) or 'match' (every ACL that affects the named resources: use with care with "
                        "--remove).")
    p.add_argument("--operation", action="append", metavar="<String>",
                   help="Operation that is being allowed or denied (default: All): All, Read, Write, Create, "
                        "Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, "
                        "CreateTokens, DescribeTokens (repeatable).")
    p.add_argument("--allow-principal", action="append", metavar="<String: allow-principal>",
                   help="principal is in principalType:name format; User:'*' is every user (repeatable).")
    p.add_argument("--deny-principal", action="append", metavar="<String: deny-principal>",
                   help="principal is in principalType:name format. Deny rules take precedence over allow rules "
                        "(repeatable).")
    p.add_argument("--principal", action="append", nargs="?", const=None, metavar="<String: principal>",
                   help="With --list, only the ACLs of this principal (principalType:name; repeatable).")
    p.add_argument("--allow-host", action="append", metavar="<String: allow-host>",
                   help="Host from which principals listed in --allow-principal will have access (default '*').")
    p.add_argument("--deny-host", action="append", metavar="<String: deny-host>",
                   help="Host from which principals listed in --deny-principal will be denied access (default '*').")
    p.add_argument("--producer", action="store_true",
                   help="Convenience option to add/remove ACLs for producer role: WRITE, DESCRIBE and CREATE on "
                        "topic (WRITE, DESCRIBE on --transactional-id).")
    p.add_argument("--consumer", action="store_true",
                   help="Convenience option to add/remove ACLs for consumer role: READ, DESCRIBE on topic and READ "
                        "on group.")
    p.add_argument("--force", action="store_true", help="Assume Yes to all queries and do not prompt.")
    p.add_argument("--authorizer-properties", action="append", help=argparse.SUPPRESS)  # refused with a message
    p.add_argument("--authorizer", help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_kafka_tool, tool="acls_cmd", command_parser=p)


def _add_remote_log_metadata_migration_parser(commands: Any) -> None:
    p = _kafka_tool_parser(commands, "remote-log-metadata-migration", "kafka-remote-log-metadata-migration.sh",
                           "Move __remote_log_metadata to a compacted topic (KIP-1266: version 0 -> 1 -> 2)")
    p.add_argument("--upgrade-to-v1", action="store_true",
                   help="Version 1: cleanup.policy=compact,delete with retention.ms and min.compaction.lag.ms set to "
                        "--retention-ms, so the records without a key expire before the cleaner may drop them.")
    p.add_argument("--retention-ms", metavar="<Long: retention ms>",
                   help="With --upgrade-to-v1: how long records are kept while at version 1; longer than the "
                        "retention of every topic with remote storage enabled.")
    p.add_argument("--check", action="store_true",
                   help="Scan the topic for records without a key (exit 1 while any remain); with --upgrade-to-v2 "
                        "the scan decides.")
    p.add_argument("--upgrade-to-v2", action="store_true",
                   help="Version 2: cleanup.policy=compact, retention.ms and min.compaction.lag.ms overrides removed; "
                        "refused while records without a key remain.")
    p.add_argument("--force", action="store_true",
                   help="With --upgrade-to-v2: skip the scan (records without a key left are lost to the cleaner).")
    p.set_defaults(func=_cmd_kafka_tool, tool="remote_log_metadata_migration_cmd", command_parser=p)


def _cmd_kafka_tool(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import importlib

    module = importlib.import_module(f"strata.tools.{args.tool}")
    return int(module.run(args, parser))


def configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)
    logging.getLogger().setLevel(level)


def _cmd_dump_log(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from strata.log.dump import DumpOptions, EventKind, collect_json, dump_paths, format_event

    paths: list[Path] = list(args.paths)
    if args.files:
        paths.extend(Path(p.strip()) for p in args.files.split(",") if p.strip())
    if not paths:
        parser.error("dump-log needs at least one PATH (or --files)")
    options = DumpOptions(deep=args.deep, print_data=args.print_data, index_sanity_check=args.index_sanity_check,
                          verify_index_only=args.verify_index_only, max_bytes=args.max_bytes)
    events = dump_paths(paths, options)
    if args.json:
        files = collect_json(events)
        json.dump(files, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 1 if any(not f["valid"] for f in files) else 0
    failed = False
    for event in events:
        failed = failed or event.kind is EventKind.PROBLEM
        text = format_event(event)
        if text is not None:
            print(text)
    return 1 if failed else 0


def _cmd_demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from strata.demo import DemoError, run_demo

    try:
        return run_demo(args.dir, out=sys.stdout)
    except DemoError as e:
        print(f"strata demo: {e}", file=sys.stderr)
        return 1


def _cmd_serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from strata.config.broker_config import BrokerConfig
    from strata.errors import ClusterError, InvalidConfigError, KafkaStorageError

    overrides = {}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    try:
        config = BrokerConfig.load(args.config, overrides)
    except InvalidConfigError as e:
        print(f"strata serve: invalid configuration: {e}", file=sys.stderr)
        return 2
    from strata.broker.server import serve

    logging.getLogger("strata.lifecycle").setLevel(logging.INFO)
    # `kill -QUIT <pid>` (kill -3, as for a JVM) prints every thread's stack to the broker's stderr: what a
    # stuck broker is doing. Not SIGUSR1: the crash suite arms its crash points with that one.
    faulthandler.register(signal.SIGQUIT, all_threads=True)
    try:
        serve(config)
    except InvalidConfigError as e:  # found once plugins load (a class that does not exist, bad rsm.config.*)
        print(f"strata serve: invalid configuration: {e}", file=sys.stderr)
        return 2
    except (KafkaStorageError, ClusterError, OSError) as e:  # ZooKeeper unreachable, broker id taken, ...
        print(f"strata serve: {e}", file=sys.stderr)
        return 1
    return 0


def _cmd_version(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    print(f"strata {__version__}")
    return 0


# Options whose values may begin with "-": topic ids are base64url (about one in 64 starts with "-"), and
# argparse takes such a separate word for an option. Kafka's tools accept `--topic-id -5zYj...`.
_DASH_VALUE_OPTIONS = frozenset({"--topic-id"})


def _join_dash_values(words: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] in _DASH_VALUE_OPTIONS and i + 1 < len(words) and words[i + 1].startswith("-"):
            out.append(f"{words[i]}={words[i + 1]}")
            i += 2
            continue
        out.append(words[i])
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        argv = _join_dash_values(list(sys.argv[1:] if argv is None else argv))
        args = parser.parse_args(argv)
        words = list(argv)
        # what followed the subcommand's name, which some of Kafka's messages quote
        args.raw_argv = words[words.index(args.command) + 1:] if args.command in words else words
        configure_logging(args.verbose)
        return int(args.func(args, args.command_parser))
    except SystemExit as e:  # argparse: usage errors (2), --help and --version (0)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except BrokenPipeError:  # `strata dump-log ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
