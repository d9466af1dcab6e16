"""The authorized-operations bitmasks against Kafka's own numbers (AclOperation codes, AclEntry.supportedOperations)."""

from __future__ import annotations

from strata.broker.handlers.acl_operations import (
    UNKNOWN_OPERATIONS,
    AclOperation,
    AclResourceType,
    authorized_operations,
    supported_operations,
    to_bit_field,
)


def test_codes_are_kafkas() -> None:
    assert [(op.name, op.value) for op in AclOperation] == [
        ("UNKNOWN", 0), ("ANY", 1), ("ALL", 2), ("READ", 3), ("WRITE", 4), ("CREATE", 5), ("DELETE", 6),
        ("ALTER", 7), ("DESCRIBE", 8), ("CLUSTER_ACTION", 9), ("DESCRIBE_CONFIGS", 10), ("ALTER_CONFIGS", 11),
        ("IDEMPOTENT_WRITE", 12), ("CREATE_TOKENS", 13), ("DESCRIBE_TOKENS", 14)]


def test_without_an_authorizer_every_supported_operation_is_reported() -> None:
    assert authorized_operations(AclResourceType.TOPIC) == 3576  # 8 ops: READ..ALTER, DESCRIBE, *_CONFIGS
    assert authorized_operations(AclResourceType.CLUSTER) == 8096  # 7 ops: CREATE, ALTER..IDEMPOTENT_WRITE
    assert authorized_operations(AclResourceType.GROUP) == 328  # READ, DELETE, DESCRIBE
    assert authorized_operations(AclResourceType.TRANSACTIONAL_ID) == (1 << 4) | (1 << 8)
    assert authorized_operations(AclResourceType.DELEGATION_TOKEN) == 1 << 8
    assert authorized_operations(AclResourceType.USER) == (1 << 13) | (1 << 14)
    for resource_type in AclResourceType:
        ops = supported_operations(resource_type)
        assert not ops & {AclOperation.UNKNOWN, AclOperation.ANY, AclOperation.ALL}  # never concrete operations
        assert authorized_operations(resource_type) == to_bit_field(ops)


def test_not_requested_is_min_int() -> None:
    for resource_type in AclResourceType:
        assert authorized_operations(resource_type, requested=False) == UNKNOWN_OPERATIONS == -(2**31)
