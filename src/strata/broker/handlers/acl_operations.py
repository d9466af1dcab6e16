"""Authorized-operations bitmasks: what Metadata, DescribeCluster and DescribeGroups report when asked.

Kafka answers ``include_*_authorized_operations`` with a 32-bit field holding ``1 << code`` for
every AclOperation the principal may perform on the resource (``AuthHelper.authorizedOperations``:
the resource type's ``AclEntry.supportedOperations``, filtered by the authorizer, folded by
``Utils.to32BitField``). Without an authorizer nothing is filtered: every supported operation is
set. When the client did not ask, the field holds :data:`UNKNOWN_OPERATIONS` (``Integer.MIN_VALUE``).

:func:`authorized_operations` is the one place that decision is made; an authorizer would filter
:func:`supported_operations` per principal here instead of returning the whole set.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class AclOperation(enum.IntEnum):
    """Kafka's ``org.apache.kafka.common.acl.AclOperation`` codes."""

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


class AclResourceType(enum.IntEnum):
    """Kafka's ``org.apache.kafka.common.resource.ResourceType`` codes (the concrete ones).

    ACL resource types, not DescribeConfigs' ``ConfigResource`` types (there GROUP is 32).
    """

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


UNKNOWN_OPERATIONS = -2147483648  # Integer.MIN_VALUE: "not requested"

_op = AclOperation
# AclEntry.supportedOperations. GROUP is Kafka 3.x's set: 4.0 adds DESCRIBE_CONFIGS and ALTER_CONFIGS
# with group configs (KIP-848), which Strata does not serve (DescribeConfigs has no GROUP resource).
_SUPPORTED: dict[AclResourceType, frozenset[AclOperation]] = {
    AclResourceType.TOPIC: frozenset({_op.READ, _op.WRITE, _op.CREATE, _op.DESCRIBE, _op.DELETE, _op.ALTER,
                                   _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS}),
    AclResourceType.GROUP: frozenset({_op.READ, _op.DESCRIBE, _op.DELETE}),
    AclResourceType.CLUSTER: frozenset({_op.CREATE, _op.CLUSTER_ACTION, _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS,
                                     _op.IDEMPOTENT_WRITE, _op.ALTER, _op.DESCRIBE}),
    AclResourceType.TRANSACTIONAL_ID: frozenset({_op.DESCRIBE, _op.WRITE}),
    AclResourceType.DELEGATION_TOKEN: frozenset({_op.DESCRIBE}),
    AclResourceType.USER: frozenset({_op.CREATE_TOKENS, _op.DESCRIBE_TOKENS}),
}


def supported_operations(resource_type: AclResourceType) -> frozenset[AclOperation]:
    """The operations ACLs can grant on a resource of this type."""
    return _SUPPORTED[resource_type]


def to_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``code`` set for each operation."""
    value = 0
    for op in operations:
        value |= 1 << op
    return value


def authorized_operations(resource_type: AclResourceType, requested: bool = True) -> int:
    """The ``*_authorized_operations`` field for a resource of ``resource_type``.

    :data:`UNKNOWN_OPERATIONS` when the client did not ask; otherwise what the principal may do,
    which without an authorizer is every operation the type supports.
    """
    if not requested:
        return UNKNOWN_OPERATIONS
    return to_bit_field(supported_operations(resource_type))
