"""Where ACLs live: Kafka's ZooKeeper layout and JSON (pure: paths and bytes), and a one-file store for a single node.

**ZooKeeper (Kafka 3.9's ``ZkData``: ``ZkAclStore``, ``ResourceZNode``, ``ZkAclChangeStore``).** One znode per resource
pattern holds the pattern's whole ACL set::

    /kafka-acl/Topic/orders                     LITERAL patterns: /kafka-acl/<ResourceType>/<name>
    /kafka-acl-extended/prefixed/Topic/orders-  PREFIXED patterns: /kafka-acl-extended/prefixed/<ResourceType>/<name>

with ``<ResourceType>`` in PascalCase (``Topic``, ``Group``, ``Cluster``, ``TransactionalId``, ``DelegationToken``,
``User``) and the value::

    {"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*","operation":"Read"}],"version":1}

(Kafka 3.9 builds both objects as Java ``HashMap`` s, hence this key order; older brokers wrote ``version`` first.
Any order decodes.) After changing a znode a broker creates a sequential znode so that the others re-read it:

    /kafka-acl-changes/acl_changes_0000000042           data ``TOPIC:orders`` (LITERAL patterns)
    /kafka-acl-extended-changes/acl_changes_0000000043  data ``{"version":1,"resourceType":"TOPIC","name":"orders-",
                                                         "patternType":"PREFIXED"}`` (the other pattern types)

The literal change names the type by its Java enum name since Kafka 2.5 (``TOPIC``); Kafka 2.0 to 2.4 wrote
``Topic``. Both decode. Encoding is byte for byte what Kafka 3.9 writes (compact JSON, non-ASCII as UTF-8, control
characters as Jackson escapes them); the entries of an ACL set, which Kafka writes in hash-set order, are sorted.

Decoding is lenient where Kafka is (unknown keys; PascalCase, upper-case or enum names; an unknown operation or
permission name becomes UNKNOWN, as in Kafka) and raises ValueError on what Kafka would throw on -- and, unlike
Kafka, on unparsable JSON in an ACL znode (Kafka reads that as "no ACLs") and on a change event naming an unknown
resource or pattern type (Kafka reads the ACLs of an ``Unknown`` path there: nothing).

**One node** (:class:`LocalAclStore`): every binding in ``acls.json`` in a directory, replaced atomically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from strata.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_principal,
)

__all__ = [
    "CHANGE_SEQUENCE_PREFIX",
    "EXTENDED_ACL_CHANGES_PATH",
    "EXTENDED_ACL_PATH",
    "LITERAL_ACL_CHANGES_PATH",
    "LITERAL_ACL_PATH",
    "PREFIXED_ACL_PATH",
    "LocalAclStore",
    "acl_path",
    "acl_paths_to_create",
    "acl_store_path",
    "acl_type_path",
    "change_notification",
    "decode_acls",
    "decode_change",
    "encode_acls",
    "parse_acl_path",
]

LITERAL_ACL_PATH = "/kafka-acl"
EXTENDED_ACL_PATH = "/kafka-acl-extended"
PREFIXED_ACL_PATH = "/kafka-acl-extended/prefixed"
LITERAL_ACL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES_PATH = "/kafka-acl-extended-changes"
CHANGE_SEQUENCE_PREFIX = "acl_changes_"
ACL_VERSION = 1
_CONCRETE_TYPES = [t for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY)]


# ---------------------------------------------------------------------------------------------------------------
# JSON as Jackson writes it

_ESCAPES = {i: f"\\u{i:04X}" for i in range(0x20)}
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\", 0x08: "\\b", 0x09: "\\t", 0x0C: "\\f", 0x0A: "\\n",
                 0x0D: "\\r"})


def _jstr(s: str) -> str:
    return '"' + s.translate(_ESCAPES) + '"'


def _jobj(pairs: Iterable[tuple[str, str]]) -> str:
    """A JSON object of pre-encoded values, keys in the given order, compact."""
    return "{" + ",".join(f"{_jstr(k)}:{v}" for k, v in pairs) + "}"


def _parse_json(data: bytes | str, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{what} is not JSON: {e}") from None


def _field(obj: dict[str, Any], key: str, kind: type, what: str) -> Any:
    if key not in obj:
        raise ValueError(f"{what} has no {key!r}: {obj!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{what}: {key!r} is not a{'n' if kind is int else ''} {kind.__name__}: {value!r}")
    return value


# ---------------------------------------------------------------------------------------------------------------
# Paths


def _check_znode_name(name: str) -> None:
    """ZooKeeper's ``PathUtils.validatePath`` for one path component (and no ``/``: it would nest the znode)."""
    if not name:
        raise ValueError("an ACL's resource name cannot be empty in ZooKeeper")
    if "/" in name or name in (".", ".."):
        raise ValueError(f"ZooKeeper cannot store ACLs for resource name {name!r}")
    for c in name:
        o = ord(c)
        if o <= 0x1F or 0x7F <= o <= 0x9F or 0xD800 <= o <= 0xF8FF or o >= 0xFFF0:
            raise ValueError(f"ZooKeeper cannot store ACLs for resource name {name!r} (character U+{o:04X})")


def acl_store_path(pattern_type: PatternType) -> str:
    """The root of one pattern type's ACL znodes (``ZkAclStore.aclPath``)."""
    if pattern_type == PatternType.LITERAL:
        return LITERAL_ACL_PATH
    if pattern_type == PatternType.PREFIXED:
        return PREFIXED_ACL_PATH
    raise ValueError(f"Invalid pattern type: {PatternType(pattern_type).name}")


def acl_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    """``/kafka-acl/Topic``: the parent of one type's ACL znodes (list its children to load them)."""
    return f"{acl_store_path(pattern_type)}/{ResourceType(resource_type).pascal_name}"


def acl_path(pattern: ResourcePattern) -> str:
    """The znode of a pattern's ACL set: ``/kafka-acl/Topic/orders``, ``/kafka-acl-extended/prefixed/Group/app-``.
    ValueError for an UNKNOWN or ANY type and for names ZooKeeper refuses (empty, ``/``, ``.``, ``..``, control
    and private-use characters, characters outside the BMP)."""
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise ValueError(f"no ACL znode for resource type {ResourceType(pattern.resource_type).name}")
    _check_znode_name(pattern.name)
    return f"{acl_type_path(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"


def parse_acl_path(path: str) -> ResourcePattern:
    """The pattern whose ACL znode this is (the inverse of :func:`acl_path`). The type may be PascalCase or upper
    case (Kafka's ``SecurityUtils.resourceType``); ValueError for any other path."""
    for root, ptype in ((PREFIXED_ACL_PATH, PatternType.PREFIXED), (LITERAL_ACL_PATH, PatternType.LITERAL)):
        if path.startswith(root + "/"):
            type_name, sep, name = path[len(root) + 1:].partition("/")
            rtype = ResourceType.from_name(type_name)
            if sep and name and "/" not in name and rtype not in (ResourceType.UNKNOWN, ResourceType.ANY):
                return ResourcePattern(rtype, name, ptype)
            break
    raise ValueError(f"not an ACL znode path: {path!r}")


def acl_paths_to_create() -> list[str]:
    """The persistent znodes a broker creates at startup (``KafkaZkClient.createAclPaths``): each store's root and
    its per-type children, and both change roots. Parents come before children."""
    out = [LITERAL_ACL_PATH]
    out += [acl_type_path(PatternType.LITERAL, t) for t in _CONCRETE_TYPES]
    out += [EXTENDED_ACL_PATH, PREFIXED_ACL_PATH]
    out += [acl_type_path(PatternType.PREFIXED, t) for t in _CONCRETE_TYPES]
    out += [LITERAL_ACL_CHANGES_PATH, EXTENDED_ACL_CHANGES_PATH]
    return out


# ---------------------------------------------------------------------------------------------------------------
# ACL znode values


def _entry_pairs(e: AccessControlEntry) -> list[tuple[str, str]]:
    return [("principal", _jstr(e.principal)),
            ("permissionType", _jstr(AclPermissionType(e.permission_type).pascal_name)),
            ("host", _jstr(e.host)),
            ("operation", _jstr(AclOperation(e.operation).pascal_name))]


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """A pattern's ACL set as its znode's value (``ResourceZNode.encode``), entries sorted."""
    items = ",".join(_jobj(_entry_pairs(e)) for e in sorted(set(entries), key=AccessControlEntry.sort_key))
    return _jobj([("acls", f"[{items}]"), ("version", str(ACL_VERSION))]).encode()


def _decode_entry(item: Any, what: str) -> AccessControlEntry:
    if not isinstance(item, dict):
        raise ValueError(f"{what}: an ACL is not a JSON object: {item!r}")
    principal = _field(item, "principal", str, what)
    parse_principal(principal)
    return AccessControlEntry(
        principal,
        _field(item, "host", str, what),
        AclOperation.from_name(_field(item, "operation", str, what)),
        AclPermissionType.from_name(_field(item, "permissionType", str, what)),
    )


def decode_acls(data: bytes | None) -> set[AccessControlEntry]:
    """A znode's value as its ACL set (``AclEntry.fromBytes``): no data is no ACLs; ``version`` must be 1."""
    if not data:
        return set()
    what = "ACL znode"
    obj = _parse_json(data, what)
    if not isinstance(obj, dict):
        raise ValueError(f"{what} is not a JSON object: {obj!r}")
    version = _field(obj, "version", int, what)
    if version != ACL_VERSION:
        raise ValueError(f"{what} has version {version}, expected {ACL_VERSION}")
    acls = _field(obj, "acls", list, what)
    return {_decode_entry(item, what) for item in acls}


# ---------------------------------------------------------------------------------------------------------------
# Change notifications


def change_notification(pattern: ResourcePattern) -> tuple[str, bytes]:
    """The sequential znode announcing a change of ``pattern``'s ACLs (``createChangeNode``): the path to create
    with a sequence suffix (``/kafka-acl-changes/acl_changes_``; ZooKeeper appends ``0000000042``) and its data."""
    if pattern.pattern_type == PatternType.LITERAL:
        return (f"{LITERAL_ACL_CHANGES_PATH}/{CHANGE_SEQUENCE_PREFIX}",
                f"{ResourceType(pattern.resource_type).name}:{pattern.name}".encode())
    if pattern.pattern_type == PatternType.UNKNOWN:
        raise ValueError("no change notification for an UNKNOWN pattern type")
    data = _jobj([("version", "1"), ("resourceType", _jstr(ResourceType(pattern.resource_type).name)),
                  ("name", _jstr(pattern.name)), ("patternType", _jstr(PatternType(pattern.pattern_type).name))])
    return f"{EXTENDED_ACL_CHANGES_PATH}/{CHANGE_SEQUENCE_PREFIX}", data.encode()


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def decode_change(parent: str, data: bytes) -> ResourcePattern:
    """The pattern a change notification names. ``parent`` says which store it came from: a change root
    (``/kafka-acl-changes``, ``/kafka-acl-extended-changes``) or any path under it (the sequential node itself)."""
    if _under(parent, LITERAL_ACL_CHANGES_PATH):
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise ValueError(f"ACL change notification is not UTF-8: {data!r}") from None
        type_name, sep, name = text.partition(":")
        if not sep:
            raise ValueError(f"expected a string in format ResourceType:ResourceName but got {text}")
        rtype = ResourceType.from_name(type_name)
        if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise ValueError(f"unknown resource type {type_name!r} in ACL change notification {text!r}")
        return ResourcePattern(rtype, name, PatternType.LITERAL)
    if _under(parent, EXTENDED_ACL_CHANGES_PATH):
        what = "ACL change event"
        obj = _parse_json(data, what)
        if not isinstance(obj, dict):
            raise ValueError(f"{what} is not a JSON object: {obj!r}")
        version = obj.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"{what}: 'version' is not an int: {version!r}")
        if version > 1:
            raise ValueError(f"Acl change event received for unsupported version: {version}")
        type_name = _field(obj, "resourceType", str, what)
        pattern_name = _field(obj, "patternType", str, what)
        name = _field(obj, "name", str, what)
        rtype = ResourceType.from_name(type_name)
        ptype = PatternType.from_name(pattern_name)
        if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise ValueError(f"{what}: unknown resource type {type_name!r}")
        if not ptype.is_specific:
            raise ValueError(f"{what}: unknown pattern type {pattern_name!r}")
        return ResourcePattern(rtype, name, ptype)
    raise ValueError(f"not an ACL change path: {parent!r}")


# ---------------------------------------------------------------------------------------------------------------
# Single node


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalAclStore:
    """Every ACL of a single-node broker in ``<directory>/acls.json``::

        {"version": 1, "acls": [{"resourceType": "Topic", "patternType": "LITERAL", "name": "orders",
                                 "principal": "User:alice", "host": "*", "operation": "Read",
                                 "permissionType": "Allow"}, ...]}

    :meth:`save` writes the whole set to ``acls.json.tmp``, fsyncs it, renames it over ``acls.json`` and fsyncs the
    directory: after a crash the file is the old set or the new one, never a mix. A temp file a crash left behind is
    ignored (and removed) by :meth:`load`. Blocking I/O: call it off the event loop if the set is large."""

    FILE_NAME = "acls.json"
    VERSION = 1

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    @property
    def path(self) -> Path:
        return self.directory / self.FILE_NAME

    @property
    def _tmp_path(self) -> Path:
        return self.directory / (self.FILE_NAME + ".tmp")

    def load(self) -> list[AclBinding]:
        """The stored bindings (none if there is no file yet). ValueError if the file is not this format."""
        try:
            self._tmp_path.unlink()
        except FileNotFoundError:
            pass
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        what = str(self.path)
        obj = _parse_json(data, what)
        if not isinstance(obj, dict):
            raise ValueError(f"{what} is not a JSON object")
        version = _field(obj, "version", int, what)
        if version != self.VERSION:
            raise ValueError(f"{what} has version {version}, this broker reads version {self.VERSION}")
        out = []
        for item in _field(obj, "acls", list, what):
            if not isinstance(item, dict):
                raise ValueError(f"{what}: an ACL is not a JSON object: {item!r}")
            type_name = _field(item, "resourceType", str, what)
            rtype = ResourceType.from_name(type_name)
            if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
                raise ValueError(f"{what}: unknown resource type {type_name!r}")
            ptype = PatternType.from_name(_field(item, "patternType", str, what))
            if not ptype.is_specific:
                raise ValueError(f"{what}: unknown pattern type {item['patternType']!r}")
            pattern = ResourcePattern(rtype, _field(item, "name", str, what), ptype)
            out.append(AclBinding(pattern, _decode_entry(item, what)))
        return out

    def save(self, bindings: Iterable[AclBinding]) -> None:
        """Replace the stored set with ``bindings``, atomically and durably."""
        acls = [
            {"resourceType": ResourceType(b.pattern.resource_type).pascal_name,
             "patternType": PatternType(b.pattern.pattern_type).name,
             "name": b.pattern.name,
             "principal": b.entry.principal,
             "host": b.entry.host,
             "operation": AclOperation(b.entry.operation).pascal_name,
             "permissionType": AclPermissionType(b.entry.permission_type).pascal_name}
            for b in sorted(set(bindings), key=AclBinding.sort_key)
        ]
        text = json.dumps({"version": self.VERSION, "acls": acls}, ensure_ascii=False, indent=1)
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self._tmp_path
        with open(tmp, "wb") as f:
            f.write(text.encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.directory)
