"""Authorized-operations bitmasks *without a principal*: every operation a resource type supports.

Kafka answers ``include_*_authorized_operations`` with a 32-bit field holding ``1 << code`` for
every AclOperation the principal may perform on the resource (``AuthHelper.authorizedOperations``:
the resource type's ``AclEntry.supportedOperations``, filtered by the authorizer, folded by
``Utils.to32BitField``). When the client did not ask, the field holds :data:`UNKNOWN_OPERATIONS`
(``Integer.MIN_VALUE``).

Handlers that know the connection use ``RequestContext.authorized_operations(resource_type, name)``
instead, which asks the ACL authorizer (:mod:`strata.broker.authorization`) and equals
:func:`authorized_operations` when no authorizer is configured. This module keeps the old
principal-free names working; the tables themselves are :mod:`strata.security.acl`'s.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from strata.security.acl import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType, authorized_operations_bits
from strata.security.acl import supported_operations as _supported_operations

__all__ = ["UNKNOWN_OPERATIONS", "AclOperation", "AclResourceType", "authorized_operations", "supported_operations",
           "to_bit_field"]


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


UNKNOWN_OPERATIONS = AUTHORIZED_OPERATIONS_OMITTED  # Integer.MIN_VALUE: "not requested"


def supported_operations(resource_type: AclResourceType) -> frozenset[AclOperation]:
    """The operations ACLs can grant on a resource of this type (``AclEntry.supportedOperations``)."""
    return _supported_operations(ResourceType(int(resource_type)))


def to_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``code`` set for each operation."""
    return authorized_operations_bits(operations)


def authorized_operations(resource_type: AclResourceType, requested: bool = True) -> int:
    """The ``*_authorized_operations`` field for a resource of ``resource_type`` when nothing is filtered.

    :data:`UNKNOWN_OPERATIONS` when the client did not ask; otherwise every operation the type supports.
    """
    if not requested:
        return UNKNOWN_OPERATIONS
    return to_bit_field(supported_operations(resource_type))
