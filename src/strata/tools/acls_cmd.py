"""``strata acls`` (``kafka-acls.sh``): add, remove and list ACLs over the Kafka protocol.

Kafka 3.9's ``AclCommand`` with ``--bootstrap-server`` (its AdminClientService): the same flags and checks
(exactly one of ``--add/--remove/--list``; ``--producer`` and ``--consumer`` generate the ACLs of those roles
and refuse ``--operation`` and ``--deny-*``; ``--resource-pattern-type`` literal/prefixed for adding, any/match
too for listing and removing), the same output (``Adding ACLs for resource `ResourcePattern(...)`:`` with one
tab-indented ``(principal=..., host=..., operation=..., permissionType=...)`` line per ACL, then the resource's
current ACLs), the same failures (``Error while executing ACL command: ...`` on stdout, exit code 1).

``--authorizer-properties`` (the ZooKeeper authorizer, removed in Kafka 4.0) is refused with a pointer to
``--bootstrap-server``, as ``--zookeeper`` is by the other tools. Kafka prints resources and entries in hash
order; this prints them sorted, so scripts and tests see a stable order.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from strata.client.cluster import KafkaClientError
from strata.client.wire import WireError
from strata.security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    parse_principal,
    supported_operations,
)
from strata.tools.admin import AdminError, KafkaAdmin
from strata.tools.kafka_cli import UsageError, error_class, has, invalid_with, open_admin, usage_exit

ACTIONS = ("add", "remove", "list")
CLUSTER_FILTER = ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
PATTERN_TYPES = ("ANY", "MATCH", "LITERAL", "PREFIXED")  # Kafka's PatternType less UNKNOWN, as jopt lists them

# A resource filter -> the entries to add or remove there (an empty set: every ACL of the resource).
FilterAcls = dict[ResourcePatternFilter, set[AccessControlEntry]]


class CommandError(Exception):
    """What Kafka's AclCommand reports as ``Error while executing ACL command: <message>`` (exit code 1)."""


def check_args(args: argparse.Namespace) -> None:
    """AclCommandOptions.checkArgs of Kafka 3.9 (the admin-client branch), in its order."""
    if not has(args, "bootstrap-server"):
        raise UsageError("One of --bootstrap-server or --authorizer-properties must be specified")
    if sum(has(args, a) for a in ACTIONS) != 1:
        raise UsageError("Command must include exactly one action: --list, --add, --remove. ")
    invalid_with(args, "list", ["producer", "consumer", "allow-host", "allow-principal", "deny-host",
                                "deny-principal"])
    invalid_with(args, "producer", ["operation", "deny-principal", "deny-host"])
    invalid_with(args, "consumer", ["operation", "deny-principal", "deny-host"])
    if args.principal is not None and not args.list:
        raise UsageError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise UsageError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group
                          or (not args.producer and (args.cluster or args.transactional_id))):
        raise UsageError("With --consumer you must specify a --topic and a --group and no --cluster or "
                         "--transactional-id option should be specified.")


def pattern_type(args: argparse.Namespace) -> PatternType:
    """``--resource-pattern-type`` (case-insensitive, as jopt's EnumConverter; LITERAL when absent)."""
    raw = args.resource_pattern_type
    if raw is None:
        return PatternType.LITERAL
    if raw.upper() not in PATTERN_TYPES:
        raise UsageError(f"Cannot parse argument '{raw}' of option resource-pattern-type "
                         f"(one of {'|'.join(PATTERN_TYPES)})")
    return PatternType[raw.upper()]


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.authorizer_properties is not None or args.authorizer is not None:
        print("kafka-acls.sh: --authorizer-properties is not supported: Strata's tools talk to the brokers over the "
              "Kafka protocol only (Kafka 4.0 removed the option too). Use --bootstrap-server HOST:PORT instead.",
              file=sys.stderr)
        return 1
    try:
        check_args(args)
        ptype = pattern_type(args)
        if args.add:
            plan: FilterAcls = resource_to_acls(args, ptype)
        elif args.remove:
            plan = resource_filter_to_acls(args, ptype)
        admin = open_admin(args)
    except UsageError as e:
        return usage_exit(parser, str(e))
    except CommandError as e:  # a principal or operation the broker would never see
        return _failed(e)
    try:
        with admin:
            if args.add:
                add(admin, plan)
            elif args.remove:
                remove(admin, plan, args.force)
            list_acls(admin, args, ptype)  # after --add and --remove too, as Kafka 3.9 does
    except (AdminError, CommandError, KafkaClientError, WireError) as e:
        return _failed(e)
    return 0


def _failed(e: Exception) -> int:
    message = e.java() if isinstance(e, AdminError) else str(e)
    print(f"Error while executing ACL command: {message}")
    print(f"ERROR {error_class(e)}: {e} (kafka.admin.AclCommand$)", file=sys.stderr)
    return 1


# -- what the flags ask for (AclCommand.getResourceFilterToAcls and friends) -----------------------------------

def resource_filters(args: argparse.Namespace, ptype: PatternType,
                     required: bool = True) -> list[ResourcePatternFilter]:
    """The resources named by ``--topic``, ``--cluster`` (and ``--idempotent``), ``--group``,
    ``--transactional-id``, ``--delegation-token`` and ``--user-principal``, with the pattern type;
    the cluster only with a LITERAL pattern type, as in Kafka."""
    out: list[ResourcePatternFilter] = []

    def add(resource_type: ResourceType, names: list[str] | None, strip: bool = True) -> None:
        for name in names or ():
            f = ResourcePatternFilter(resource_type, name.strip() if strip else name, ptype)
            if f not in out:
                out.append(f)

    add(ResourceType.TOPIC, args.topic)
    if ptype == PatternType.LITERAL and (args.cluster or args.idempotent):
        out.append(CLUSTER_FILTER)
    add(ResourceType.GROUP, args.group)
    add(ResourceType.TRANSACTIONAL_ID, args.transactional_id, strip=False)  # Kafka does not trim these
    add(ResourceType.DELEGATION_TOKEN, args.delegation_token)
    add(ResourceType.USER, args.user_principal)
    if not out and required:
        raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
                         "--delegation-token <Delegation Token ID>")
    return out


def principals(values: list[str] | None) -> list[str]:
    """``--allow-principal`` / ``--deny-principal`` values as ``Type:name`` (Kafka's parseKafkaPrincipal)."""
    out = []
    for raw in values or ():
        try:
            kind, name = parse_principal(raw.strip())
        except ValueError as e:
            raise CommandError(str(e)) from None
        out.append(f"{kind}:{name}")
    return out


def hosts(values: list[str] | None, principal_values: list[str] | None) -> list[str]:
    """The hosts of ``--allow-host``/``--deny-host``; ``*`` when only principals were given."""
    if values:
        return [h.strip() for h in values]
    return [WILDCARD_HOST] if principal_values else []


def operations(values: list[str] | None) -> list[AclOperation]:
    """``--operation`` values by Kafka's names (``Read``, ``IdempotentWrite``, any case); All when absent."""
    out = []
    for raw in values or ["All"]:
        op = AclOperation.from_name(raw.strip())
        if op in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise CommandError(f"Unknown operation name {raw.strip()}")
        out.append(op)
    return out


def entries(args: argparse.Namespace, ops: Iterable[AclOperation]) -> set[AccessControlEntry]:
    """Every (principal, operation, host) of the allow flags as ALLOW entries and of the deny flags as DENY."""
    out = set()
    for permission, p_values, h_values in (
            (AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
            (AclPermissionType.DENY, args.deny_principal, args.deny_host)):
        for principal in principals(p_values):
            for op in ops:
                for host in hosts(h_values, p_values):
                    out.add(AccessControlEntry(principal, host, op, permission))
    return out


def resource_filter_to_acls(args: argparse.Namespace, ptype: PatternType) -> FilterAcls:
    """The ACLs per resource: from ``--operation`` and the principals, or the roles of ``--producer`` (WRITE,
    DESCRIBE, CREATE on topics; WRITE, DESCRIBE on transactional ids; IDEMPOTENT_WRITE on the cluster with
    ``--idempotent``) and ``--consumer`` (READ, DESCRIBE on topics; READ on groups)."""
    plan: FilterAcls = {}
    filters = resource_filters(args, ptype)
    if not args.producer and not args.consumer:
        acls = entries(args, operations(args.operation))
        plan.update({f: set(acls) for f in filters})
    if args.producer:
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                plan[f] = entries(args, (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE))
            elif f.resource_type == ResourceType.TRANSACTIONAL_ID:
                plan[f] = entries(args, (AclOperation.WRITE, AclOperation.DESCRIBE))
        if args.idempotent:
            plan[CLUSTER_FILTER] = entries(args, (AclOperation.IDEMPOTENT_WRITE,))
    if args.consumer:
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                plan.setdefault(f, set()).update(entries(args, (AclOperation.READ, AclOperation.DESCRIBE)))
            elif f.resource_type == ResourceType.GROUP:
                plan.setdefault(f, set()).update(entries(args, (AclOperation.READ,)))
    for f, acls in plan.items():  # validateOperation
        valid = supported_operations(f.resource_type) | {AclOperation.ALL}
        if any(a.operation not in valid for a in acls):
            names = ", ".join(op.name for op in sorted(valid))
            raise UsageError(f"ResourceType {f.resource_type.name} only supports operations {names}")
    return plan


def resource_to_acls(args: argparse.Namespace, ptype: PatternType) -> FilterAcls:
    """What ``--add`` adds: a concrete pattern type and at least one principal."""
    if not ptype.is_specific:
        raise UsageError(f"A '--resource-pattern-type' value of '{ptype.name}' is not valid when adding acls.")
    plan = resource_filter_to_acls(args, ptype)
    if any(not acls for acls in plan.values()):
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    return plan


# -- the actions ------------------------------------------------------------------------------------------------

def _entry_lines(acls: Iterable[AccessControlEntry]) -> str:
    """Kafka's ``s"... $Newline ${acls.map("\\t" + _).mkString(Newline)} $Newline"`` body, spaces included."""
    return "\n " + "\n".join(f"\t{a}" for a in sorted(acls, key=AccessControlEntry.sort_key)) + " \n"


def add(admin: KafkaAdmin, plan: FilterAcls) -> None:
    for f, acls in sorted(plan.items(), key=lambda kv: _filter_key(kv[0])):
        pattern = ResourcePattern(f.resource_type, f.name or "", f.pattern_type)
        print(f"Adding ACLs for resource `{pattern}`: {_entry_lines(acls)}")
        admin.create_acls([AclBinding(pattern, a) for a in sorted(acls, key=AccessControlEntry.sort_key)])


def remove(admin: KafkaAdmin, plan: FilterAcls, force: bool) -> None:
    """Delete what the plan names, resource by resource, asking first unless ``--force`` (a resource the user
    says no to is left alone)."""
    for f, acls in sorted(plan.items(), key=lambda kv: _filter_key(kv[0])):
        if acls:
            question = (f"Are you sure you want to remove ACLs: {_entry_lines(acls)} from resource filter `{f}`? "
                        "(y/n)")
        else:
            question = f"Are you sure you want to delete all ACLs for resource filter `{f}`? (y/n)"
        if not force and not _confirm(question):
            continue
        if acls:
            ordered = sorted(acls, key=AccessControlEntry.sort_key)
            admin.delete_acls([AclBindingFilter(f, a.to_filter()) for a in ordered])
        else:
            admin.delete_acls([AclBindingFilter(f, AccessControlEntryFilter.ANY)])  # type: ignore[attr-defined]


def _confirm(question: str) -> bool:
    print(question, flush=True)
    try:
        return input().strip().lower() == "y"
    except EOFError:
        return False


def _filter_key(f: ResourcePatternFilter) -> tuple[int, int, str]:
    return (int(f.resource_type), int(f.pattern_type), f.name or "")


def current_acls(admin: KafkaAdmin, filters: list[ResourcePatternFilter]) -> dict[ResourcePattern,
                                                                                 set[AccessControlEntry]]:
    """The ACLs of the resources the filters match (all ACLs with no filter), by resource pattern."""
    found: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for f in filters or [ResourcePatternFilter.ANY]:  # type: ignore[attr-defined]
        for b in admin.describe_acls(AclBindingFilter(f, AccessControlEntryFilter.ANY)):  # type: ignore[attr-defined]
            found.setdefault(b.pattern, set()).add(b.entry)
    return found


def _print_resources(found: dict[ResourcePattern, set[AccessControlEntry]]) -> None:
    for pattern in sorted(found, key=ResourcePattern.sort_key):
        print(f"Current ACLs for resource `{pattern}`: {_entry_lines(found[pattern])}")


def list_acls(admin: KafkaAdmin, args: argparse.Namespace, ptype: PatternType) -> None:
    """``--list``: every resource's ACLs, or with ``--principal`` those of each named principal."""
    found = current_acls(admin, resource_filters(args, ptype, required=False))
    wanted = principals([p for p in args.principal or () if p is not None])
    if not wanted:
        _print_resources(found)
        return
    for principal in wanted:
        print(f"ACLs for principal `{principal}`")
        _print_resources({p: kept for p, acls in found.items()
                          if (kept := {a for a in acls if a.principal == principal})})
