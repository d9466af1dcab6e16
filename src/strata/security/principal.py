"""Kafka principals and the principal of a TLS connection.

A principal is ``<type>:<name>`` (``User:alice``); ACLs and quotas are keyed by it. A TLS client that
presents a certificate is ``User:<name>`` where the name comes from the certificate's subject
distinguished name, in the RFC 2253 form Java's ``X500Principal.getName()`` prints
(``CN=alice,OU=eng,O=Acme,C=US``), put through ``ssl.principal.mapping.rules``
(:class:`SslPrincipalMapper`). A TLS client without a certificate is ``User:ANONYMOUS``.

The distinguished name can be computed from Python's ``getpeercert()`` dictionary
(:func:`distinguished_name`) or, exactly as Java does, from the certificate's DER bytes
(:func:`certificate_info`, a small X.509 reader that also gives the subject alternative names the
keystore reload checks compare).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from strata.errors import InvalidConfigError

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """``principal_type:name``; equal when both parts are (Kafka ignores ``tokenAuthenticated`` too)."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); split at the first colon, as Kafka does."""
        principal_type, colon, name = (text or "").partition(":")
        if not colon:
            raise ValueError(f"expected a string in format principalType:principalName but got {text!r}")
        return cls(principal_type, name)

    @property
    def is_wildcard(self) -> bool:
        return self.name == "*"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
WILDCARD = KafkaPrincipal(USER_TYPE, "*")  # ACLs for every user (Kafka's AclEntry.WILDCARD_PRINCIPAL_STRING)


class NoMatchingRuleError(Exception):
    """No ``ssl.principal.mapping.rules`` rule applies to a distinguished name (and there is no DEFAULT).
    Kafka fails the authentication of that connection; so must the caller."""


# -- ssl.principal.mapping.rules -----------------------------------------------------------------------

# Kafka's grammar (SslPrincipalMapper), with Java's regex semantics that Python's re shares for these
# patterns: ``RULE:pattern/replacement/[LU]`` where pattern and replacement may hold escaped characters
# (``\/``, ``\,``), ``DEFAULT``, or anything else (an invalid rule unless empty).
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)", re.ASCII)
_RULE_PARSER = re.compile(_RULE, re.ASCII)
_LINE_BREAKS = re.compile(r"\s*[\r\n]+\s*", re.ASCII)
_JAVA_NAMED_GROUP = re.compile(r"\(\?<([A-Za-z][A-Za-z0-9]*)>")
_BACK_REFERENCE = re.compile(r"\$(\d+)")


@dataclass(frozen=True, slots=True)
class _Rule:
    is_default: bool
    pattern_text: str = ""
    replacement_text: str = ""
    to_lower: bool = False
    to_upper: bool = False
    pattern: re.Pattern[str] | None = None
    expand: Callable[[re.Match[str]], str] | None = None

    def apply(self, dn: str) -> str | None:
        if self.is_default:
            return dn
        assert self.pattern is not None and self.expand is not None
        if self.pattern.fullmatch(dn) is None:  # Java's Matcher.matches(): the whole name
            return None
        result = self.pattern.sub(self.expand, dn)  # Java's String.replaceAll with the same pattern
        if self.to_lower:
            return result.lower()
        if self.to_upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        out = f"RULE:{self.pattern_text}/{self.replacement_text}"
        return out + ("/L" if self.to_lower else "/U" if self.to_upper else "")


def _compile_java_regex(text: str, rules: str) -> re.Pattern[str]:
    # Java's \w, \d, \s are ASCII unless asked otherwise; (?<name>...) is Python's (?P<name>...)
    try:
        return re.compile(_JAVA_NAMED_GROUP.sub(r"(?P<\1>", text), re.ASCII)
    except re.error as e:
        raise InvalidConfigError(f"Invalid value {rules!r} for configuration ssl.principal.mapping.rules: "
                                 f"pattern {text!r} is not a valid regular expression ({e})") from e


def _java_replacement(replacement: str, pattern: re.Pattern[str], rules: str) -> Callable[[re.Match[str]], str]:
    """Java's Matcher replacement syntax (``$n``, ``${name}``, ``\\x`` = literal x) as a ``re.sub``
    callable. As Kafka does (escapeLiteralBackReferences), ``$n`` beyond the pattern's groups is
    literal text: with 3 groups, ``$1@$4`` gives ``<group 1>@$4``."""
    groups = pattern.groups
    if groups:
        def literal_if_missing(m: re.Match[str]) -> str:
            digits = m.group(1)
            if digits.startswith("0"):
                return m.group(0)
            index = int(digits)
            while index > groups and index >= 10:
                index //= 10
            return "\\" + m.group(0) if index > groups else m.group(0)
        replacement = _BACK_REFERENCE.sub(literal_if_missing, replacement)

    def bad(why: str) -> InvalidConfigError:
        return InvalidConfigError(f"Invalid value {rules!r} for configuration ssl.principal.mapping.rules: "
                                  f"replacement {replacement!r}: {why}")

    parts: list[str | int] = []  # literal text or a group (number or name)
    literal: list[str] = []
    i, n = 0, len(replacement)
    while i < n:
        c = replacement[i]
        if c == "\\":
            if i + 1 == n:
                raise bad("character to be escaped is missing")
            literal.append(replacement[i + 1])
            i += 2
        elif c == "$":
            if i + 1 == n:
                raise bad("group index is missing after $")
            if literal:
                parts.append("".join(literal))
                literal = []
            if replacement[i + 1] == "{":
                close = replacement.find("}", i + 2)
                name = replacement[i + 2:close] if close > 0 else ""
                if not name or name not in pattern.groupindex:
                    raise bad(f"no group named {name!r}")
                parts.append(pattern.groupindex[name])
                i = close + 1
                continue
            if not replacement[i + 1].isdigit():
                raise bad("illegal group reference")
            ref = int(replacement[i + 1])
            i += 2
            while i < n and replacement[i].isdigit() and ref * 10 + int(replacement[i]) <= groups:
                ref = ref * 10 + int(replacement[i])
                i += 1
            if ref > groups:
                raise bad(f"no group {ref}")
            parts.append(ref)
        else:
            literal.append(c)
            i += 1
    if literal:
        parts.append("".join(literal))
    frozen = tuple(parts)

    def expand(m: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in frozen)
    return expand


class SslPrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: the first rule that matches a distinguished name gives the
    principal name; ``DEFAULT`` gives the name itself. Rules are separated by commas (Kafka) or line
    breaks (a convenience: Kafka would misread a rule followed by a bare line break)."""

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        text = "DEFAULT" if rules is None else rules
        parsed = (self._parse(rule, text) for rule in self._split(text))
        self.rules: tuple[_Rule, ...] = tuple(rule for rule in parsed if rule is not None)

    @classmethod
    def from_rules(cls, rules: str | None) -> SslPrincipalMapper:
        return cls(rules)

    @staticmethod
    def _split(rules: str) -> list[str]:
        text = _LINE_BREAKS.sub(",", rules.strip())
        return [m.group(1) for m in _RULE_SPLITTER.finditer(text.strip())]

    @staticmethod
    def _parse(rule: str, rules: str) -> _Rule | None:
        m = _RULE_PARSER.match(rule)
        if m is None or m.end() != len(rule):
            unmatched = rule if m is None else rule[m.end():]
            raise InvalidConfigError(f"Invalid value {rules!r} for configuration ssl.principal.mapping.rules: "
                                     f"invalid rule {rule!r} (unmatched {unmatched!r}); expected "
                                     "RULE:pattern/replacement/[L|U] or DEFAULT")
        if m.group(1) is not None:
            return _Rule(is_default=True)
        if m.group(2) is None:
            return None  # an empty rule is ignored
        pattern = _compile_java_regex(m.group(2), rules)
        return _Rule(False, m.group(2), m.group(4), m.group(6) == "L", m.group(6) == "U", pattern,
                     _java_replacement(m.group(4), pattern, rules))

    def get_name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRuleError(f"No rules apply to {distinguished_name}, rules {self._rules_text()}")

    def _rules_text(self) -> str:
        return "[" + ", ".join(str(r) for r in self.rules) + "]"

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = {self._rules_text()})"

    __repr__ = __str__


DEFAULT_MAPPER = SslPrincipalMapper("DEFAULT")


def principal_from_tls(peer_cert: Mapping[str, Any] | bytes | None,
                       mapper: SslPrincipalMapper | None = None) -> KafkaPrincipal:
    """The principal of a TLS connection: ``User:<mapped subject DN>``, or ``User:ANONYMOUS`` without a
    verified client certificate.

    ``peer_cert`` is ``SSLSocket.getpeercert()`` (None when the client sent no certificate, ``{}`` when
    the server did not verify it: both are anonymous, as in Kafka where an unverified peer has no
    principal) or the DER bytes of a certificate the server verified. Raises
    :class:`NoMatchingRuleError` when no mapping rule applies (Kafka fails the authentication).
    """
    if not peer_cert:
        return ANONYMOUS
    if isinstance(peer_cert, bytes | bytearray | memoryview):
        dn = certificate_info(bytes(peer_cert)).subject
    else:
        dn = distinguished_name(peer_cert)
    return KafkaPrincipal(USER_TYPE, (mapper or DEFAULT_MAPPER).get_name(dn))


# -- distinguished names ---------------------------------------------------------------------------

# The attribute types RFC 2253 gives keywords for; Java prints every other one as its OID and the
# value as # + the hex of its DER encoding.
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
_TAG_UTF8, _TAG_PRINTABLE, _TAG_T61, _TAG_IA5, _TAG_GENERAL, _TAG_BMP = 0x0C, 0x13, 0x14, 0x16, 0x1B, 0x1E
_STRING_TAGS = frozenset({_TAG_UTF8, _TAG_PRINTABLE, _TAG_T61, _TAG_IA5, _TAG_GENERAL, _TAG_BMP})
# Python's getpeercert() names attributes by OpenSSL's long names: their OIDs, and the string type the
# value is most likely encoded with (getpeercert() does not say; Java's hex output depends on it).
_LONG_NAMES: dict[str, tuple[str, int]] = {
    "commonName": ("2.5.4.3", _TAG_UTF8), "countryName": ("2.5.4.6", _TAG_PRINTABLE),
    "localityName": ("2.5.4.7", _TAG_UTF8), "stateOrProvinceName": ("2.5.4.8", _TAG_UTF8),
    "organizationName": ("2.5.4.10", _TAG_UTF8), "organizationalUnitName": ("2.5.4.11", _TAG_UTF8),
    "streetAddress": ("2.5.4.9", _TAG_UTF8), "domainComponent": ("0.9.2342.19200300.100.1.25", _TAG_IA5),
    "userId": ("0.9.2342.19200300.100.1.1", _TAG_UTF8),
    "emailAddress": ("1.2.840.113549.1.9.1", _TAG_IA5), "serialNumber": ("2.5.4.5", _TAG_PRINTABLE),
    "surname": ("2.5.4.4", _TAG_UTF8), "title": ("2.5.4.12", _TAG_UTF8), "description": ("2.5.4.13", _TAG_UTF8),
    "businessCategory": ("2.5.4.15", _TAG_UTF8), "postalCode": ("2.5.4.17", _TAG_UTF8),
    "name": ("2.5.4.41", _TAG_UTF8), "givenName": ("2.5.4.42", _TAG_UTF8), "initials": ("2.5.4.43", _TAG_UTF8),
    "generationQualifier": ("2.5.4.44", _TAG_UTF8), "dnQualifier": ("2.5.4.46", _TAG_PRINTABLE),
    "pseudonym": ("2.5.4.65", _TAG_UTF8), "organizationIdentifier": ("2.5.4.97", _TAG_UTF8),
}
_DOTTED_OID = re.compile(r"\d+(\.\d+)+")
_ESCAPED = frozenset(',=+<>#;"\\')


def escape_rdn_value(value: str) -> str:
    """An attribute value as Java's RFC 2253 output writes it: a backslash before each of
    ``,=+<>#;"\\``, ``\\00`` for NUL, and a backslash before leading and trailing spaces (and CRs)."""
    pieces = []
    for c in value:
        if c in _ESCAPED:
            pieces.append("\\" + c)
        elif c == "\x00":
            pieces.append("\\00")
        else:
            pieces.append(c)
    chars = "".join(pieces)
    lead = len(chars) - len(chars.lstrip(" \r"))  # first character that is not leading blank
    trail = len(chars.rstrip(" \r")) - 1  # last character that is not trailing blank
    return "".join("\\" + c if i < lead or i > trail else c for i, c in enumerate(chars))


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def _ava(oid: str, tag: int, value_der: bytes | None, text: str | None) -> str:
    """One attribute as Java prints it: ``CN=alice`` or ``1.2.840.113549.1.9.1=#1611...``."""
    keyword = _RFC2253_KEYWORDS.get(oid)
    if keyword is not None and tag in _STRING_TAGS and text is not None:
        return f"{keyword}={escape_rdn_value(text)}"
    if value_der is None:
        body = (text or "").encode("utf-16-be" if tag == _TAG_BMP else "utf-8")
        value_der = bytes([tag]) + _der_length(len(body)) + body
    return f"{keyword or oid}=#{value_der.hex()}"


def distinguished_name(peer_cert: Mapping[str, Any], field: str = "subject") -> str:
    """The RFC 2253 name (Java's ``X500Principal.getName()``) of ``getpeercert()``'s subject (or issuer).

    Python lists the RDNs in encoding order; RFC 2253 reverses them. Attributes without an RFC 2253
    keyword (emailAddress, serialNumber...) come out as ``OID=#hex`` like Java's, with the string type
    guessed (getpeercert() does not give it); :func:`certificate_info` reads the exact encoding.
    """
    rdns = []
    for rdn in reversed(tuple(peer_cert.get(field) or ())):
        avas = []
        for name, value in rdn:
            oid, tag = _LONG_NAMES.get(name, (name, _TAG_UTF8))
            if oid not in _RFC2253_KEYWORDS and not _DOTTED_OID.fullmatch(oid):
                avas.append(f"{name}={escape_rdn_value(value)}")  # a name this table does not know
            else:
                avas.append(_ava(oid, tag, None, value))
        rdns.append("+".join(avas))
    return ",".join(rdns)


# -- a minimal X.509 (DER) reader ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CertificateInfo:
    """What the broker needs to know of a certificate: names and validity."""

    subject: str  # RFC 2253, as Java's X500Principal.getName() prints it
    issuer: str
    serial_number: int
    not_before: datetime
    not_after: datetime
    subject_alt_names: tuple[tuple[str, str], ...]  # ("DNS", "localhost"), ("IP Address", "127.0.0.1")...

    def summary(self) -> str:
        sans = ", ".join(f"{kind}:{value}" for kind, value in self.subject_alt_names)
        return (f"subject={self.subject} issuer={self.issuer} serial={self.serial_number:x} "
                f"valid={self.not_before:%Y-%m-%dT%H:%M:%SZ}..{self.not_after:%Y-%m-%dT%H:%M:%SZ}"
                + (f" SAN=[{sans}]" if sans else ""))


class CertificateParseError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class _Tlv:
    tag: int
    start: int  # of the tag byte
    value_start: int
    end: int

    def value(self, data: bytes) -> bytes:
        return data[self.value_start:self.end]


def _tlv(data: bytes, pos: int, limit: int) -> _Tlv:
    if pos + 2 > limit:
        raise CertificateParseError("truncated DER")
    tag, length = data[pos], data[pos + 1]
    if tag & 0x1F == 0x1F:
        raise CertificateParseError("high-tag-number DER form")
    vpos = pos + 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or vpos + count > limit:
            raise CertificateParseError("bad DER length")
        length = int.from_bytes(data[vpos:vpos + count], "big")
        vpos += count
    if vpos + length > limit:
        raise CertificateParseError("DER value runs past its container")
    return _Tlv(tag, pos, vpos, vpos + length)


def _children(data: bytes, parent: _Tlv) -> Iterator[_Tlv]:
    pos = parent.value_start
    while pos < parent.end:
        child = _tlv(data, pos, parent.end)
        yield child
        pos = child.end


def _oid(raw: bytes) -> str:
    if not raw:
        raise CertificateParseError("empty OID")
    arcs: list[int] = []
    value = 0
    for b in raw:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(value)
            value = 0
    first = arcs[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(str(a) for a in head + arcs[1:])


def _decode_string(tag: int, raw: bytes) -> str:
    if tag == _TAG_BMP:
        return raw.decode("utf-16-be", errors="replace")
    if tag == _TAG_T61:
        return raw.decode("latin-1")
    return raw.decode("utf-8", errors="replace")


def _name(data: bytes, name: _Tlv) -> str:
    rdns = []
    for rdn in _children(data, name):
        avas = []
        for ava in _children(data, rdn):
            oid_tlv, value_tlv = list(_children(data, ava))[:2]
            oid = _oid(oid_tlv.value(data))
            text = _decode_string(value_tlv.tag, value_tlv.value(data)) if value_tlv.tag in _STRING_TAGS else None
            avas.append(_ava(oid, value_tlv.tag, data[value_tlv.start:value_tlv.end], text))
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def _time(data: bytes, t: _Tlv) -> datetime:
    text = t.value(data).decode("ascii")
    if t.tag == 0x17:  # UTCTime YYMMDDHHMMSSZ: 50-99 are 19xx (RFC 5280)
        year = int(text[:2])
        text = ("19" if year >= 50 else "20") + text
    return datetime.strptime(text[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)


_SAN_OID = "2.5.29.17"


def _general_names(data: bytes, names: _Tlv) -> Iterator[tuple[str, str]]:
    for gn in _children(data, names):
        kind, raw = gn.tag & 0x1F, gn.value(data)
        if kind == 1:
            yield "email", raw.decode("ascii", errors="replace")
        elif kind == 2:
            yield "DNS", raw.decode("ascii", errors="replace")
        elif kind == 6:
            yield "URI", raw.decode("ascii", errors="replace")
        elif kind == 7:
            yield "IP Address", str(ipaddress.ip_address(raw)) if len(raw) in (4, 16) else raw.hex()
        elif kind == 4:
            yield "DirName", _name(data, next(_children(data, gn)))
        elif kind == 8:
            yield "Registered ID", _oid(raw)
        else:
            yield f"[{kind}]", data[gn.start:gn.end].hex()


def certificate_info(der: bytes) -> CertificateInfo:
    """Subject, issuer, serial, validity and subject alternative names of a DER certificate."""
    try:
        cert = _tlv(der, 0, len(der))
        tbs = next(_children(der, cert))
        fields = list(_children(der, tbs))
        if fields and fields[0].tag == 0xA0:  # [0] EXPLICIT version
            fields = fields[1:]
        serial, _sig, issuer, validity, subject = fields[:5]
        not_before, not_after = list(_children(der, validity))[:2]
        sans: list[tuple[str, str]] = []
        for f in fields[5:]:
            if f.tag != 0xA3:  # [3] EXPLICIT extensions
                continue
            for ext in _children(der, next(_children(der, f))):
                parts = list(_children(der, ext))
                if _oid(parts[0].value(der)) == _SAN_OID:
                    octets = parts[-1]
                    sans.extend(_general_names(der, _tlv(der, octets.value_start, octets.end)))
        return CertificateInfo(
            subject=_name(der, subject), issuer=_name(der, issuer),
            serial_number=int.from_bytes(serial.value(der), "big", signed=True),
            not_before=_time(der, not_before), not_after=_time(der, not_after),
            subject_alt_names=tuple(sans))
    except (StopIteration, IndexError, ValueError, UnicodeDecodeError) as e:
        if isinstance(e, CertificateParseError):
            raise
        raise CertificateParseError(f"not an X.509 certificate ({str(e) or type(e).__name__})") from e


def same_distinguished_name(a: str, b: str) -> bool:
    """Kafka's keystore-update check compares RFC 2253 names ignoring case."""
    return a.lower() == b.lower()


def subject_alt_names_kept(old: Sequence[tuple[str, str]], new: Sequence[tuple[str, str]]) -> bool:
    """Kafka allows a new certificate to add subject alternative names, not to drop any."""
    return set(old) <= set(new)
