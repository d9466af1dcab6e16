"""``strata configs`` (``kafka-configs.sh``): describe and alter topic, broker, client quota and SCRAM configs.

Kafka 3.9's ``ConfigCommand`` with ``--bootstrap-server``: ``--entity-type topics|brokers|broker-loggers|
users|clients`` with ``--entity-name`` or ``--entity-default`` (or ``--topic``, ``--broker``,
``--broker-defaults``, ``--broker-logger``, ``--user``, ``--user-defaults``, ``--client``,
``--client-defaults``); ``users`` and ``clients`` may be given together, naming a user's client-id.

Topics and brokers: ``--describe [--all]`` prints ``Dynamic configs for topic t are:`` then
``  key=value sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:key=value}``, ``--alter`` takes
``--add-config k1=v1,k2=[a,b]``/``--add-config-file``/``--delete-config k1,k2`` and prints
``Completed updating config for topic t.``. Topic changes are IncrementalAlterConfigs, broker changes the
legacy AlterConfigs, as in Kafka.

Users and clients: the quota keys (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
``controller_mutation_rate``) go through DescribeClientQuotas/AlterClientQuotas; a user's
``SCRAM-SHA-256=[iterations=8192,password=secret]`` (or ``SCRAM-SHA-512``) through
AlterUserScramCredentials, with a random salt and the salted password (PBKDF2-HMAC) computed here, so the
password never leaves the tool; ``--delete-config SCRAM-SHA-512`` removes a credential. ``--describe`` prints
``Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1024.0`` (Java's
``Double.toString`` of the values; ``the default user-principal`` for a default entity) and, for users
without a client-id or default, ``SCRAM credential configs for user-principal 'alice' are
SCRAM-SHA-256=iterations=8192``. Quotas and SCRAM credentials cannot be changed in one command, nor a
default user's SCRAM credentials, with Kafka's messages. IP quotas and client metrics are not in Strata, so
``ips`` and ``client-metrics`` are refused with a message.
"""

from __future__ import annotations

import argparse
import math
import re
import secrets
import sys
from collections.abc import Iterable
from decimal import Decimal

from strata.client.cluster import KafkaClientError
from strata.client.wire import WireError
from strata.quota.client import QUOTA_KEYS
from strata.security.scram_credentials import DEFAULT_ITERATIONS, MECHANISM_TYPES, MECHANISMS, salted_password
from strata.tools.admin import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_NOT_FOUND,
    RESOURCE_TOPIC,
    AdminError,
    ConfigEntry,
    KafkaAdmin,
    ScramUpsertion,
)
from strata.tools.kafka_cli import UsageError, invalid_with, load_properties, open_admin, refuse_zookeeper, usage_exit

TOPICS, BROKERS, BROKER_LOGGERS = "topics", "brokers", "broker-loggers"
USERS, CLIENTS, IPS = "users", "clients", "ips"
# ClientQuotaEntity's entity types, and how describe names them
QUOTA_ENTITY = {USERS: "user", CLIENTS: "client-id"}
ENTITY_WORDS = (("user", "user-principal"), ("client-id", "client-id"), ("ip", "ip"))
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
    """(entity types, entity names) as ConfigCommandOptions builds them; "" names a default entity.

    ``--entity-type``/``--entity-name``/``--entity-default`` in command-line order, then the specific flags
    in Kafka's order (topic, client, user, broker, broker logger, ip), then the ``--*-defaults`` flags.
    """
    types = list(args.entity_type or [])
    names = list(args.entity_names or [])
    for flag, kind in _specific_flags(args):
        types.append(kind)
        names.append(flag)
    for flag, kind in _default_flags(args):
        if flag:
            types.append(kind)
            names.append("")
    return types, names


def _specific_flags(args: argparse.Namespace) -> list[tuple[str, str]]:
    flags = ((getattr(args, "topic", None), TOPICS), (getattr(args, "client", None), CLIENTS),
             (getattr(args, "user", None), USERS), (getattr(args, "broker", None), BROKERS),
             (getattr(args, "broker_logger", None), BROKER_LOGGERS), (getattr(args, "ip", None), IPS))
    return [(value, kind) for value, kind in flags if value is not None]


def _default_flags(args: argparse.Namespace) -> list[tuple[bool, str]]:
    return [(bool(getattr(args, "client_defaults", False)), CLIENTS),
            (bool(getattr(args, "user_defaults", False)), USERS),
            (bool(getattr(args, "broker_defaults", False)), BROKERS),
            (bool(getattr(args, "ip_defaults", False)), IPS)]


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
    specific = bool(_specific_flags(args)) or any(flag for flag, _ in _default_flags(args))
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
        if any(t in (USERS, CLIENTS, BROKERS, IPS) for t in types):
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
    if types[0] not in (TOPICS, BROKERS, BROKER_LOGGERS, USERS, CLIENTS):
        missing = "IP connection quotas" if types[0] == IPS else "client metrics"
        raise ConfigError(f"Entity type {types[0]} is not supported by Strata: it has no {missing} yet")
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
            if types[0] in (USERS, CLIENTS):
                if args.alter:
                    alter_users_clients(admin, args, types, names)
                else:
                    describe_users_clients(admin, types, names)
            elif args.alter:
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
        while args.add_config and pairs and pairs[-1] == "":  # Java's split: "" stays one (invalid) item
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


# -- users and clients: client quotas and SCRAM credentials --------------------------------------

_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?"
                          r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+[fFdD]?)", re.ASCII)
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)")
_JAVA_INT_RANGE = (-(2**31), 2**31 - 1)


def java_double(value: float) -> str:
    """Java's ``Double.toString``: ``1024.0``, ``0.5``, ``1.048576E7`` (10^7 and up, or below 10^-3)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return f"{sign}0.0"
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent = int(exponent) + len(digit_tuple) - len(digits)
    n = len(digits) + exponent - 1  # value = d.ddd * 10^n
    if 1e-3 <= abs(value) < 1e7:
        if n >= 0:
            whole, fraction = digits[:n + 1].ljust(n + 1, "0"), digits[n + 1:]
        else:
            whole, fraction = "0", "0" * (-n - 1) + digits
        return f"{sign}{whole}.{fraction or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{n}"


def java_parse_double(text: str) -> float:
    """Java's ``Double.parseDouble`` (surrounding whitespace, ``NaN``, ``Infinity``, an ``f``/``d`` suffix, hex
    floats); ValueError for anything else."""
    s = text.strip("".join(map(chr, range(33))))
    if not _JAVA_DOUBLE.fullmatch(s):
        raise ValueError(text)
    body = s.rstrip("fFdD") if not s.endswith("Infinity") else s
    if "x" in body.lower():
        return float.fromhex(body)
    return float(body)


def _java_int(text: str) -> int:
    """Scala's ``toInt``: NumberFormatException (an IllegalArgumentException, so only its message) when not
    an int."""
    if re.fullmatch(r"[+-]?[0-9]+", text):
        value = int(text)
        if _JAVA_INT_RANGE[0] <= value <= _JAVA_INT_RANGE[1]:
            return value
    raise ConfigError(f'For input string: "{text}"')


def _scala_set(items: Iterable[str]) -> str:
    return f"Set({', '.join(dict.fromkeys(items))})"


def _scala_buffer(items: Iterable[str]) -> str:
    return f"ArrayBuffer({', '.join(items)})"


def _quota_components(types: list[str], names: list[str]) -> list[tuple[str, int, str | None]]:
    """getAllClientQuotasConfigs' filter: a component per entity type, exact, default or any name."""
    if len(names) > len(types):
        raise ConfigError("More entity names specified than entity types")
    components = []
    for i, entity_type in enumerate(types):
        kind = QUOTA_ENTITY[entity_type]
        if i >= len(names):
            components.append((kind, MATCH_SPECIFIED, None))
        elif names[i] == "":
            components.append((kind, MATCH_DEFAULT, None))
        else:
            components.append((kind, MATCH_EXACT, names[i]))
    return components


def _entity_text(entity: Iterable[tuple[str, str | None]]) -> str:
    by_type = dict(entity)
    parts = []
    for kind, word in ENTITY_WORDS:
        if kind in by_type:
            name = by_type[kind]
            parts.append(f"{word} '{name}'" if name is not None else f"the default {word}")
    return ", ".join(parts)


def describe_users_clients(admin: KafkaAdmin, types: list[str], names: list[str]) -> None:
    """describeClientQuotaAndUserScramCredentialConfigs: the quotas, then (users alone, no default) SCRAM."""
    for entry in admin.describe_client_quotas(_quota_components(types, names), strict=True):
        values = ", ".join(f"{k}={java_double(v)}" for k, v in entry.values.items())
        print(f"Quota configs for {_entity_text(entry.entity)} are {values}")
    if CLIENTS in types or "" in names:
        return
    for result in admin.describe_user_scram_credentials(names):
        if result.error_code == RESOURCE_NOT_FOUND:
            continue
        if result.error_code:
            cause = AdminError(result.error_code, result.error_message).java()
            print(f"Error retrieving SCRAM credential configs for user-principal '{result.user}': "
                  f"ExecutionException: {cause}")
            continue
        text = ", ".join(f"{MECHANISM_TYPES.get(mechanism, 'UNKNOWN')}=iterations={iterations}"
                         for mechanism, iterations in result.credentials)
        print(f"SCRAM credential configs for user-principal '{result.user}' are {text}")


def alter_users_clients(admin: KafkaAdmin, args: argparse.Namespace, types: list[str], names: list[str]) -> None:
    """alterConfig's users/clients case: quotas (AlterClientQuotas) or SCRAM credentials, never both."""
    added = parse_add_config(args)
    deleted = parse_delete_config(args)
    quota_add = any(k in QUOTA_KEYS for k in added)
    scram_add = {k: v for k, v in added.items() if k in MECHANISMS}
    unknown_add = [k for k in added if k not in MECHANISMS and k not in QUOTA_KEYS]
    quota_delete = any(k in QUOTA_KEYS for k in deleted)
    scram_delete = [k for k in deleted if k in MECHANISMS]
    unknown_delete = [k for k in deleted if k not in MECHANISMS and k not in QUOTA_KEYS]
    if types[0] == CLIENTS or len(types) == 2:
        if unknown_add or scram_add:
            raise ConfigError("Only quota configs can be added for 'clients' using --bootstrap-server. Unexpected "
                              f"config names: {_scala_set([*unknown_add, *scram_add])}")
        if unknown_delete or scram_delete:
            raise ConfigError("Only quota configs can be deleted for 'clients' using --bootstrap-server. Unexpected "
                              f"config names: {_scala_buffer([*unknown_delete, *scram_delete])}")
    else:
        if unknown_add:
            raise ConfigError("Only quota and SCRAM credential configs can be added for 'users' using "
                              f"--bootstrap-server. Unexpected config names: {_scala_set(unknown_add)}")
        if unknown_delete:
            raise ConfigError("Only quota and SCRAM credential configs can be deleted for 'users' using "
                              f"--bootstrap-server. Unexpected config names: {_scala_buffer(unknown_delete)}")
        if scram_add or scram_delete:
            if "" in names:
                raise ConfigError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                                  "Credentials using --bootstrap-server.")
            if quota_add or quota_delete:
                raise ConfigError("Cannot alter both quota and SCRAM credential configs simultaneously for 'users' "
                                  "using --bootstrap-server.")
    if quota_add or quota_delete:
        alter_quotas(admin, types, names, added, deleted)
    else:
        alter_scram(admin, names[0], scram_add, scram_delete)
    if names[0]:
        print(f"Completed updating config for {types[0][:-1]} {names[0]}.")
    else:
        print(f"Completed updating default config for {types[0]} in the cluster.")


def alter_quotas(admin: KafkaAdmin, types: list[str], names: list[str], added: dict[str, str],
                 deleted: list[str]) -> None:
    entries = admin.describe_client_quotas(_quota_components(types, names), strict=True)
    old = entries[0].values if entries else {}
    _check_deletable(deleted, set(old))
    ops: list[tuple[str, float | None]] = []
    for key, value in added.items():
        try:
            ops.append((key, java_parse_double(value)))
        except ValueError:
            raise ConfigError(f"Cannot parse quota configuration value for {key}: {value}") from None
    ops += [(key, None) for key in deleted]
    entity = [(QUOTA_ENTITY[t], name or None) for t, name in zip(types, names, strict=True)]
    admin.alter_client_quotas(entity, ops)


def alter_scram(admin: KafkaAdmin, user: str, added: dict[str, str], deleted: list[str]) -> None:
    """alterUserScramCredentialConfigs plus the admin client's checks; the salt is Kafka's (the UTF-8 of a
    random 130-bit number in base 36) and only the salted password is sent."""
    deletions = [(user, MECHANISMS[m].type) for m in deleted]
    credentials = []
    for mechanism, text in added.items():
        spec = MECHANISMS[mechanism]
        match = _CREDENTIAL.fullmatch(text)
        if match is None:
            raise ConfigError(f"Invalid credential property {mechanism.replace('-', '_')}={text}")
        iterations_text, password = match.groups()
        iterations = DEFAULT_ITERATIONS if iterations_text in (None, "-1") else _java_int(iterations_text)
        if iterations < spec.min_iterations:
            raise ConfigError(f"Iterations {iterations} is less than the minimum {spec.min_iterations} required for "
                              f"{mechanism}")
        credentials.append((mechanism, iterations, password))
    if any(password == "" for _, _, password in credentials):
        raise AdminError(93, "Password must not be empty")  # the admin client's check: nothing is sent
    upsertions = []
    for mechanism, iterations, password in credentials:
        salt = _base36(secrets.randbits(130)).encode()
        upsertions.append(ScramUpsertion(user, MECHANISMS[mechanism].type, iterations, salt,
                                         salted_password(mechanism, password, salt, iterations)))
    if deletions or upsertions:
        admin.alter_user_scram_credentials(deletions, upsertions)


def _base36(value: int) -> str:
    """Java's ``BigInteger.toString(36)`` of a non-negative number."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, rest = divmod(value, 36)
        out = digits[rest] + out
        if value == 0:
            return out
