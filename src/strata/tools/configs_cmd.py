"""``strata configs`` (``kafka-configs.sh``): describe and alter topic and broker configs.

Kafka 3.9's ``ConfigCommand`` with ``--bootstrap-server``: ``--entity-type topics|brokers`` with
``--entity-name`` (or ``--topic``, ``--broker``, ``--entity-default``/``--broker-defaults``),
``--describe [--all]`` printing ``Dynamic configs for topic t are:`` then
``  key=value sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:key=value}``, and ``--alter`` with
``--add-config k1=v1,k2=[a,b]``/``--add-config-file``/``--delete-config k1,k2`` printing
``Completed updating config for topic t.``. Topic changes are IncrementalAlterConfigs, broker
changes the legacy AlterConfigs, as in Kafka. Client quotas, users, ips and client metrics are
not in Strata, so those entity types are refused with a message.
"""

from __future__ import annotations

import argparse
import re
import sys

from strata.client.cluster import KafkaClientError
from strata.client.wire import WireError
from strata.tools.admin import (
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_TOPIC,
    AdminError,
    ConfigEntry,
    KafkaAdmin,
)
from strata.tools.kafka_cli import UsageError, invalid_with, load_properties, open_admin, refuse_zookeeper, usage_exit

TOPICS, BROKERS, BROKER_LOGGERS = "topics", "brokers", "broker-loggers"
ALL_TYPES = ("topics", "clients", "users", "brokers", "ips", "broker-loggers", "client-metrics")
# DescribeConfigs config_source -> the admin client's ConfigEntry.ConfigSource names
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "DYNAMIC_CLIENT_METRICS_CONFIG"}
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER = 1, 2, 3
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"


class ConfigError(Exception):
    """Kafka's IllegalArgumentException/InvalidConfigurationException here: the message on stderr, exit 1."""


def entities(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(entity types, entity names) as ConfigCommandOptions builds them; "" names a default entity."""
    types = list(args.entity_type or [])
    names = list(args.entity_names or [])
    for flag, kind in ((args.topic, TOPICS), (args.broker, BROKERS), (args.broker_logger, BROKER_LOGGERS)):
        if flag is not None:
            types.append(kind)
            names.append(flag)
    if args.broker_defaults:
        types.append(BROKERS)
        names.append("")
    return types, names


def check_args(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """ConfigCommandOptions.checkArgs: UsageError (usage shown) or ConfigError (message only)."""
    if int(args.alter) + int(args.describe) != 1:
        raise UsageError("Command must include exactly one action: --describe, --alter")
    invalid_with(args, "describe", ["alter", "add-config", "delete-config"])
    types, names = entities(args)
    dupes = sorted({t for t in types if types.count(t) > 1})
    if dupes:
        raise ConfigError(f"Duplicate entity type(s) specified: {','.join(dupes)}")
    for t in types:
        if t not in ALL_TYPES:
            raise ConfigError(f"Invalid entity type {t}, the entity type must be one of {', '.join(ALL_TYPES)} with "
                              "a --bootstrap-server or --bootstrap-controller argument")
    if not types:
        raise ConfigError("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {"users", "clients"}:
        raise ConfigError("Only 'users' and 'clients' entity types may be specified together")
    specific = any(x is not None for x in (args.topic, args.broker, args.broker_logger)) or args.broker_defaults
    if (args.entity_type or args.entity_names) and specific:
        raise ConfigError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if args.bootstrap_server is None and args.zookeeper is None:
        raise ConfigError("One of the required --bootstrap-server, --boostrap-controller, or --zookeeper arguments "
                          "must be specified")
    has_name = any(names)
    if has_name and types[0] in (BROKERS, BROKER_LOGGERS):
        for name in names:
            if name and not name.lstrip("-").isdigit():
                raise ConfigError(f"The entity name for {types[0]} must be a valid integer broker id, but it is: "
                                  f"{name}")
    if args.describe and types[0] == BROKER_LOGGERS and not has_name:
        raise ConfigError(f"an entity name must be specified with --describe of {','.join(types)}")
    if args.alter:
        if types[0] in ("users", "clients", BROKERS, "ips"):
            if not names:
                raise ConfigError("an entity-name or default entity must be specified with --alter of users, clients, "
                                  "brokers or ips")
        elif not has_name:
            raise ConfigError(f"an entity name must be specified with --alter of {','.join(types)}")
        if args.add_config is not None and args.add_config_file is not None:
            raise ConfigError("Only one of --add-config or --add-config-file must be specified")
        if args.add_config is None and args.add_config_file is None and not args.delete_config:
            raise ConfigError("At least one of --add-config, --add-config-file, or --delete-config must be "
                              "specified with --alter")
        if len(types) != len(names):
            raise ConfigError("An entity name must be specified for every entity type")
    if types[0] not in (TOPICS, BROKERS, BROKER_LOGGERS):
        raise ConfigError(f"Entity type {types[0]} is not supported by Strata: it has no client quotas, SCRAM "
                          "credentials or client metrics yet")
    return types, names


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if refuse_zookeeper(args, "kafka-configs.sh"):
        return 1
    try:
        types, names = check_args(args)
        admin = open_admin(args)
    except UsageError as e:
        return usage_exit(parser, str(e))
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    try:
        with admin:
            if args.alter:
                alter(admin, args, types[0], names[0])
            else:
                describe(admin, types[0], names[0] if names else None, args.all)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    except (AdminError, KafkaClientError, WireError) as e:
        argv = " ".join(getattr(args, "raw_argv", []))
        print(f"Error while executing config command with args '{argv}'", file=sys.stderr)
        cause = e.java() if isinstance(e, AdminError) else f"org.apache.kafka.common.KafkaException: {e}"
        print(f"java.util.concurrent.ExecutionException: {cause}", file=sys.stderr)
        return 1
    return 0


# -- parsing -------------------------------------------------------------------------------------

def parse_add_config(args: argparse.Namespace) -> dict[str, str]:
    """``--add-config``/``--add-config-file``: commas outside [] separate pairs, [] are dropped from values."""
    props: dict[str, str] = {}
    if args.add_config_file is not None:
        try:
            props.update(load_properties(args.add_config_file))
        except UsageError as e:
            raise ConfigError(str(e)) from None
    if args.add_config is not None:
        pairs = re.split("," + _OUTSIDE_BRACKETS, args.add_config)
        while pairs and pairs[-1] == "":
            pairs.pop()
        split = [re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, pair) for pair in pairs]
        if not all(len(kv) == 2 for kv in split):
            raise ConfigError('requirement failed: Invalid entity config: all configs to be added must be in the '
                              'format "key=val".')
        for key, value in split:
            props[key.strip()] = re.sub(r"[\[\]]", "", value).strip()
    for key in props:
        if not re.fullmatch(r"[a-zA-Z0-9._-]*", key):
            raise ConfigError(f"Invalid character found for config key: {key}")
    return props


def parse_delete_config(args: argparse.Namespace) -> list[str]:
    return [k.strip() for item in args.delete_config or [] for k in item.split(",")]


# -- actions -------------------------------------------------------------------------------------

def _resource(entity_type: str) -> int:
    return {TOPICS: RESOURCE_TOPIC, BROKERS: RESOURCE_BROKER, BROKER_LOGGERS: RESOURCE_BROKER_LOGGER}[entity_type]


def _dynamic_source(entity_type: str, name: str) -> int | None:
    if entity_type == TOPICS:
        return DYNAMIC_TOPIC
    if entity_type == BROKERS:
        return DYNAMIC_DEFAULT_BROKER if name == "" else DYNAMIC_BROKER
    return None  # broker loggers: every entry


def resource_configs(admin: KafkaAdmin, entity_type: str, name: str, synonyms: bool,
                     describe_all: bool) -> list[ConfigEntry]:
    """Kafka's getResourceConfig: the dynamic entries (all with --all), sorted by name."""
    entries = admin.describe_configs(_resource(entity_type), name, synonyms)
    source = None if describe_all else _dynamic_source(entity_type, name)
    return sorted((e for e in entries if source is None or e.source == source), key=lambda e: e.name)


def _value(value: str | None) -> str:
    return "null" if value is None else value


def describe(admin: KafkaAdmin, entity_type: str, name: str | None, describe_all: bool) -> None:
    if name is not None:
        names = [name]
    elif entity_type == TOPICS:
        names = sorted(admin.cluster().topics)
    else:
        names = [str(b) for b in sorted(admin.cluster([]).brokers)] + [""]
    for entity in names:
        if entity == "":
            print(f"Default configs for {entity_type} in the cluster are:")
        else:
            print(f"{'All' if describe_all else 'Dynamic'} configs for {entity_type[:-1]} {entity} are:")
        sys.stdout.flush()
        for e in resource_configs(admin, entity_type, entity, True, describe_all):
            synonyms = ", ".join(f"{SOURCES.get(src, 'UNKNOWN')}:{n}={_value(v)}" for n, v, src in e.synonyms)
            print(f"  {e.name}={_value(e.value)} sensitive={str(e.sensitive).lower()} synonyms={{{synonyms}}}")


def alter(admin: KafkaAdmin, args: argparse.Namespace, entity_type: str, name: str) -> None:
    added = parse_add_config(args)
    deleted = parse_delete_config(args)
    if entity_type == TOPICS:
        old = {e.name for e in resource_configs(admin, entity_type, name, False, False)}
        _check_deletable(deleted, old)
        admin.incremental_alter_configs(RESOURCE_TOPIC, name, added, deleted)
    elif entity_type == BROKERS:
        old_entries = {e.name: e.value for e in resource_configs(admin, entity_type, name, False, False)}
        _check_deletable(deleted, set(old_entries))
        new = {k: v for k, v in {**old_entries, **added}.items() if k not in deleted}
        sensitive = sorted(k for k, v in new.items() if v is None)
        if sensitive:
            raise ConfigError("All sensitive broker config entries must be specified for --alter, missing entries: "
                              f"Set({', '.join(sensitive)})")
        admin.alter_configs(RESOURCE_BROKER, name, new)
    else:
        valid = {e.name for e in resource_configs(admin, entity_type, name, True, False)}
        invalid = [k for k in [*deleted, *added] if k not in valid]
        if invalid:
            raise ConfigError(f"Invalid broker logger(s): {','.join(invalid)}")
        admin.incremental_alter_configs(RESOURCE_BROKER_LOGGER, name, added, deleted)
    if name:
        print(f"Completed updating config for {entity_type[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {entity_type} in the cluster.")


def _check_deletable(deleted: list[str], existing: set[str]) -> None:
    invalid = [k for k in deleted if k not in existing]
    if invalid:
        raise ConfigError(f"Invalid config(s): {','.join(invalid)}")
