"""Kafka's ``AclAuthorizer`` (ZooKeeper mode) decisions over an in-memory ACL cache, without I/O.

**What is allowed.** :meth:`AclAuthorizer.authorize` answers as Kafka 3.9's ``AclAuthorizer.authorizeAction``:

* a principal of ``super.users`` may do anything;
* the ACLs that apply to a resource are those of the LITERAL pattern with its name, of the LITERAL wildcard ``*``
  of its type, and of every PREFIXED pattern whose name is a prefix of its name;
* if there are none at all (whatever their principal, host or operation), ``allow.everyone.if.no.acl.found``
  decides (default: deny);
* an entry concerns the request if its principal is the request's or ``User:*`` and its host is the request's or
  ``*``; an operation ``ALL`` stands for every operation, in ALLOW and DENY entries alike;
* a DENY for the operation refuses, whatever ALLOW there is; otherwise an ALLOW for it grants -- where an ALLOW of
  READ, WRITE, DELETE or ALTER also grants DESCRIBE, and an ALLOW of ALTER_CONFIGS grants DESCRIBE_CONFIGS (a DENY
  implies nothing beyond its own operation).

:meth:`AclAuthorizer.authorize_any` is Kafka's ``authorizeByResourceType`` as ``AclAuthorizer`` overrides it (used
for an idempotent producer's IDEMPOTENT_WRITE, for instance). Only the operation itself and ALL count (no implied
operations). A super user may; a DENY on the wildcard ``*`` (LITERAL) refuses; then ``allow.everyone.if.no.acl.found``
allows; otherwise the caller may if some ALLOW -- on the wildcard, on a LITERAL name that no DENY names and no
PREFIXED DENY covers, or on a PREFIXED name no PREFIXED DENY covers -- leaves a resource it can use. (Kafka's
``Authorizer`` interface has a slower default implementation that differs in corner cases with
``allow.everyone.if.no.acl.found``; the ZooKeeper-mode broker uses this one.)

**How fast.** A Produce or Fetch authorizes every topic it names, so a decision never scans the ACLs: per resource
type there is a dict of LITERAL names and a dict of PREFIXED names with the set of prefix lengths in use; a lookup
tries the name, ``*`` and the name cut at each length in use. Each pattern's entries are folded beforehand into
``principal -> host -> (deny bits, allow bits)``, so a decision is a handful of dict lookups and bit tests.

**Changes.** :meth:`AclAuthorizer.apply_change` installs the whole ACL set of one pattern (a ZooKeeper change
notification names a pattern; the new set is read from its znode); :meth:`AclAuthorizer.load` installs everything.
:meth:`AclAuthorizer.create_acls` and :meth:`AclAuthorizer.delete_acls` do CreateAcls/DeleteAcls on the cache,
calling an optional ``commit`` hook first (to persist; if it raises, nothing changes). For a ZooKeeper
read-modify-write loop the pure pieces are here too: :func:`add_entries`, :func:`remove_matching` and
:func:`delete_candidates`.

**Threads.** None of this locks. The broker calls it from its one asyncio thread, and the changes come from the
same loop; a decision runs to completion between two changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from strata.errors import ApiError, ErrorCode, KafkaError
from strata.security.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    creation_error,
    deletion_filter_error,
    implied_allow_operations,
    parse_principal,
    supported_operations,
)

__all__ = [
    "AclAuthorizer",
    "AclChanges",
    "AclDeleteResult",
    "add_entries",
    "delete_candidates",
    "parse_super_users",
    "remove_matching",
]

_EMPTY: frozenset[AccessControlEntry] = frozenset()
_ALL_BIT = 1 << AclOperation.ALL
# the bits of a DENY / ALLOW mask that refuse / grant an operation
_DENY_BITS = {op: (1 << op) | _ALL_BIT for op in AclOperation}
_ALLOW_BITS = {op: sum(1 << o for o in implied_allow_operations(op)) | _ALL_BIT for op in AclOperation}

# principal -> host -> [deny bits, allow bits]
_Masks = dict[str, dict[str, list[int]]]


def _fold(entries: Iterable[AccessControlEntry]) -> _Masks:
    out: _Masks = {}
    for e in entries:
        hosts = out.get(e.principal)
        if hosts is None:
            hosts = out[e.principal] = {}
        bits = hosts.get(e.host)
        if bits is None:
            bits = hosts[e.host] = [0, 0]
        if e.permission_type == AclPermissionType.DENY:
            bits[0] |= 1 << e.operation
        elif e.permission_type == AclPermissionType.ALLOW:
            bits[1] |= 1 << e.operation
        # an UNKNOWN permission grants and refuses nothing, but the pattern still "has ACLs"
    return out


class _TypeIndex:
    """The patterns of one resource type: LITERAL and PREFIXED names to their folded entries."""

    __slots__ = ("literal", "prefixed", "prefix_lengths", "_length_counts")

    def __init__(self) -> None:
        self.literal: dict[str, _Masks] = {}
        self.prefixed: dict[str, _Masks] = {}
        self.prefix_lengths: tuple[int, ...] = ()
        self._length_counts: dict[int, int] = {}

    def put_prefixed(self, name: str, masks: _Masks) -> None:
        if name not in self.prefixed:
            n = len(name)
            count = self._length_counts.get(n, 0)
            self._length_counts[n] = count + 1
            if count == 0:
                self.prefix_lengths = tuple(sorted(self._length_counts))
        self.prefixed[name] = masks

    def drop_prefixed(self, name: str) -> None:
        if self.prefixed.pop(name, None) is not None:
            n = len(name)
            count = self._length_counts[n] - 1
            if count:
                self._length_counts[n] = count
            else:
                del self._length_counts[n]
                self.prefix_lengths = tuple(sorted(self._length_counts))


def parse_super_users(value: str | Iterable[str] | None) -> frozenset[str]:
    """``super.users``: principals separated by ``;`` (``"User:admin; User:broker"``), each trimmed and checked to
    be ``<type>:<name>`` (ValueError otherwise). Empty items are skipped."""
    if value is None:
        return frozenset()
    items = value.split(";") if isinstance(value, str) else list(value)
    out = set()
    for item in items:
        item = item.strip()
        if item:
            parse_principal(item)
            out.add(item)
    return frozenset(out)


# ---------------------------------------------------------------------------------------------------------------
# Pure pieces of CreateAcls / DeleteAcls (for a read-modify-write against ZooKeeper)


def add_entries(
    current: Iterable[AccessControlEntry], new: Iterable[AccessControlEntry]
) -> frozenset[AccessControlEntry]:
    """The ACL set of a pattern after CreateAcls added ``new`` to ``current`` (a set: re-adding is a no-op)."""
    return frozenset(current).union(new)


def remove_matching(
    pattern: ResourcePattern,
    current: Iterable[AccessControlEntry],
    filters: Sequence[tuple[int, AclBindingFilter]],
) -> tuple[frozenset[AccessControlEntry], list[tuple[int, AclBinding]]]:
    """DeleteAcls on one pattern's ACL set: the entries left, and each removed binding with the index of the filter
    that removed it -- the first (in request order) whose pattern filter matches ``pattern`` and whose entry filter
    matches the entry, as in Kafka (a binding is reported under one filter only)."""
    applicable = [(i, f.entry_filter) for i, f in filters if f.pattern_filter.matches(pattern)]
    kept = []
    removed: list[tuple[int, AclBinding]] = []
    for entry in sorted(current, key=AccessControlEntry.sort_key):
        for i, entry_filter in applicable:
            if entry_filter.matches(entry):
                removed.append((i, AclBinding(pattern, entry)))
                break
        else:
            kept.append(entry)
    return frozenset(kept), removed


def delete_candidates(
    patterns: Iterable[ResourcePattern], filters: Sequence[AclBindingFilter]
) -> set[ResourcePattern]:
    """The patterns a DeleteAcls must update (Kafka's ``AclAuthorizer.deleteAcls``): the known ``patterns`` some filter
    matches, plus the pattern(s) a filter names exactly even if not known yet (its ACLs may have been created on
    another broker and not reached this cache): a LITERAL or PREFIXED filter names one, a pattern type ANY names the
    LITERAL and the PREFIXED one. A MATCH filter only reaches known patterns (Kafka says the same)."""
    out = {p for p in patterns if any(f.pattern_filter.matches(p) for f in filters)}
    for f in filters:
        pf = f.pattern_filter
        if not pf.matches_at_most_one:
            continue
        assert pf.name is not None
        if pf.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            out.add(ResourcePattern(pf.resource_type, pf.name, pf.pattern_type))
        elif pf.pattern_type == PatternType.ANY:
            out.add(ResourcePattern(pf.resource_type, pf.name, PatternType.LITERAL))
            out.add(ResourcePattern(pf.resource_type, pf.name, PatternType.PREFIXED))
    return out


def _api_error(exc: BaseException) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, KafkaError):
        return ApiError(exc.error_code, str(exc))
    return ApiError(ErrorCode.UNKNOWN_SERVER_ERROR)


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    """The outcome of one DeleteAcls filter.

    ``error`` set: the filter was refused (INVALID_REQUEST) and nothing was matched. Otherwise ``bindings`` are the
    bindings it matched, each deleted unless ``binding_error`` is set (the change could not be committed; Kafka's
    per-binding error of ``DeleteAclsMatchingAcl``)."""

    bindings: tuple[AclBinding, ...] = ()
    error: ApiError | None = None
    binding_error: ApiError | None = None


class AclChanges:
    """The ACL sets a CreateAcls or DeleteAcls is about to install, handed to the ``commit`` hook before the cache
    changes. ``changed`` maps each pattern to its whole new ACL set (empty: the pattern is gone -- delete its znode).
    :meth:`all_bindings` is every binding as it will be (for a store that rewrites one file). Use it during the
    hook call only: it reads the authorizer's live state."""

    __slots__ = ("changed", "_before")

    def __init__(self, changed: Mapping[ResourcePattern, frozenset[AccessControlEntry]],
                 before: Mapping[ResourcePattern, frozenset[AccessControlEntry]]) -> None:
        self.changed = dict(changed)
        self._before = before

    def all_acls(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        merged = dict(self._before)
        for pattern, entries in self.changed.items():
            if entries:
                merged[pattern] = entries
            else:
                merged.pop(pattern, None)
        return merged

    def all_bindings(self) -> list[AclBinding]:
        return sorted((AclBinding(p, e) for p, entries in self.all_acls().items() for e in entries),
                      key=AclBinding.sort_key)


CommitHook = Callable[[AclChanges], None]


# ---------------------------------------------------------------------------------------------------------------


class AclAuthorizer:
    """ACL cache and decisions (see the module docstring for the rules).

    Not thread-safe, and needs not be: the broker calls it from its one asyncio thread, and ACL changes (requests,
    ZooKeeper notifications) are applied from the same loop."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users: frozenset[str] = parse_super_users(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._by_type: dict[ResourceType, _TypeIndex] = {}
        # Kafka's resourceCache for authorize_any: (type, pattern type, principal, host, op, permission) -> names
        self._names: dict[tuple[ResourceType, PatternType, str, str, AclOperation, AclPermissionType], set[str]] = {}
        self._count = 0

    # -- reading ---------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        """The number of ACLs (bindings)."""
        return self._count

    def acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        """The ACL set of one pattern (empty if none)."""
        return self._acls.get(pattern, _EMPTY)

    def patterns(self) -> list[ResourcePattern]:
        return sorted(self._acls, key=ResourcePattern.sort_key)

    def bindings(self) -> list[AclBinding]:
        """Every ACL, in a stable order (type, pattern type, name, then entry)."""
        return sorted((AclBinding(p, e) for p, entries in self._acls.items() for e in entries),
                      key=AclBinding.sort_key)

    def describe_acls(self, filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings a DescribeAcls filter matches (Kafka's ``acls(filter)``), in a stable order."""
        pf, ef = filter.pattern_filter, filter.entry_filter
        if pf.matches_at_most_one and pf.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            assert pf.name is not None
            pattern = ResourcePattern(pf.resource_type, pf.name, pf.pattern_type)
            candidates = [(pattern, self._acls.get(pattern, _EMPTY))]
        else:
            candidates = [(p, entries) for p, entries in self._acls.items() if pf.matches(p)]
        out = [AclBinding(p, e) for p, entries in candidates for e in entries if ef.matches(e)]
        out.sort(key=AclBinding.sort_key)
        return out

    # -- changing --------------------------------------------------------------------------------------------------

    def load(self, bindings: Iterable[AclBinding]) -> None:
        """Replace every ACL with ``bindings`` (startup: everything read from the store)."""
        grouped: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for b in bindings:
            grouped.setdefault(b.pattern, set()).add(b.entry)
        self._acls.clear()
        self._by_type.clear()
        self._names.clear()
        self._count = 0
        for pattern, entries in grouped.items():
            self.apply_change(pattern, entries)

    def apply_change(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Install the whole ACL set of one pattern (empty: it has none any more) -- what a ZooKeeper change
        notification leads to, once the pattern's znode is read (Kafka's ``updateCache``)."""
        new = frozenset(entries)
        old = self._acls.get(pattern, _EMPTY)
        if new == old:
            return
        rtype, ptype, name = pattern.resource_type, pattern.pattern_type, pattern.name
        for e in new - old:
            key = (rtype, ptype, e.principal, e.host, e.operation, e.permission_type)
            names = self._names.get(key)
            if names is None:
                self._names[key] = {name}
            else:
                names.add(name)
        for e in old - new:
            key = (rtype, ptype, e.principal, e.host, e.operation, e.permission_type)
            names = self._names.get(key)
            if names is not None:
                names.discard(name)
                if not names:
                    del self._names[key]
        self._count += len(new) - len(old)

        index = self._by_type.get(rtype)
        if new:
            self._acls[pattern] = new
            if ptype.is_specific:  # an UNKNOWN pattern type is kept (DescribeAcls shows it) but applies to nothing
                if index is None:
                    index = self._by_type[rtype] = _TypeIndex()
                if ptype == PatternType.LITERAL:
                    index.literal[name] = _fold(new)
                else:
                    index.put_prefixed(name, _fold(new))
        else:
            del self._acls[pattern]
            if index is not None:
                if ptype == PatternType.LITERAL:
                    index.literal.pop(name, None)
                elif ptype == PatternType.PREFIXED:
                    index.drop_prefixed(name)
                if not index.literal and not index.prefixed:
                    del self._by_type[rtype]

    def create_acls(self, bindings: Sequence[AclBinding], commit: CommitHook | None = None) -> list[ApiError | None]:
        """CreateAcls: each binding is checked (:func:`~strata.security.acl.creation_error`, an INVALID_REQUEST
        otherwise) and added to its pattern's set. Returns one result per binding (None: created, or already there).

        ``commit`` is called once with the new sets of the changed patterns before the cache changes; if it raises,
        the cache is left as it was and each binding of a changed pattern gets the error (a KafkaError's code, else
        UNKNOWN_SERVER_ERROR)."""
        results: list[ApiError | None] = [None] * len(bindings)
        groups: dict[ResourcePattern, list[tuple[int, AccessControlEntry]]] = {}
        for i, binding in enumerate(bindings):
            error = creation_error(binding)
            if error is not None:
                results[i] = ApiError(ErrorCode.INVALID_REQUEST, error)
            else:
                groups.setdefault(binding.pattern, []).append((i, binding.entry))
        changed: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        for pattern, items in groups.items():
            current = self._acls.get(pattern, _EMPTY)
            new = add_entries(current, (e for _, e in items))
            if new != current:
                changed[pattern] = new
        if not changed:
            return results
        if commit is not None:
            try:
                commit(AclChanges(changed, self._acls))
            except Exception as exc:  # Kafka: any failure of the update becomes the bindings' ApiException
                error = _api_error(exc)
                for pattern in changed:
                    for i, _ in groups[pattern]:
                        results[i] = error
                return results
        for pattern, entries in changed.items():
            self.apply_change(pattern, entries)
        return results

    def delete_acls(
        self, filters: Sequence[AclBindingFilter], commit: CommitHook | None = None
    ) -> list[AclDeleteResult]:
        """DeleteAcls: one result per filter with the bindings it matched and removed. A binding several filters
        match is reported under the first of them only (Kafka's ``deleteAcls``). A filter with UNKNOWN parts is
        refused with INVALID_REQUEST (:func:`~strata.security.acl.deletion_filter_error`).

        ``commit`` as for :meth:`create_acls`; if it raises, nothing is deleted and every matched binding carries
        the error (``AclDeleteResult.binding_error``)."""
        refused: dict[int, ApiError] = {}
        valid: list[tuple[int, AclBindingFilter]] = []
        for i, f in enumerate(filters):
            error = deletion_filter_error(f)
            if error is not None:
                refused[i] = ApiError(ErrorCode.INVALID_REQUEST, error)
            else:
                valid.append((i, f))
        deleted: dict[int, list[AclBinding]] = {}
        changed: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        if valid:
            for pattern in sorted(delete_candidates(self._acls, [f for _, f in valid]), key=ResourcePattern.sort_key):
                current = self._acls.get(pattern, _EMPTY)
                if not current:
                    continue
                kept, removed = remove_matching(pattern, current, valid)
                if removed:
                    changed[pattern] = kept
                    for i, binding in removed:
                        deleted.setdefault(i, []).append(binding)
        binding_error: ApiError | None = None
        if changed:
            if commit is not None:
                try:
                    commit(AclChanges(changed, self._acls))
                except Exception as exc:
                    binding_error = _api_error(exc)
            if binding_error is None:
                for pattern, entries in changed.items():
                    self.apply_change(pattern, entries)
        out = []
        for i in range(len(filters)):
            if i in refused:
                out.append(AclDeleteResult(error=refused[i]))
            else:
                matched = tuple(deleted.get(i, ()))
                out.append(AclDeleteResult(matched, binding_error=binding_error if matched else None))
        return out

    # -- deciding --------------------------------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  resource_name: str) -> bool:
        """May ``principal`` (``"User:alice"``) connected from ``host`` (see
        :func:`~strata.security.acl.host_address`) do ``operation`` on the resource? Kafka's ``authorizeAction``."""
        if principal in self.super_users:
            return True
        index = self._by_type.get(resource_type)
        if index is None:
            return self.allow_everyone_if_no_acl_found
        matched = []
        literal = index.literal
        masks = literal.get(resource_name)
        if masks is not None:
            matched.append(masks)
        if resource_name != WILDCARD_RESOURCE:
            masks = literal.get(WILDCARD_RESOURCE)
            if masks is not None:
                matched.append(masks)
        if index.prefix_lengths:
            prefixed = index.prefixed
            n = len(resource_name)
            for length in index.prefix_lengths:
                if length > n:
                    break
                masks = prefixed.get(resource_name[:length])
                if masks is not None:
                    matched.append(masks)
        if not matched:
            return self.allow_everyone_if_no_acl_found
        deny = allow = 0
        for masks in matched:
            for p in (principal, WILDCARD_PRINCIPAL):
                hosts = masks.get(p)
                if hosts:
                    bits = hosts.get(host)
                    if bits is not None:
                        deny |= bits[0]
                        allow |= bits[1]
                    bits = hosts.get(WILDCARD_HOST)
                    if bits is not None:
                        deny |= bits[0]
                        allow |= bits[1]
        if deny & _DENY_BITS[operation]:
            return False
        return bool(allow & _ALLOW_BITS[operation])

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              resource_name: str) -> int:
        """The ``*_authorized_operations`` bit field of a resource for this caller: bit ``1 << op`` for each of the
        operations that apply to its type (:func:`~strata.security.acl.supported_operations`) it may do."""
        value = 0
        for op in supported_operations(resource_type):
            if self.authorize(principal, host, op, resource_type, resource_name):
                value |= 1 << op
        return value

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May the caller do ``operation`` on at least one resource of ``resource_type``? Kafka's
        ``AclAuthorizer.authorizeByResourceType`` (see the module docstring)."""
        if resource_type == ResourceType.ANY:
            raise ValueError("Must specify a non-filter resource type for authorizeByResourceType")
        if resource_type == ResourceType.UNKNOWN:
            raise ValueError("Unknown resource type")
        if operation == AclOperation.ANY:
            raise ValueError("Must specify a non-filter operation type for authorizeByResourceType")
        if operation == AclOperation.UNKNOWN:
            raise ValueError("Unknown operation type")
        if principal in self.super_users:
            return True

        principals = {principal, WILDCARD_PRINCIPAL}
        hosts = {host, WILDCARD_HOST}
        ops = {operation, AclOperation.ALL}
        names = self._names

        def matching(permission: AclPermissionType, pattern_type: PatternType) -> list[set[str]]:
            found = []
            for p in principals:
                for h in hosts:
                    for o in ops:
                        s = names.get((resource_type, pattern_type, p, h, o, permission))
                        if s:
                            found.append(s)
            return found

        deny_literals = matching(AclPermissionType.DENY, PatternType.LITERAL)
        if any(WILDCARD_RESOURCE in s for s in deny_literals):
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = matching(AclPermissionType.DENY, PatternType.PREFIXED)
        allow_prefixes = matching(AclPermissionType.ALLOW, PatternType.PREFIXED)
        allow_literals = matching(AclPermissionType.ALLOW, PatternType.LITERAL)
        if not deny_literals and not deny_prefixes:
            return bool(allow_prefixes or allow_literals)

        def dominated(name: str) -> bool:  # a PREFIXED DENY covers every resource this name covers
            return any(name[:i] in s for i in range(1, len(name) + 1) for s in deny_prefixes)

        for s in allow_prefixes:
            if any(not dominated(prefix) for prefix in s):
                return True
        for s in allow_literals:
            for literal in s:
                if literal == WILDCARD_RESOURCE:
                    return True
                if not any(literal in d for d in deny_literals) and not dominated(literal):
                    return True
        return False
