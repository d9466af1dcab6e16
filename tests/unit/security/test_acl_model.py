"""The ACL model against Kafka 3.9: wire codes, names, the filter tables of ``ResourcePatternFilterTest`` and
``AclBindingTest``, ``findIndefiniteField``, CreateAcls/DeleteAcls validation and the operation bit fields."""

from __future__ import annotations

import pytest

from strata.errors import ApiError, ErrorCode
from strata.security.acl import (
    AUTHORIZED_OPERATIONS_OMITTED,
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
    authorization_error,
    authorized_operations_bits,
    creation_error,
    deletion_filter_error,
    host_address,
    implied_allow_operations,
    operations_from_bits,
    parse_principal,
    supported_operations,
    validated_binding,
)

ANY = PatternType.ANY
MATCH = PatternType.MATCH
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY


# -- enums ----------------------------------------------------------------------------------------------------------


def test_wire_codes_are_kafkas() -> None:
    assert {m.name: int(m) for m in ResourceType} == {
        "UNKNOWN": 0, "ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5,
        "DELEGATION_TOKEN": 6, "USER": 7}
    assert {m.name: int(m) for m in PatternType} == {
        "UNKNOWN": 0, "ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
    assert {m.name: int(m) for m in AclOperation} == {
        "UNKNOWN": 0, "ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7,
        "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12,
        "CREATE_TOKENS": 13, "DESCRIBE_TOKENS": 14}
    assert {m.name: int(m) for m in AclPermissionType} == {"UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3}


def test_pascal_names_are_what_kafka_writes() -> None:
    assert [t.pascal_name for t in ResourceType] == [
        "Unknown", "Any", "Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User"]
    assert [o.pascal_name for o in AclOperation] == [
        "Unknown", "Any", "All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
        "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "CreateTokens", "DescribeTokens"]
    assert [p.pascal_name for p in AclPermissionType] == ["Unknown", "Any", "Deny", "Allow"]


@pytest.mark.parametrize(("name", "expected"), [
    ("TransactionalId", ResourceType.TRANSACTIONAL_ID),
    ("TRANSACTIONALID", ResourceType.TRANSACTIONAL_ID),  # SecurityUtils' upper-case form
    ("TRANSACTIONAL_ID", ResourceType.TRANSACTIONAL_ID),  # ResourceType.fromString
    ("transactional_id", ResourceType.TRANSACTIONAL_ID),
    ("topic", ResourceType.TOPIC),
    ("Topics", ResourceType.UNKNOWN),
    ("", ResourceType.UNKNOWN),
])
def test_resource_type_from_name(name: str, expected: ResourceType) -> None:
    assert ResourceType.from_name(name) is expected


def test_other_enums_from_name_and_code() -> None:
    assert AclOperation.from_name("DescribeConfigs") is AclOperation.DESCRIBE_CONFIGS
    assert AclOperation.from_name("IDEMPOTENTWRITE") is AclOperation.IDEMPOTENT_WRITE
    assert AclOperation.from_name("Frobnicate") is AclOperation.UNKNOWN
    assert AclPermissionType.from_name("ALLOW") is ALLOW
    assert PatternType.from_name("PREFIXED") is PREFIXED
    assert AclOperation.from_code(14) is AclOperation.DESCRIBE_TOKENS
    assert AclOperation.from_code(99) is AclOperation.UNKNOWN
    assert ResourceType.from_code(-1) is ResourceType.UNKNOWN
    assert PatternType.from_code(5) is PatternType.UNKNOWN


# -- patterns, entries, bindings ------------------------------------------------------------------------------------


ACL1 = AclBinding(ResourcePattern(TOPIC, "mytopic", LITERAL),
                  AccessControlEntry("User:ANONYMOUS", "", AclOperation.ALL, ALLOW))
ACL2 = AclBinding(ResourcePattern(TOPIC, "mytopic", LITERAL),
                  AccessControlEntry("User:*", "", AclOperation.READ, ALLOW))
ACL3 = AclBinding(ResourcePattern(TOPIC, "mytopic2", LITERAL),
                  AccessControlEntry("User:ANONYMOUS", "127.0.0.1", AclOperation.READ, DENY))
UNKNOWN_ACL = AclBinding(ResourcePattern(TOPIC, "mytopic2", LITERAL),
                         AccessControlEntry("User:ANONYMOUS", "127.0.0.1", AclOperation.UNKNOWN, DENY))
ANY_ANONYMOUS = AclBindingFilter(ResourcePatternFilter.ANY,
                                 AccessControlEntryFilter("User:ANONYMOUS", None, AclOperation.ANY,
                                                          AclPermissionType.ANY))
ANY_DENY = AclBindingFilter(ResourcePatternFilter.ANY,
                            AccessControlEntryFilter(None, None, AclOperation.ANY, DENY))
ANY_MYTOPIC = AclBindingFilter(ResourcePatternFilter(TOPIC, "mytopic", LITERAL),
                               AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY))


def test_acl_binding_matching() -> None:  # AclBindingTest.testMatching
    copy = AclBinding(ResourcePattern(TOPIC, "mytopic", LITERAL),
                      AccessControlEntry("User:ANONYMOUS", "", AclOperation.ALL, ALLOW))
    assert ACL1 == copy and hash(ACL1) == hash(copy)
    assert ACL1 != ACL2
    for acl in (ACL1, ACL2, ACL3):
        assert AclBindingFilter.ANY.matches(acl)
        assert AclBindingFilter.ANY != acl
    table = [
        (ANY_ANONYMOUS, ACL1, True), (ANY_ANONYMOUS, ACL2, False), (ANY_ANONYMOUS, ACL3, True),
        (ANY_DENY, ACL1, False), (ANY_DENY, ACL2, False), (ANY_DENY, ACL3, True),
        (ANY_MYTOPIC, ACL1, True), (ANY_MYTOPIC, ACL2, True), (ANY_MYTOPIC, ACL3, False),
        (ANY_ANONYMOUS, UNKNOWN_ACL, True), (ANY_DENY, UNKNOWN_ACL, True), (ANY_MYTOPIC, UNKNOWN_ACL, False),
    ]
    for flt, acl, expected in table:
        assert flt.matches(acl) is expected, (flt, acl)


def test_unknowns_and_matches_at_most_one() -> None:  # AclBindingTest.testUnknowns / testMatchesAtMostOne
    assert not ACL1.is_unknown and not ACL2.is_unknown and not ACL3.is_unknown
    assert not ANY_ANONYMOUS.is_unknown and not ANY_DENY.is_unknown and not ANY_MYTOPIC.is_unknown
    assert UNKNOWN_ACL.is_unknown
    for acl in (ACL1, ACL2, ACL3):
        assert acl.to_filter().find_indefinite_field() is None
        assert acl.to_filter().matches(acl)
    for flt in (ANY_ANONYMOUS, ANY_DENY, ANY_MYTOPIC):
        assert not flt.matches_at_most_one


def test_pattern_and_entry_construction_rules() -> None:
    ResourcePattern(TOPIC, "foo", PatternType.UNKNOWN)  # allowed, as in Kafka
    ResourcePattern(ResourceType.UNKNOWN, "foo", LITERAL)
    with pytest.raises(ValueError, match="patternType must not be MATCH"):
        ResourcePattern(TOPIC, "foo", MATCH)
    with pytest.raises(ValueError, match="patternType must not be ANY"):
        ResourcePattern(TOPIC, "foo", ANY)
    with pytest.raises(ValueError, match="resourceType must not be ANY"):
        ResourcePattern(ResourceType.ANY, "foo", LITERAL)
    with pytest.raises(ValueError, match="operation must not be ANY"):
        AccessControlEntry("User:a", "*", AclOperation.ANY, ALLOW)
    with pytest.raises(ValueError, match="permissionType must not be ANY"):
        AccessControlEntry("User:a", "*", AclOperation.READ, AclPermissionType.ANY)
    with pytest.raises(TypeError):
        ResourcePattern(TOPIC, None, LITERAL)  # type: ignore[arg-type]


# ResourcePatternFilterTest, row by row: (filter, pattern, matches)
FILTER_TABLE = [
    (ResourcePatternFilter(TOPIC, "Name", LITERAL), ResourcePattern(GROUP, "Name", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "Different", PREFIXED), ResourcePattern(TOPIC, "Name", PREFIXED), False),
    (ResourcePatternFilter(TOPIC, "NAME", LITERAL), ResourcePattern(TOPIC, "Name", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "Name", LITERAL), ResourcePattern(TOPIC, "Name", PREFIXED), False),
    (ResourcePatternFilter(ResourceType.ANY, "Name", PREFIXED), ResourcePattern(TOPIC, "Name", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, None, PREFIXED), ResourcePattern(TOPIC, "Name", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, None, ANY), ResourcePattern(TOPIC, "Name", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, None, MATCH), ResourcePattern(TOPIC, "Name", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, "Name", LITERAL), ResourcePattern(TOPIC, "Name", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "Name", ANY), ResourcePattern(TOPIC, "Name", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "Name", MATCH), ResourcePattern(TOPIC, "Name", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "Name-something", MATCH), ResourcePattern(TOPIC, "Name", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "*", LITERAL), ResourcePattern(TOPIC, "*", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "Name", LITERAL), ResourcePattern(TOPIC, "*", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "*", LITERAL), ResourcePattern(TOPIC, "Name", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "Name", ANY), ResourcePattern(TOPIC, "*", LITERAL), False),
    (ResourcePatternFilter(TOPIC, "Name", MATCH), ResourcePattern(TOPIC, "*", LITERAL), True),
    (ResourcePatternFilter(TOPIC, "Name", PREFIXED), ResourcePattern(TOPIC, "Name", PREFIXED), True),
    (ResourcePatternFilter(TOPIC, "Name", PREFIXED), ResourcePattern(TOPIC, "Name-something", PREFIXED), False),
    (ResourcePatternFilter(TOPIC, "Name-something", PREFIXED), ResourcePattern(TOPIC, "Name", PREFIXED), False),
    (ResourcePatternFilter(TOPIC, "Name-something", ANY), ResourcePattern(TOPIC, "Name", PREFIXED), False),
    (ResourcePatternFilter(TOPIC, "Name-something", MATCH), ResourcePattern(TOPIC, "Name", PREFIXED), True),
]


@pytest.mark.parametrize(("flt", "pattern", "expected"), FILTER_TABLE)
def test_resource_pattern_filter_table(flt: ResourcePatternFilter, pattern: ResourcePattern, expected: bool) -> None:
    assert flt.matches(pattern) is expected


def test_resource_pattern_filter_unknown() -> None:
    assert ResourcePatternFilter(ResourceType.UNKNOWN, None, LITERAL).is_unknown
    assert ResourcePatternFilter(GROUP, None, PatternType.UNKNOWN).is_unknown
    assert not ResourcePatternFilter.ANY.is_unknown


def test_entry_filter_is_exact_no_wildcard_expansion() -> None:
    entry = AccessControlEntry("User:*", "*", AclOperation.READ, ALLOW)
    assert not AccessControlEntryFilter("User:alice", None, AclOperation.ANY, AclPermissionType.ANY).matches(entry)
    assert AccessControlEntryFilter("User:*", "*", AclOperation.READ, ALLOW).matches(entry)
    assert not AccessControlEntryFilter(None, "10.0.0.1", AclOperation.ANY, AclPermissionType.ANY).matches(entry)
    assert not AccessControlEntryFilter(None, None, AclOperation.ALL, AclPermissionType.ANY).matches(entry)


@pytest.mark.parametrize(("flt", "message"), [
    (ResourcePatternFilter(ResourceType.ANY, "x", LITERAL), "Resource type is ANY."),
    (ResourcePatternFilter(ResourceType.UNKNOWN, "x", LITERAL), "Resource type is UNKNOWN."),
    (ResourcePatternFilter(TOPIC, None, LITERAL), "Resource name is NULL."),
    (ResourcePatternFilter(TOPIC, "x", MATCH), "Resource pattern type is MATCH."),
    (ResourcePatternFilter(TOPIC, "x", PatternType.UNKNOWN), "Resource pattern type is UNKNOWN."),
    (ResourcePatternFilter(TOPIC, "x", ANY), None),  # as in Kafka: ANY is not reported here
    (ResourcePatternFilter(TOPIC, "x", PREFIXED), None),
])
def test_pattern_filter_indefinite_field(flt: ResourcePatternFilter, message: str | None) -> None:
    assert flt.find_indefinite_field() == message
    assert flt.matches_at_most_one is (message is None)


@pytest.mark.parametrize(("flt", "message"), [
    (AccessControlEntryFilter(None, "*", AclOperation.READ, ALLOW), "Principal is NULL"),
    (AccessControlEntryFilter("User:a", None, AclOperation.READ, ALLOW), "Host is NULL"),
    (AccessControlEntryFilter("User:a", "*", AclOperation.ANY, ALLOW), "Operation is ANY"),
    (AccessControlEntryFilter("User:a", "*", AclOperation.UNKNOWN, ALLOW), "Operation is UNKNOWN"),
    (AccessControlEntryFilter("User:a", "*", AclOperation.READ, AclPermissionType.ANY), "Permission type is ANY"),
    (AccessControlEntryFilter("User:a", "*", AclOperation.READ, AclPermissionType.UNKNOWN),
     "Permission type is UNKNOWN"),
    (AccessControlEntryFilter("User:a", "*", AclOperation.READ, ALLOW), None),
])
def test_entry_filter_indefinite_field(flt: AccessControlEntryFilter, message: str | None) -> None:
    assert flt.find_indefinite_field() == message
    binding_filter = AclBindingFilter(ResourcePatternFilter(TOPIC, "t", LITERAL), flt)
    assert binding_filter.find_indefinite_field() == message
    # the pattern's field is reported first
    assert AclBindingFilter(ResourcePatternFilter.ANY, flt).find_indefinite_field() == "Resource type is ANY."


# -- CreateAcls / DeleteAcls validation -----------------------------------------------------------------------------


def creation(rtype=TOPIC, name="t", ptype=LITERAL, principal="User:alice", host="*", op=AclOperation.READ,
             perm=ALLOW) -> AclBindingFilter:
    return AclBindingFilter(ResourcePatternFilter(rtype, name, ptype),
                            AccessControlEntryFilter(principal, host, op, perm))


@pytest.mark.parametrize(("flt", "message"), [
    (creation(rtype=ResourceType.ANY), "Invalid resourceType ANY"),
    (creation(rtype=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (creation(ptype=MATCH), "Invalid patternType MATCH"),
    (creation(ptype=ANY), "Invalid patternType ANY"),
    (creation(ptype=PatternType.UNKNOWN), "Invalid patternType UNKNOWN"),
    (creation(op=AclOperation.ANY), "Invalid operation ANY"),
    (creation(op=AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
    (creation(perm=AclPermissionType.ANY), "Invalid permissionType ANY"),
    (creation(perm=AclPermissionType.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (creation(rtype=ResourceType.CLUSTER, name="my-cluster"),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (creation(rtype=ResourceType.CLUSTER, name="*"), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (creation(name=""), "Invalid empty resource name"),
    (creation(principal="alice"),
     "Could not parse principal from `alice` (no colon is present separating the principal type from the "
     "principal name)"),
    (creation(principal=""),
     "Could not parse principal from `` (no colon is present separating the principal type from the "
     "principal name)"),
    (creation(name="a/b"), "ACL binding contains invalid resource name: a/b"),
    (creation(name=None), "Resource name should not be empty"),
    # what Kafka accepts
    (creation(rtype=ResourceType.CLUSTER, name="kafka-cluster", op=AclOperation.CLUSTER_ACTION), None),
    (creation(host=""), None),
    (creation(name="*", ptype=PREFIXED), None),
    (creation(principal="Group:ops"), None),
    (creation(principal="User:"), None),
    (creation(principal="User:a:b", op=AclOperation.ALL, perm=DENY), None),
    (creation(rtype=ResourceType.USER, name="User:bob", op=AclOperation.CREATE_TOKENS), None),
])
def test_creation_error(flt: AclBindingFilter, message: str | None) -> None:
    assert creation_error(flt) == message
    if message is None:
        binding = validated_binding(flt)
        assert binding.to_filter() == flt
        assert creation_error(binding) is None
    else:
        with pytest.raises(ApiError) as info:
            validated_binding(flt)
        assert info.value.error_code == ErrorCode.INVALID_REQUEST
        assert str(info.value) == message


def test_creation_error_of_bindings() -> None:
    assert creation_error(ACL1) is None
    assert creation_error(UNKNOWN_ACL) == "Invalid operation UNKNOWN"
    assert creation_error(AclBinding(ResourcePattern(TOPIC, "t", PatternType.UNKNOWN), ACL1.entry)) == \
        "Invalid patternType UNKNOWN"


def test_deletion_filter_error() -> None:
    assert deletion_filter_error(AclBindingFilter.ANY) is None
    assert deletion_filter_error(creation(rtype=ResourceType.UNKNOWN)) == "Unknown patternFilter."
    assert deletion_filter_error(creation(ptype=PatternType.UNKNOWN)) == "Unknown patternFilter."
    assert deletion_filter_error(creation(op=AclOperation.UNKNOWN)) == "Unknown entryFilter."
    assert deletion_filter_error(creation(perm=AclPermissionType.UNKNOWN)) == "Unknown entryFilter."


def test_parse_principal() -> None:
    assert parse_principal("User:alice") == ("User", "alice")
    assert parse_principal("User:CN=a,O=b:c") == ("User", "CN=a,O=b:c")
    for bad in ("", "alice"):
        with pytest.raises(ValueError, match="principalType:principalName"):
            parse_principal(bad)


# -- operations -----------------------------------------------------------------------------------------------------


def test_supported_operations_are_kafka_39s() -> None:
    Op = AclOperation
    assert supported_operations(TOPIC) == {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                           Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert supported_operations(GROUP) == {Op.READ, Op.DESCRIBE, Op.DELETE}
    assert supported_operations(ResourceType.CLUSTER) == {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                                                          Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}
    assert supported_operations(ResourceType.TRANSACTIONAL_ID) == {Op.DESCRIBE, Op.WRITE}
    assert supported_operations(ResourceType.DELEGATION_TOKEN) == {Op.DESCRIBE}
    assert supported_operations(ResourceType.USER) == {Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}
    for t in (ResourceType.ANY, ResourceType.UNKNOWN):
        with pytest.raises(ValueError, match="Not a concrete resource type"):
            supported_operations(t)


def test_authorization_error() -> None:
    assert authorization_error(TOPIC) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert authorization_error(GROUP) == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert authorization_error(ResourceType.CLUSTER) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert authorization_error(ResourceType.TRANSACTIONAL_ID) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with pytest.raises(ValueError):
        authorization_error(ResourceType.USER)


def test_authorized_operations_bits() -> None:
    assert authorized_operations_bits([]) == 0
    assert authorized_operations_bits([AclOperation.READ, AclOperation.DESCRIBE]) == 0b1_0000_1000 == 264
    every_topic_op = authorized_operations_bits(supported_operations(TOPIC))
    # what a Kafka 3.9 broker answers a super user in Metadata's topic_authorized_operations
    assert every_topic_op == 3576
    assert operations_from_bits(every_topic_op) == supported_operations(TOPIC)
    assert authorized_operations_bits(supported_operations(ResourceType.CLUSTER)) == 8096
    assert operations_from_bits(AUTHORIZED_OPERATIONS_OMITTED) == frozenset()
    assert AUTHORIZED_OPERATIONS_OMITTED == -2147483648
    with pytest.raises(ValueError):
        authorized_operations_bits([32])  # type: ignore[list-item]


def test_implied_operations() -> None:
    Op = AclOperation
    assert implied_allow_operations(Op.DESCRIBE) == {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
    assert implied_allow_operations(Op.DESCRIBE_CONFIGS) == {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert implied_allow_operations(Op.READ) == {Op.READ}


@pytest.mark.parametrize(("ip", "java"), [
    ("192.168.1.1", "192.168.1.1"),
    ("::1", "0:0:0:0:0:0:0:1"),
    ("::ffff:10.1.2.3", "10.1.2.3"),
    ("2001:db8::ff00:42:8329", "2001:db8:0:0:0:ff00:42:8329"),
    ("FE80::0001%eth0", "fe80:0:0:0:0:0:0:1%eth0"),
    ("[::1]", "0:0:0:0:0:0:0:1"),
    ("not-an-ip", "not-an-ip"),
])
def test_host_address_like_java(ip: str, java: str) -> None:
    assert host_address(ip) == java
