"""Kafka's ``sasl.jaas.config`` value: ``<login module class> <control flag> (<option>=<value>)*;``

For example::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

The tokens are those of Kafka's ``JaasConfig`` (a ``java.io.StreamTokenizer``): whitespace is every character up
to the space; ``;`` and ``=`` stand alone; values are words or strings in ``"`` or ``'`` with Java's escapes
(``\\n``, ``\\t``, ``\\b``, ``\\f``, ``\\r``, ``\\a``, ``\\v``, octal ``\\ooo``, and a backslash before any other
character gives that character); ``//`` and ``/* */`` are comments, and so is a lone ``/`` up to the end of its
line (so a value with a ``/`` must be quoted, as in Kafka). The control flag is ``required``, ``requisite``,
``sufficient`` or ``optional`` in any case; the entry ends with ``;``; the value holds exactly one login module
(``JaasContext``). Strata refuses a quoted string that is not closed on its line (Java ends it there).

Errors are :class:`~strata.errors.InvalidConfigError` naming the problem, never a value (the config is a
password); a value is neither in the ``repr`` of a :class:`JaasConfig`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from strata.errors import InvalidConfigError

__all__ = [
    "CONTROL_FLAGS",
    "LOGIN_MODULES",
    "PLAIN_LOGIN_MODULE",
    "SCRAM_LOGIN_MODULE",
    "JaasConfig",
    "parse_jaas_config",
]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
LOGIN_MODULES: Mapping[str, str] = MappingProxyType({
    "PLAIN": PLAIN_LOGIN_MODULE,
    "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
    "SCRAM-SHA-512": SCRAM_LOGIN_MODULE,
})
CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
USER_PREFIX = "user_"  # PlainServerCallbackHandler.JAAS_USER_PREFIX

_WORD, _STRING, _EQUALS, _SEMICOLON = "word", "string", "=", ";"
_ESCAPES = {"a": "\x07", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\x0b"}
_WORD_END = frozenset(";=/\"'")


@dataclass(frozen=True)
class JaasConfig:
    login_module: str
    control_flag: str  # lower case
    options: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return (f"JaasConfig(login_module={self.login_module!r}, control_flag={self.control_flag!r}, "
                f"options=[{', '.join(sorted(self.options))}])")

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def plain_users(self) -> dict[str, str]:
        """``{user: password}`` from the ``user_<name>`` options. As in Kafka's ``PlainServerCallbackHandler``,
        only a PlainLoginModule entry has users: another module's ``user_`` options are not read."""
        if self.login_module != PLAIN_LOGIN_MODULE:
            return {}
        return {k[len(USER_PREFIX):]: v for k, v in self.options.items() if k.startswith(USER_PREFIX)}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str = ""


class _Problem(Exception):
    pass


def _read_string(value: str, start: int) -> tuple[str, int]:
    """The quoted string opened at ``value[start]``; returns it and the index after its closing quote."""
    quote = value[start]
    out: list[str] = []
    i, n = start + 1, len(value)
    while i < n:
        c = value[i]
        if c == quote:
            return "".join(out), i + 1
        if c in "\n\r":
            break
        if c == "\\" and i + 1 < n:
            i += 1
            c = value[i]
            if "0" <= c <= "7":  # up to three octal digits, the first at most 3 when there are three
                first, code = c, int(c)
                if i + 1 < n and "0" <= value[i + 1] <= "7":
                    i += 1
                    code = code * 8 + int(value[i])
                    if first <= "3" and i + 1 < n and "0" <= value[i + 1] <= "7":
                        i += 1
                        code = code * 8 + int(value[i])
                out.append(chr(code))
            else:
                out.append(_ESCAPES.get(c, c))
            i += 1
            continue
        if c == "\\":
            break
        out.append(c)
        i += 1
    raise _Problem("a quoted value is not closed on its line")


def _tokens(value: str) -> Iterator[_Token]:
    i, n = 0, len(value)
    while i < n:
        c = value[i]
        if c <= " ":
            i += 1
        elif c == "/":
            if value.startswith("/*", i):
                end = value.find("*/", i + 2)
                i = n if end < 0 else end + 2
            else:  # "//" or a lone "/": a comment up to the end of the line
                while i < n and value[i] not in "\n\r":
                    i += 1
        elif c in "\"'":
            text, i = _read_string(value, i)
            yield _Token(_STRING, text)
        elif c == "=":
            i += 1
            yield _Token(_EQUALS)
        elif c == ";":
            i += 1
            yield _Token(_SEMICOLON)
        else:
            start = i
            while i < n and value[i] > " " and value[i] not in _WORD_END:
                i += 1
            yield _Token(_WORD, value[start:i])


def _describe(token: _Token | None) -> str:
    if token is None:
        return "the end"
    if token.kind in (_EQUALS, _SEMICOLON):
        return f"'{token.kind}'"
    return "a value"


def _parse_entry(first: _Token, tokens: Iterator[_Token]) -> JaasConfig:
    if first.kind not in (_WORD, _STRING):
        raise _Problem(f"Login module class not specified in JAAS config (found {_describe(first)})")
    module = first.text
    flag_token = next(tokens, None)
    if flag_token is None:
        raise _Problem("Login module control flag not specified in JAAS config")
    if flag_token.kind not in (_WORD, _STRING):
        raise _Problem("Login module control flag is not available in the JAAS config")
    flag = flag_token.text.lower()
    if flag not in CONTROL_FLAGS:
        shown = f" '{flag_token.text}'" if flag_token.kind == _WORD and len(flag_token.text) <= 40 else ""
        raise _Problem(f"Invalid login module control flag{shown} in JAAS config (expected one of "
                       f"{', '.join(CONTROL_FLAGS)})")
    options: dict[str, str] = {}
    token = next(tokens, None)
    while token is not None and token.kind != _SEMICOLON:
        if token.kind not in (_WORD, _STRING):
            raise _Problem("Option name not specified before '=' in JAAS config")
        key = token.text
        equals = next(tokens, None)
        if equals is None or equals.kind != _EQUALS:
            # no '=': the word may be the rest of an unquoted value, so it is not shown
            after = f"after '{list(options)[-1]}'" if options else "after the control flag"
            raise _Problem(f"Value not specified for an option {after} in JAAS config (an option is key=value; "
                           "quote a value that has spaces)")
        value = next(tokens, None)
        if value is None or value.kind not in (_WORD, _STRING):
            raise _Problem(f"Value not specified for key '{key}' in JAAS config")
        options[key] = value.text
        token = next(tokens, None)
    if token is None:
        raise _Problem("JAAS config entry not terminated by semi-colon")
    return JaasConfig(module, flag, MappingProxyType(options))


def parse_jaas_config(value: str, *, config_name: str = "sasl.jaas.config") -> JaasConfig:
    """The one login module entry of a ``sasl.jaas.config`` value."""
    try:
        tokens = _tokens(value)
        entries: list[JaasConfig] = []
        for first in tokens:
            entries.append(_parse_entry(first, tokens))
        if not entries:
            raise _Problem("JAAS config property does not contain any login modules")
        if len(entries) != 1:
            raise _Problem(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    except _Problem as e:
        raise InvalidConfigError(f"Invalid value [hidden] for configuration {config_name}: {e}") from None
    return entries[0]
