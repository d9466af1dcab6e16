"""SASL/PLAIN (RFC 4616) as Kafka's ``PlainSaslServer``: one message ``[authzid] NUL authcid NUL passwd``.

The server checks the password against the JAAS ``user_<name>="<password>"`` options (a ``{user: password}``
mapping) or a user-supplied ``check(username, password) -> bool`` (``sasl.server.callback.handler.class``, given
as ``module:callable``, see :func:`load_callback`). Its messages are Kafka's, sent to the client as they are; a
wrong password and an unknown user get the same one.
"""

from __future__ import annotations

import hmac
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from strata.errors import InvalidConfigError
from strata.security.sasl import IllegalSaslStateError, SaslAuthenticationError

__all__ = ["PasswordCheck", "PlainSaslClient", "PlainSaslServer", "PlainUsers", "load_callback"]

MECHANISM = "PLAIN"
CALLBACK_CONFIG = "sasl.server.callback.handler.class"

PasswordCheck = Callable[[str, str], bool]
PlainUsers = Mapping[str, str] | PasswordCheck

INVALID_USERNAME_OR_PASSWORD = "Authentication failed: Invalid username or password"
AUTHORIZATION_ID_DIFFERS = "Authentication failed: Client requested an authorization id that is different from username"
_DUMMY = b"\x00" * 16  # compared against when the user is unknown, so both cases cost the same


def _split(token: bytes) -> list[bytes]:
    """Kafka's ``extractTokens``: at most four parts are looked for, so the count it reports is 1 to 4."""
    return token.split(b"\x00", 3)


class PlainSaslServer:
    mechanism = MECHANISM

    def __init__(self, users: PlainUsers) -> None:
        if isinstance(users, Mapping):
            self._users: Mapping[str, str] | None = users
            self._check: PasswordCheck | None = None
        elif callable(users):
            self._users, self._check = None, users
        else:
            raise TypeError("PLAIN users must be a {user: password} mapping or a check(username, password) callable")
        self._complete = False
        self._failed = False
        self._authorization_id: str | None = None

    @property
    def is_complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        if not self._complete or self._authorization_id is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._authorization_id

    def evaluate_response(self, token: bytes) -> bytes:
        if self._complete or self._failed:
            state = "COMPLETE" if self._complete else "FAILED"
            raise IllegalSaslStateError(f"Unexpected SASL/PLAIN response in state {state}")
        try:
            self._authorization_id = self._authenticate(bytes(token))
        except SaslAuthenticationError:
            self._failed = True
            raise
        self._complete = True
        return b""

    def _authenticate(self, token: bytes) -> str:
        parts = _split(token)
        if len(parts) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid_bytes, username_bytes, password_bytes = parts
        if not username_bytes:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password_bytes:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        try:
            username = username_bytes.decode("utf-8")
            password = password_bytes.decode("utf-8")
        except UnicodeDecodeError:
            # Kafka decodes with replacement characters, which name no configured user either
            raise SaslAuthenticationError(INVALID_USERNAME_OR_PASSWORD,
                                          detail="Authentication failed: username or password is not UTF-8") from None
        if not self._verify(username, password, password_bytes):
            raise SaslAuthenticationError(INVALID_USERNAME_OR_PASSWORD)
        if authzid_bytes and authzid_bytes != username_bytes:
            raise SaslAuthenticationError(AUTHORIZATION_ID_DIFFERS)
        return username

    def _verify(self, username: str, password: str, password_bytes: bytes) -> bool:
        if self._check is not None:
            try:
                result = self._check(username, password)
            except Exception as e:
                raise SaslAuthenticationError("Authentication failed: credentials for user could not be verified",
                                              detail=f"{CALLBACK_CONFIG} raised {type(e).__name__}: {e}") from e
            return result is True  # a truthy object that is not True (a mistake in the plugin) is no success
        assert self._users is not None
        expected = self._users.get(username)
        expected_bytes = _DUMMY if expected is None else expected.encode("utf-8")
        return hmac.compare_digest(password_bytes, expected_bytes) and expected is not None


class PlainSaslClient:
    """``\\0username\\0password`` in one message (``authorization_id`` goes first when given)."""

    mechanism = MECHANISM

    def __init__(self, username: str, password: str, authorization_id: str = "") -> None:
        if not username or not password:
            raise ValueError("SASL/PLAIN needs a username and a password")
        if "\x00" in username or "\x00" in password or "\x00" in authorization_id:
            raise ValueError("SASL/PLAIN username, password and authorization id cannot contain NUL")
        self._message: bytes | None = f"{authorization_id}\x00{username}\x00{password}".encode()
        self._sent = False

    @property
    def is_complete(self) -> bool:
        return self._sent

    def initial_response(self) -> bytes:
        if self._sent or self._message is None:
            raise IllegalSaslStateError("SASL/PLAIN initial response already sent")
        message, self._message = self._message, None
        self._sent = True
        return message

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if not self._sent:
            raise IllegalSaslStateError("SASL/PLAIN: the initial response must be sent first")
        if challenge:
            raise SaslAuthenticationError("SASL/PLAIN: unexpected challenge from the server")
        return None


def load_callback(spec: str, *, config_name: str = CALLBACK_CONFIG) -> PasswordCheck:
    """The ``check(username, password) -> bool`` named by ``module:attribute`` (the attribute may be dotted).

    A class is instantiated without arguments and its instances must be callable. Errors are InvalidConfigError
    naming ``config_name``; a Java class name (Kafka's form of the key) is refused with what to give instead.
    """
    def invalid(problem: str) -> InvalidConfigError:
        return InvalidConfigError(f"Invalid value {spec!r} for configuration {config_name}: {problem}")

    module_name, colon, attribute = spec.strip().partition(":")
    if not colon or not module_name or not attribute:
        hint = "expected module:callable, a Python callable check(username, password) -> bool " \
            "(e.g. mypackage.auth:check_password)"
        if not colon and "." in spec:
            hint += "; a Java callback handler class cannot be loaded by Strata"
        raise invalid(hint)
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise invalid(f"cannot import module {module_name!r}: {type(e).__name__}: {e}") from e
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise invalid(f"{module_name!r} has no attribute {attribute!r}") from None
    if inspect.isclass(target):
        try:
            target = target()
        except Exception as e:
            raise invalid(f"cannot instantiate {attribute} without arguments: {type(e).__name__}: {e}") from e
    if not callable(target):
        raise invalid(f"{attribute} is not callable")
    check: PasswordCheck = target
    return check
