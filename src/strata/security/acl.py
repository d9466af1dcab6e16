"""Kafka's ACL model: resource patterns, access control entries, bindings and the filters that match them.

The numbering of every enum is Kafka's wire code (CreateAcls, DescribeAcls, DeleteAcls and the
``*_authorized_operations`` bit fields carry these numbers), and each enum knows the PascalCase name
Kafka writes in ZooKeeper (``Topic``, ``TransactionalId``, ``Read``, ``DescribeConfigs``, ``Allow``; Kafka's
``SecurityUtils.resourceTypeName``/``operationName``/``permissionTypeName``). :class:`PatternType` has no
PascalCase form in Kafka's formats: ZooKeeper change events carry its enum name (``PREFIXED``).

Principals and hosts are plain strings, as in Kafka's ``AccessControlEntry``: a principal is
``"<type>:<name>"`` (``"User:alice"``; the wildcard principal is ``"User:*"``, of type ``User`` only) and a host
is an IP address string as Java's ``InetAddress.getHostAddress`` prints it (see :func:`host_address`) or the
wildcard ``"*"``.

The filters follow ``ResourcePatternFilter``/``AccessControlEntryFilter``/``AclBindingFilter`` of Kafka's
clients exactly, ``matches`` and ``find_indefinite_field`` (with Kafka's messages) included. The checks a broker
makes before creating an ACL are in :func:`creation_error`; the ones before deleting, in
:func:`deletion_filter_error`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Self

from strata.errors import ApiError, ErrorCode

__all__ = [
    "AUTHORIZED_OPERATIONS_OMITTED",
    "CLUSTER_NAME",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AccessControlEntry",
    "AccessControlEntryFilter",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "authorization_error",
    "authorized_operations_bits",
    "creation_error",
    "deletion_filter_error",
    "host_address",
    "implied_allow_operations",
    "operations_from_bits",
    "parse_principal",
    "supported_operations",
    "validated_binding",
]

WILDCARD_RESOURCE = "*"
"""A LITERAL pattern with this name covers every resource of its type (``ResourcePattern.WILDCARD_RESOURCE``)."""
WILDCARD_PRINCIPAL = "User:*"
"""Every principal -- but only written as ``User:*``; ``Group:*`` is an ordinary principal (``AclEntry``)."""
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"
"""The only name of the CLUSTER resource (``Resource.CLUSTER_NAME``)."""
AUTHORIZED_OPERATIONS_OMITTED = -(1 << 31)
"""The value of an ``*_authorized_operations`` field the client did not ask for (``Integer.MIN_VALUE``)."""


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


_NAME_TABLES: dict[type, dict[str, IntEnum]] = {}


class _KafkaEnum(IntEnum):
    """An IntEnum with Kafka's code lookup (unknown codes are UNKNOWN) and name lookup (SecurityUtils')."""

    @classmethod
    def from_code(cls, code: int) -> Self:
        """The member with this wire code, or UNKNOWN (Kafka's ``fromCode``)."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)

    @classmethod
    def from_name(cls, name: str) -> Self:
        """Kafka's ``SecurityUtils`` lookup: the PascalCase name (``TransactionalId``), its upper-case form
        (``TRANSACTIONALID``), or -- like the enum's ``fromString`` -- the enum name in any case
        (``transactional_id``). UNKNOWN if none matches."""
        table = _NAME_TABLES.get(cls)
        if table is None:
            table = {}
            for member in cls:
                table[member.pascal_name] = member
                table[member.pascal_name.upper()] = member
                table[member.name] = member
            _NAME_TABLES[cls] = table
        found = table.get(name)
        if found is None:
            found = table.get(name.upper())
        return found if found is not None else cls(0)  # type: ignore[return-value]

    @property
    def pascal_name(self) -> str:
        """The name Kafka writes in ZooKeeper paths and ACL JSON (``DescribeConfigs``)."""
        return _pascal(self.name)


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def is_specific(self) -> bool:
        """LITERAL or PREFIXED: a pattern type a stored ACL can have."""
        return self in (PatternType.LITERAL, PatternType.PREFIXED)


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# ---------------------------------------------------------------------------------------------------------------
# Patterns, entries, bindings


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """Resources an ACL applies to: one name (LITERAL, ``*`` for all), or every name with a prefix (PREFIXED).

    Like Kafka's, the type may not be ANY and the pattern type may not be ANY or MATCH (those are for filters);
    UNKNOWN is allowed (something a newer peer wrote)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"resource name must be a str, not {type(self.name).__name__}")
        if self.resource_type == ResourceType.ANY:
            raise ValueError("resourceType must not be ANY")
        if self.pattern_type in (PatternType.MATCH, PatternType.ANY):
            raise ValueError(f"patternType must not be {PatternType(self.pattern_type).name}")

    @property
    def is_unknown(self) -> bool:
        return self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN

    def to_filter(self) -> ResourcePatternFilter:
        return ResourcePatternFilter(self.resource_type, self.name, self.pattern_type)

    def sort_key(self) -> tuple[int, int, str]:
        return (int(self.resource_type), int(self.pattern_type), self.name)

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={ResourceType(self.resource_type).name}, name={self.name}, "
                f"patternType={PatternType(self.pattern_type).name})")


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (``principal``, ``"User:alice"``) may or may not (``permission_type``) do what (``operation``) from where
    (``host``). The operation and permission may not be ANY (filters only), as in Kafka."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        if not isinstance(self.principal, str) or not isinstance(self.host, str):
            raise TypeError("principal and host must be str")
        if self.operation == AclOperation.ANY:
            raise ValueError("operation must not be ANY")
        if self.permission_type == AclPermissionType.ANY:
            raise ValueError("permissionType must not be ANY")

    @property
    def is_unknown(self) -> bool:
        return self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN

    def to_filter(self) -> AccessControlEntryFilter:
        return AccessControlEntryFilter(self.principal, self.host, self.operation, self.permission_type)

    def sort_key(self) -> tuple[str, str, int, int]:
        return (self.principal, self.host, int(self.operation), int(self.permission_type))

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={AclOperation(self.operation).name}, "
                f"permissionType={AclPermissionType(self.permission_type).name})")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    @property
    def is_unknown(self) -> bool:
        return self.pattern.is_unknown or self.entry.is_unknown

    def to_filter(self) -> AclBindingFilter:
        return AclBindingFilter(self.pattern.to_filter(), self.entry.to_filter())

    def sort_key(self) -> tuple[tuple[int, int, str], tuple[str, str, int, int]]:
        return (self.pattern.sort_key(), self.entry.sort_key())

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"


# ---------------------------------------------------------------------------------------------------------------
# Filters


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Matches resource patterns (Kafka's ``ResourcePatternFilter``).

    ``resource_type`` ANY ignores the type; ``name`` None ignores the name; ``pattern_type`` ANY matches patterns of
    either type with exactly this name, MATCH matches the patterns that would *apply to* a resource of this name:
    the LITERAL one with the name, the LITERAL wildcard ``*``, and PREFIXED ones that are prefixes of the name."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    @property
    def is_unknown(self) -> bool:
        return self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type == PatternType.ANY or self.pattern_type == pattern.pattern_type:
            return self.name == pattern.name
        # MATCH against a pattern of another type
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        raise ValueError(f"Unsupported PatternType: {PatternType(pattern.pattern_type).name}")

    @property
    def matches_at_most_one(self) -> bool:
        return self.find_indefinite_field() is None

    def find_indefinite_field(self) -> str | None:
        """Why this filter may match more than one pattern (Kafka's message), or None. Pattern type ANY is not
        reported here (as in Kafka): it is caught when a binding is built from the filter."""
        if self.resource_type == ResourceType.ANY:
            return "Resource type is ANY."
        if self.resource_type == ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN."
        if self.name is None:
            return "Resource name is NULL."
        if self.pattern_type == PatternType.MATCH:
            return "Resource pattern type is MATCH."
        if self.pattern_type == PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN."
        return None

    def __str__(self) -> str:
        """Kafka's ``ResourcePatternFilter.toString`` (which kafka-acls prints), ``<any>`` for a null name."""
        return (f"ResourcePattern(resourceType={ResourceType(self.resource_type).name}, "
                f"name={'<any>' if self.name is None else self.name}, "
                f"patternType={PatternType(self.pattern_type).name})")


ResourcePatternFilter.ANY = ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Matches entries (Kafka's ``AccessControlEntryFilter``): None principal/host and ANY operation/permission
    match anything; otherwise exact equality (no wildcard expansion: ``User:alice`` does not match ``User:*``)."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    @property
    def is_unknown(self) -> bool:
        return self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != entry.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == entry.permission_type

    @property
    def matches_at_most_one(self) -> bool:
        return self.find_indefinite_field() is None

    def find_indefinite_field(self) -> str | None:
        if self.principal is None:
            return "Principal is NULL"
        if self.host is None:
            return "Host is NULL"
        if self.operation == AclOperation.ANY:
            return "Operation is ANY"
        if self.operation == AclOperation.UNKNOWN:
            return "Operation is UNKNOWN"
        if self.permission_type == AclPermissionType.ANY:
            return "Permission type is ANY"
        if self.permission_type == AclPermissionType.UNKNOWN:
            return "Permission type is UNKNOWN"
        return None


AccessControlEntryFilter.ANY = AccessControlEntryFilter(  # type: ignore[attr-defined]
    None, None, AclOperation.ANY, AclPermissionType.ANY)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern_filter: ResourcePatternFilter
    entry_filter: AccessControlEntryFilter

    @property
    def is_unknown(self) -> bool:
        return self.pattern_filter.is_unknown or self.entry_filter.is_unknown

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(binding.entry)

    @property
    def matches_at_most_one(self) -> bool:
        return self.pattern_filter.matches_at_most_one and self.entry_filter.matches_at_most_one

    def find_indefinite_field(self) -> str | None:
        found = self.pattern_filter.find_indefinite_field()
        return found if found is not None else self.entry_filter.find_indefinite_field()


AclBindingFilter.ANY = AclBindingFilter(ResourcePatternFilter.ANY, AccessControlEntryFilter.ANY)  # type: ignore


# ---------------------------------------------------------------------------------------------------------------
# Validation of CreateAcls / DeleteAcls


def parse_principal(principal: str) -> tuple[str, str]:
    """``"User:alice"`` -> ``("User", "alice")``: split at the first colon (Kafka's ``parseKafkaPrincipal``);
    ValueError with Kafka's message when there is none."""
    if principal:
        kind, sep, name = principal.partition(":")
        if sep:
            return kind, name
    raise ValueError(f"expected a string in format principalType:principalName but got {principal}")


def creation_error(binding: AclBinding | AclBindingFilter) -> str | None:
    """Why a broker refuses to create this ACL (an INVALID_REQUEST with this message), or None.

    Takes the binding as a filter too, because a CreateAcls request can carry codes no :class:`AclBinding` can
    hold (pattern type ANY or MATCH, operation ANY). The checks and messages, in order, are Kafka's: the
    resource type, pattern type, operation and permission must be concrete (``AclControlManager.validateNewAcl``);
    the CLUSTER resource is named ``kafka-cluster`` and no name is empty (``AclApis.handleCreateAcls``); the
    principal is ``<type>:<name>`` (``validateNewAcl``); a name has no ``/`` (``AclAuthorizer``: it becomes a
    znode name). Kafka accepts an empty host and a PREFIXED pattern named ``*``, and so does this.
    """
    if isinstance(binding, AclBinding):
        rtype, name, ptype = binding.pattern.resource_type, binding.pattern.name, binding.pattern.pattern_type
        principal, op, perm = binding.entry.principal, binding.entry.operation, binding.entry.permission_type
    else:
        pf, ef = binding.pattern_filter, binding.entry_filter
        rtype, name, ptype = pf.resource_type, pf.name, pf.pattern_type
        principal, op, perm = ef.principal, ef.operation, ef.permission_type
        if name is None:
            return "Resource name should not be empty"
        if principal is None:
            return "Principal is NULL"
        if ef.host is None:
            return "Host is NULL"
    if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {ResourceType(rtype).name}"
    if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {PatternType(ptype).name}"
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {AclOperation(op).name}"
    if perm not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {AclPermissionType(perm).name}"
    if rtype == ResourceType.CLUSTER and name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not name:
        return "Invalid empty resource name"
    if ":" not in principal:
        return (f"Could not parse principal from `{principal}` (no colon is present separating the principal "
                "type from the principal name)")
    if "/" in name:
        return f"ACL binding contains invalid resource name: {name}"
    return None


def validated_binding(binding: AclBinding | AclBindingFilter) -> AclBinding:
    """The binding to create, or ApiError(INVALID_REQUEST) with :func:`creation_error`'s message."""
    error = creation_error(binding)
    if error is not None:
        raise ApiError(ErrorCode.INVALID_REQUEST, error)
    if isinstance(binding, AclBinding):
        return binding
    pf, ef = binding.pattern_filter, binding.entry_filter
    assert pf.name is not None and ef.principal is not None and ef.host is not None
    return AclBinding(ResourcePattern(pf.resource_type, pf.name, pf.pattern_type),
                      AccessControlEntry(ef.principal, ef.host, ef.operation, ef.permission_type))


def deletion_filter_error(filter: AclBindingFilter) -> str | None:
    """Why a broker refuses a DeleteAcls filter (INVALID_REQUEST), or None (``AclControlManager.validateFilter``)."""
    if filter.pattern_filter.is_unknown:
        return "Unknown patternFilter."
    if filter.entry_filter.is_unknown:
        return "Unknown entryFilter."
    return None


# ---------------------------------------------------------------------------------------------------------------
# Operations per resource type


_SUPPORTED: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    """The operations that apply to a resource type (Kafka 3.9's ``AclEntry.supportedOperations``): the ones the
    ``*_authorized_operations`` fields of Metadata, DescribeCluster and DescribeGroups report on."""
    try:
        return _SUPPORTED[resource_type]
    except KeyError:
        raise ValueError("Not a concrete resource type") from None


_AUTHORIZATION_ERRORS = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


def authorization_error(resource_type: ResourceType) -> ErrorCode:
    """The error a request gets when refused on this resource type (``AclEntry.authorizationError``; DELEGATION_TOKEN's
    code 65 is not in :class:`ErrorCode` yet)."""
    try:
        return _AUTHORIZATION_ERRORS[resource_type]
    except KeyError:
        raise ValueError("Authorization error type not known") from None


_IMPLIED: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}


def implied_allow_operations(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations an ALLOW of which grants ``operation`` (ALL aside): DESCRIBE is granted by READ, WRITE,
    DELETE, ALTER and DESCRIBE; DESCRIBE_CONFIGS by ALTER_CONFIGS and DESCRIBE_CONFIGS. A DENY implies nothing."""
    return _IMPLIED.get(operation, frozenset({operation}))


def authorized_operations_bits(ops: Iterable[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``1 << code`` for each operation, for the ``*_authorized_operations``
    fields (e.g. READ and DESCRIBE -> ``0b1_0000_1000`` = 264)."""
    value = 0
    for op in ops:
        code = int(op)
        if not 0 <= code < 32:
            raise ValueError(f"operation code {code} out of range for a 32-bit field")
        value |= 1 << code
    return value


def operations_from_bits(bits: int) -> frozenset[AclOperation]:
    """The operations set in an ``*_authorized_operations`` field (AUTHORIZED_OPERATIONS_OMITTED: none)."""
    if bits == AUTHORIZED_OPERATIONS_OMITTED:
        return frozenset()
    return frozenset(op for op in AclOperation if bits & (1 << int(op)))


def host_address(ip: str) -> str:
    """An IP address as Java's ``InetAddress.getHostAddress`` prints it -- the host string Kafka's authorizer
    compares ACL hosts with. IPv4 as is; an IPv4-mapped IPv6 address (``::ffff:10.0.0.1``, what a dual-stack socket
    reports) as the IPv4 address (Java makes it an ``Inet4Address``); other IPv6 addresses in full, lower-case hex
    without leading zeros, no ``::`` compression (``::1`` -> ``0:0:0:0:0:0:0:1``), a zone kept as ``%zone``.
    Anything that is not an IP address is returned unchanged."""
    addr, pct, zone = ip.partition("%")
    try:
        parsed = ipaddress.ip_address(addr.strip("[]"))
    except ValueError:
        return ip
    if isinstance(parsed, ipaddress.IPv4Address):
        return str(parsed)
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    groups = parsed.packed
    text = ":".join(f"{(groups[i] << 8) | groups[i + 1]:x}" for i in range(0, 16, 2))
    return f"{text}%{zone}" if pct else text
