"""Kafka 3.9's ZooKeeper ACL layout and bytes (``ZkData``: ``LiteralAclStoreTest``, ``ExtendedAclStoreTest``,
``ResourceZNode``, ``AclEntry.fromBytes``), and the single-node file store's crash safety.

The golden byte strings follow Kafka 3.9's recipe: ``AclEntry.toJsonCompatibleMap``/``toMap`` build Java
``HashMap`` s (iteration order: ``acls`` before ``version``; ``principal``, ``permissionType``, ``host``,
``operation``), ``ExtendedAclChangeEvent`` is a Jackson bean in declaration order, the literal change is
``ResourceType.toString + ":" + name`` (the Java enum name).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strata.security.acl_store import (
    LocalAclStore,
    acl_path,
    acl_paths_to_create,
    acl_store_path,
    acl_type_path,
    change_notification,
    decode_acls,
    decode_change,
    encode_acls,
    parse_acl_path,
)
from strata.security.authorizer import AclAuthorizer

Op = AclOperation
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP

ALICE_READ = AccessControlEntry("User:alice", "*", Op.READ, ALLOW)


# -- paths ------------------------------------------------------------------------------------------------------------


def test_store_paths() -> None:  # LiteralAclStoreTest / ExtendedAclStoreTest.shouldHaveCorrectPaths
    assert acl_store_path(LITERAL) == "/kafka-acl"
    assert acl_type_path(LITERAL, TOPIC) == "/kafka-acl/Topic"
    assert acl_store_path(PREFIXED) == "/kafka-acl-extended/prefixed"
    assert acl_type_path(PREFIXED, TOPIC) == "/kafka-acl-extended/prefixed/Topic"
    for bad in (PatternType.ANY, PatternType.MATCH, PatternType.UNKNOWN):
        with pytest.raises(ValueError, match="Invalid pattern type"):
            acl_store_path(bad)


@pytest.mark.parametrize(("pattern", "path"), [
    (ResourcePattern(TOPIC, "orders", LITERAL), "/kafka-acl/Topic/orders"),
    (ResourcePattern(TOPIC, "*", LITERAL), "/kafka-acl/Topic/*"),
    (ResourcePattern(GROUP, "app-", PREFIXED), "/kafka-acl-extended/prefixed/Group/app-"),
    (ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", LITERAL), "/kafka-acl/Cluster/kafka-cluster"),
    (ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PREFIXED), "/kafka-acl-extended/prefixed/TransactionalId/tx"),
    (ResourcePattern(ResourceType.DELEGATION_TOKEN, "tok", LITERAL), "/kafka-acl/DelegationToken/tok"),
    (ResourcePattern(ResourceType.USER, "User:bob", LITERAL), "/kafka-acl/User/User:bob"),
    (ResourcePattern(GROUP, "grüppe", LITERAL), "/kafka-acl/Group/grüppe"),
])
def test_acl_path_round_trip(pattern: ResourcePattern, path: str) -> None:
    assert acl_path(pattern) == path
    assert parse_acl_path(path) == pattern


def test_parse_acl_path_accepts_upper_case_type_and_refuses_others() -> None:
    assert parse_acl_path("/kafka-acl/TOPIC/x") == ResourcePattern(TOPIC, "x", LITERAL)
    for bad in ("/kafka-acl/Topic", "/kafka-acl/Topic/", "/kafka-acl/Nope/x", "/kafka-acl/Topic/a/b",
                "/kafka-acl-extended/literal/Topic/x", "/kafka-acl-changes/acl_changes_0000000001", "/kafka-acl"):
        with pytest.raises(ValueError):
            parse_acl_path(bad)


@pytest.mark.parametrize("name", ["", "a/b", ".", "..", "bad\x00", "bad\x1f", "bad\x85", "bad\ue000", "bad\ufff0",
                                  "emoji\U0001f600"])
def test_acl_path_refuses_names_zookeeper_refuses(name: str) -> None:
    with pytest.raises(ValueError):
        acl_path(ResourcePattern(GROUP, name, LITERAL))


def test_acl_path_refuses_unknown_type() -> None:
    with pytest.raises(ValueError):
        acl_path(ResourcePattern(ResourceType.UNKNOWN, "x", LITERAL))


def test_paths_to_create() -> None:  # KafkaZkClient.createAclPaths
    paths = acl_paths_to_create()
    types = ["Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User"]
    assert set(paths) == {"/kafka-acl", *(f"/kafka-acl/{t}" for t in types), "/kafka-acl-extended",
                          "/kafka-acl-extended/prefixed", *(f"/kafka-acl-extended/prefixed/{t}" for t in types),
                          "/kafka-acl-changes", "/kafka-acl-extended-changes"}
    for i, p in enumerate(paths):
        parent = p.rsplit("/", 1)[0]
        assert parent == "" or parent in paths[:i], p


# -- ACL znode values ------------------------------------------------------------------------------------------------


def test_encode_acls_golden() -> None:
    assert encode_acls([ALICE_READ]) == (
        b'{"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*","operation":"Read"}],"version":1}')
    entries = [AccessControlEntry("User:bob", "10.0.0.1", Op.DESCRIBE_CONFIGS, DENY),
               AccessControlEntry("User:alice", "*", Op.IDEMPOTENT_WRITE, ALLOW),
               AccessControlEntry("User:alice", "*", Op.ALL, DENY)]
    assert encode_acls(entries) == (
        b'{"acls":['
        b'{"principal":"User:alice","permissionType":"Deny","host":"*","operation":"All"},'
        b'{"principal":"User:alice","permissionType":"Allow","host":"*","operation":"IdempotentWrite"},'
        b'{"principal":"User:bob","permissionType":"Deny","host":"10.0.0.1","operation":"DescribeConfigs"}'
        b'],"version":1}')
    assert encode_acls([]) == b'{"acls":[],"version":1}'


def test_encode_acls_escapes_like_jackson() -> None:
    entry = AccessControlEntry('User:CN=a"b\\c\n\t\x01\x7fé', "*", Op.READ, ALLOW)
    data = encode_acls([entry])
    assert data == ('{"acls":[{"principal":"User:CN=a\\"b\\\\c\\n\\t\\u0001\x7fé","permissionType":"Allow",'
                    '"host":"*","operation":"Read"}],"version":1}').encode()
    assert decode_acls(data) == {entry}


@pytest.mark.parametrize("data", [
    # Kafka 3.9
    b'{"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*","operation":"Read"}],"version":1}',
    # Kafka 2.x-3.6 (Scala maps: insertion order)
    b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}',
    # the example in ZkData's scaladoc, spaces and all
    b'{"version": 1, "acls": [ { "host":"*", "permissionType": "Allow","operation": "Read",'
    b'"principal": "User:alice"}]}',
    # upper-case names (SecurityUtils accepts them) and unknown keys
    b'{"version":1,"zzz":[1],"acls":[{"principal":"User:alice","permissionType":"ALLOW","operation":"READ",'
    b'"host":"*","comment":"x"}]}',
])
def test_decode_acls(data: bytes) -> None:
    assert decode_acls(data) == {ALICE_READ}


def test_decode_acls_unknown_names_become_unknown() -> None:
    data = b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Maybe","operation":"Fly","host":"*"}]}'
    assert decode_acls(data) == {AccessControlEntry("User:a", "*", Op.UNKNOWN, AclPermissionType.UNKNOWN)}


def test_decode_acls_empty() -> None:
    assert decode_acls(b"") == set()
    assert decode_acls(None) == set()
    assert decode_acls(b'{"version":1,"acls":[]}') == set()


@pytest.mark.parametrize(("data", "message"), [
    (b"{not json", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[]", "not a JSON object"),
    (b'{"acls":[]}', "has no 'version'"),
    (b'{"version":2,"acls":[]}', "version 2"),
    (b'{"version":"1","acls":[]}', "'version' is not an int"),
    (b'{"version":true,"acls":[]}', "'version' is not an int"),
    (b'{"version":1}', "has no 'acls'"),
    (b'{"version":1,"acls":{}}', "'acls' is not a list"),
    (b'{"version":1,"acls":[1]}', "not a JSON object"),
    (b'{"version":1,"acls":[{"principal":"alice","permissionType":"Allow","operation":"Read","host":"*"}]}',
     "principalType:principalName"),
    (b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Read"}]}', "has no 'host'"),
    (b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":3,"host":"*"}]}',
     "'operation' is not a str"),
])
def test_decode_acls_refuses_malformed(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_acls(data)


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


@given(st.sets(st.builds(AccessControlEntry, st.builds(lambda k, n: f"{k}:{n}", _text, _text), _text,
                         st.sampled_from([o for o in AclOperation if o != Op.ANY]),
                         st.sampled_from([p for p in AclPermissionType if p != AclPermissionType.ANY])),
               max_size=5))
def test_encode_decode_round_trip(entries: set[AccessControlEntry]) -> None:
    data = encode_acls(entries)
    assert decode_acls(data) == entries
    # what any JSON parser reads, in the expected shape
    obj = json.loads(data)
    assert list(obj) == ["acls", "version"]
    assert all(list(item) == ["principal", "permissionType", "host", "operation"] for item in obj["acls"])


# -- change notifications --------------------------------------------------------------------------------------------


def test_literal_change_golden() -> None:
    path, data = change_notification(ResourcePattern(TOPIC, "orders", LITERAL))
    assert (path, data) == ("/kafka-acl-changes/acl_changes_", b"TOPIC:orders")
    assert change_notification(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx:1", LITERAL))[1] == \
        b"TRANSACTIONAL_ID:tx:1"
    assert decode_change("/kafka-acl-changes", data) == ResourcePattern(TOPIC, "orders", LITERAL)
    # the sequential node's own path works as well
    assert decode_change("/kafka-acl-changes/acl_changes_0000000042", data) == ResourcePattern(TOPIC, "orders",
                                                                                                LITERAL)


@pytest.mark.parametrize(("data", "pattern"), [
    (b"Topic:orders", ResourcePattern(TOPIC, "orders", LITERAL)),  # Kafka 2.0-2.4
    (b"TransactionalId:tx", ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", LITERAL)),
    (b"GROUP:", ResourcePattern(GROUP, "", LITERAL)),
    # LiteralAclStoreTest.shouldDecodeResourceUsingTwoPartLogic
    (b"GROUP:PREFIXED:this, including the PREFIXED part, is a valid two part group name",
     ResourcePattern(GROUP, "PREFIXED:this, including the PREFIXED part, is a valid two part group name", LITERAL)),
    (b"CLUSTER:kafka-cluster", ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", LITERAL)),
])
def test_decode_literal_change(data: bytes, pattern: ResourcePattern) -> None:
    assert decode_change("/kafka-acl-changes", data) == pattern


@pytest.mark.parametrize(("data", "message"), [
    (b"orders", "expected a string in format ResourceType:ResourceName but got orders"),
    (b"Nope:orders", "unknown resource type 'Nope'"),
    (b"ANY:orders", "unknown resource type 'ANY'"),
    (b"\xff:x", "not UTF-8"),
])
def test_decode_literal_change_refuses(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_change("/kafka-acl-changes", data)


def test_extended_change_golden() -> None:
    pattern = ResourcePattern(TOPIC, "orders", PREFIXED)
    path, data = change_notification(pattern)
    assert path == "/kafka-acl-extended-changes/acl_changes_"
    assert data == b'{"version":1,"resourceType":"TOPIC","name":"orders","patternType":"PREFIXED"}'
    assert decode_change("/kafka-acl-extended-changes", data) == pattern
    tx = ResourcePattern(ResourceType.TRANSACTIONAL_ID, 'a"é', PREFIXED)
    assert change_notification(tx)[1] == \
        '{"version":1,"resourceType":"TRANSACTIONAL_ID","name":"a\\"é","patternType":"PREFIXED"}'.encode()
    assert decode_change("/kafka-acl-extended-changes/acl_changes_0000000001", change_notification(tx)[1]) == tx


@pytest.mark.parametrize(("data", "pattern"), [
    (b'{"patternType":"PREFIXED","name":"o","resourceType":"TOPIC","version":1,"extra":{}}',
     ResourcePattern(TOPIC, "o", PREFIXED)),
    (b'{"resourceType":"Group","name":"g","patternType":"PREFIXED"}', ResourcePattern(GROUP, "g", PREFIXED)),
    (b'{"version":1,"resourceType":"Topic","name":"o","patternType":"Prefixed"}',
     ResourcePattern(TOPIC, "o", PREFIXED)),
    (b'{"version":1,"resourceType":"TOPIC","name":"o","patternType":"LITERAL"}', ResourcePattern(TOPIC, "o", LITERAL)),
])
def test_decode_extended_change_leniently(data: bytes, pattern: ResourcePattern) -> None:
    assert decode_change("/kafka-acl-extended-changes", data) == pattern


@pytest.mark.parametrize(("data", "message"), [
    (b"TOPIC:orders", "not JSON"),
    (b'{"version":2,"resourceType":"TOPIC","name":"o","patternType":"PREFIXED"}', "unsupported version: 2"),
    (b'{"version":1,"resourceType":"TOPIC","patternType":"PREFIXED"}', "has no 'name'"),
    (b'{"version":1,"resourceType":"NOPE","name":"o","patternType":"PREFIXED"}', "unknown resource type"),
    (b'{"version":1,"resourceType":"TOPIC","name":"o","patternType":"MATCH"}', "unknown pattern type"),
    (b'[1]', "not a JSON object"),
])
def test_decode_extended_change_refuses(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_change("/kafka-acl-extended-changes", data)


def test_decode_change_needs_a_change_path() -> None:
    with pytest.raises(ValueError, match="not an ACL change path"):
        decode_change("/kafka-acl", b"TOPIC:x")
    with pytest.raises(ValueError, match="not an ACL change path"):
        decode_change("/kafka-acl-changes-other", b"TOPIC:x")


def test_change_notification_refuses_unknown_pattern_type() -> None:
    with pytest.raises(ValueError):
        change_notification(ResourcePattern(TOPIC, "x", PatternType.UNKNOWN))


# -- single node ------------------------------------------------------------------------------------------------------


BINDINGS = [
    AclBinding(ResourcePattern(TOPIC, "orders", LITERAL), ALICE_READ),
    AclBinding(ResourcePattern(TOPIC, "*", LITERAL), AccessControlEntry("User:*", "*", Op.DESCRIBE, ALLOW)),
    AclBinding(ResourcePattern(GROUP, "app-", PREFIXED), AccessControlEntry("User:bob", "10.0.0.1", Op.ALL, DENY)),
    AclBinding(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", LITERAL),
               AccessControlEntry("User:broker", "*", Op.CLUSTER_ACTION, ALLOW)),
    AclBinding(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx-é", LITERAL),
               AccessControlEntry("Group:ops", "", Op.WRITE, ALLOW)),
]


def test_local_store_round_trip(tmp_path: Path) -> None:
    store = LocalAclStore(tmp_path / "acls")
    assert store.load() == []  # nothing yet: no file, no directory
    store.save(BINDINGS)
    assert sorted(store.load(), key=AclBinding.sort_key) == sorted(BINDINGS, key=AclBinding.sort_key)
    obj = json.loads(store.path.read_text())
    assert obj["version"] == 1
    assert obj["acls"][0] == {"resourceType": "Topic", "patternType": "LITERAL", "name": "*", "principal": "User:*",
                              "host": "*", "operation": "Describe", "permissionType": "Allow"}
    store.save([])
    assert store.load() == []
    assert sorted(os.listdir(store.directory)) == ["acls.json"]


def test_local_store_ignores_a_torn_temp_file(tmp_path: Path) -> None:
    store = LocalAclStore(tmp_path)
    store.save(BINDINGS[:2])
    # a crash in the middle of the next save: half a temp file, the rename never happened
    (tmp_path / "acls.json.tmp").write_bytes(b'{"version":1,"acls":[{"resourceType":"Top')
    assert sorted(store.load(), key=AclBinding.sort_key) == sorted(BINDINGS[:2], key=AclBinding.sort_key)
    assert not (tmp_path / "acls.json.tmp").exists()
    store.save(BINDINGS)
    assert len(store.load()) == len(BINDINGS)


def test_local_store_keeps_the_old_set_when_a_save_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalAclStore(tmp_path)
    store.save(BINDINGS[:1])

    def crash(src: object, dst: object) -> None:
        raise OSError("crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        store.save(BINDINGS)
    monkeypatch.undo()
    assert store.load() == BINDINGS[:1]


def test_local_store_with_the_authorizer(tmp_path: Path) -> None:
    store = LocalAclStore(tmp_path)
    a = AclAuthorizer()
    results = a.create_acls(BINDINGS, commit=lambda changes: store.save(changes.all_bindings()))
    assert results == [None] * len(BINDINGS)
    restarted = AclAuthorizer()
    restarted.load(store.load())
    assert restarted.bindings() == a.bindings()
    assert restarted.authorize("User:alice", "10.9.9.9", Op.READ, TOPIC, "orders")
    a.delete_acls([BINDINGS[0].to_filter()], commit=lambda changes: store.save(changes.all_bindings()))
    assert len(store.load()) == len(BINDINGS) - 1


@pytest.mark.parametrize(("content", "message"), [
    (b"{", "not JSON"),
    (b'{"version":2,"acls":[]}', "version 2"),
    (b'{"version":1,"acls":[{"resourceType":"Nope","patternType":"LITERAL","name":"x","principal":"User:a",'
     b'"host":"*","operation":"Read","permissionType":"Allow"}]}', "unknown resource type"),
    (b'{"version":1,"acls":[{"resourceType":"Topic","patternType":"MATCH","name":"x","principal":"User:a",'
     b'"host":"*","operation":"Read","permissionType":"Allow"}]}', "unknown pattern type"),
    (b'{"version":1,"acls":[{"resourceType":"Topic","patternType":"LITERAL","principal":"User:a",'
     b'"host":"*","operation":"Read","permissionType":"Allow"}]}', "has no 'name'"),
])
def test_local_store_refuses_a_file_it_did_not_write(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "acls.json").write_bytes(content)
    with pytest.raises(ValueError, match=message):
        LocalAclStore(tmp_path).load()
