"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ``ScramSaslServer`` and
``ScramSaslClient``, without channel binding.

Server exchange::

    client-first  n,[a=<authzid>],n=<saslname>,r=<client nonce>[,<ext>=<value>...]
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 gs2 header>,r=<nonce>[,<ext>=<value>...],p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>

Kafka's rules: only the gs2 flag ``n`` (a client asking for channel binding, ``y`` or ``p=``, is refused); an
authzid, when given, must be the user name; the ``tokenauth=true`` extension asks for delegation-token
authentication, which Strata does not support (refused with a message saying so); other extensions are
ignored. A credential with fewer iterations than the mechanism's minimum is not used. Every failure on the
credentials or on a message that does not parse gives the client the same message,
:func:`~strata.security.sasl.invalid_credentials_message`, and keeps the cause in ``detail``; the only other
messages a client can get are the authzid one and the delegation-token one, as in Kafka.

Unlike Kafka's regular expressions, the parser here accepts a UTF-8 user name (RFC 5802's ``saslname``),
checks the channel binding of client-final against the gs2 header of client-first (Kafka does not), refuses the
reserved ``m=`` attribute (RFC 5802 section 5.1) and uses the messages as received in the AuthMessage (RFC 5802
section 3; Kafka rebuilds them, which is the same for every client that sends no extension in client-final).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from strata.security.sasl import IllegalSaslStateError, SaslAuthenticationError, invalid_credentials_message
from strata.security.scram_credentials import (
    JAVA_INT_MAX,
    ScramCredential,
    client_key,
    hmac_digest,
    mechanism_spec,
    salted_password,
    server_key,
)

__all__ = [
    "DELEGATION_TOKENS_UNSUPPORTED",
    "ClientFinalMessage",
    "ClientFirstMessage",
    "CredentialLookup",
    "ScramSaslClient",
    "ScramSaslServer",
    "ServerFirstMessage",
    "decode_saslname",
    "encode_saslname",
]

CredentialLookup = Callable[[str], ScramCredential | None]

TOKEN_AUTH_EXTENSION = "tokenauth"  # ScramLoginModule.TOKEN_AUTH_CONFIG
DELEGATION_TOKENS_UNSUPPORTED = "Authentication failed: delegation token authentication is not supported"
AUTHORIZATION_ID_DIFFERS = "Authentication failed: Client requested an authorization id that is different from username"
_GS2_NO_AUTHZID = b"n,,"
_DETAIL_LIMIT = 80  # a malformed message is quoted in ``detail`` up to this many characters


class _Malformed(Exception):
    """A message that does not parse; its text becomes a failure's ``detail``."""


def _excerpt(text: str) -> str:
    return repr(text if len(text) <= _DETAIL_LIMIT else text[:_DETAIL_LIMIT] + "...")


def _text(token: bytes, what: str) -> str:
    try:
        text = bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed(f"Invalid SCRAM {what}: not UTF-8") from None
    if "\x00" in text:
        raise _Malformed(f"Invalid SCRAM {what}: contains NUL")
    return text


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)  # strict alphabet and padding, as Kafka's BASE64 pattern
    except (binascii.Error, ValueError):
        raise _Malformed(f"{what} is not base64") from None


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _is_printable(nonce: str) -> bool:
    """RFC 5802 ``printable``: %x21-7E except ``,``."""
    return bool(nonce) and all("!" <= c <= "~" for c in nonce) and "," not in nonce


def encode_saslname(username: str) -> str:
    """``=`` as ``=3D`` and ``,`` as ``=2C`` (``ScramFormatter.saslName``)."""
    return username.replace("=", "=3D").replace(",", "=2C")


def decode_saslname(saslname: str) -> str:
    """The user name of a ``saslname``: ``=2C`` is ``,``, ``=3D`` is ``=``, any other ``=`` is an error."""
    head, *escaped = saslname.split("=")
    out = [head]
    for part in escaped:
        if part.startswith("2C"):
            out.append("," + part[2:])
        elif part.startswith("3D"):
            out.append("=" + part[2:])
        else:
            raise _Malformed("Invalid username: '=' must be followed by 2C or 3D")
    return "".join(out)


def _extensions(attributes: list[str], what: str) -> dict[str, str]:
    """``key=value`` pairs (Kafka: ``[A-Za-z]+=`` a non-empty value); a key given twice is refused."""
    out: dict[str, str] = {}
    for attribute in attributes:
        key, eq, value = attribute.partition("=")
        if not eq or not key or not (key.isascii() and key.isalpha()) or not value:
            raise _Malformed(f"Invalid SCRAM {what}: invalid extension {_excerpt(attribute)}")
        if key in out:
            raise _Malformed(f"Invalid SCRAM {what}: extension {key!r} given twice")
        out[key] = value
    return out


def _attribute(attribute: str, name: str, what: str) -> str:
    if not attribute.startswith(name + "="):
        if attribute.startswith("m="):
            raise _Malformed(f"Invalid SCRAM {what}: mandatory extensions (m=) are not supported")
        raise _Malformed(f"Invalid SCRAM {what}: expected {name}= where {_excerpt(attribute)} is")
    return attribute[len(name) + 1:]


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


# -- messages ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClientFirstMessage:
    gs2_header: str  # "n,," or "n,a=<saslname>,"
    authorization_id: str  # "" when not given
    username: str
    nonce: str
    extensions: dict[str, str] = field(default_factory=dict)
    bare: str = ""  # client-first-message-bare as received, part of the AuthMessage

    @classmethod
    def parse(cls, token: bytes) -> ClientFirstMessage:
        what = "client first message"
        text = _text(token, what)
        flag, comma, rest = text.partition(",")
        if flag == "y" or flag.startswith("p="):
            raise _Malformed(f"Invalid SCRAM {what}: channel binding (gs2 flag {flag[:1]!r}) is not supported")
        if flag != "n" or not comma:
            raise _Malformed(f"Invalid SCRAM {what}: it must start with the gs2 header n,")
        authzid_attr, comma, bare = rest.partition(",")
        if not comma:
            raise _Malformed(f"Invalid SCRAM {what}: incomplete gs2 header")
        authorization_id = ""
        if authzid_attr:
            authorization_id = decode_saslname(_attribute(authzid_attr, "a", what))
            if not authorization_id:
                raise _Malformed(f"Invalid SCRAM {what}: empty authorization id")
        attributes = bare.split(",")
        if len(attributes) < 2:
            raise _Malformed(f"Invalid SCRAM {what}: expected n=<user>,r=<nonce>")
        username = decode_saslname(_attribute(attributes[0], "n", what))
        if not username:
            raise _Malformed(f"Invalid SCRAM {what}: empty username")
        nonce = _attribute(attributes[1], "r", what)
        if not _is_printable(nonce):
            raise _Malformed(f"Invalid SCRAM {what}: the nonce must be printable ASCII without ','")
        extensions = _extensions(attributes[2:], what)
        return cls(f"n,{authzid_attr},", authorization_id, username, nonce, extensions, bare)


@dataclass(frozen=True)
class ServerFirstMessage:
    nonce: str  # client nonce + server nonce
    salt: bytes
    iterations: int

    def to_text(self) -> str:
        return f"r={self.nonce},s={_b64encode(self.salt)},i={self.iterations}"

    @classmethod
    def parse(cls, token: bytes) -> ServerFirstMessage:
        what = "server first message"
        text = _text(token, what)
        attributes = text.split(",")
        if len(attributes) < 3:
            raise _Malformed(f"Invalid SCRAM {what}: expected r=<nonce>,s=<salt>,i=<iterations>")
        nonce = _attribute(attributes[0], "r", what)
        if not _is_printable(nonce):
            raise _Malformed(f"Invalid SCRAM {what}: the nonce must be printable ASCII without ','")
        salt = _b64decode(_attribute(attributes[1], "s", what), f"Invalid SCRAM {what}: the salt")
        iterations_text = _attribute(attributes[2], "i", what)
        if not (iterations_text.isascii() and iterations_text.isdigit()):
            raise _Malformed(f"Invalid SCRAM {what}: invalid iterations")
        iterations = int(iterations_text)
        if not 0 < iterations <= JAVA_INT_MAX:
            raise _Malformed(f"Invalid SCRAM {what}: invalid iterations {iterations}")
        _extensions(attributes[3:], what)  # allowed and ignored, as in Kafka
        return cls(nonce, salt, iterations)


@dataclass(frozen=True)
class ClientFinalMessage:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str  # client-final-message-without-proof as received, part of the AuthMessage

    @classmethod
    def parse(cls, token: bytes) -> ClientFinalMessage:
        what = "client final message"
        text = _text(token, what)
        without_proof, comma, proof_attr = text.rpartition(",")
        if not comma:
            raise _Malformed(f"Invalid SCRAM {what}: expected c=<binding>,r=<nonce>,p=<proof>")
        proof = _b64decode(_attribute(proof_attr, "p", what), f"Invalid SCRAM {what}: the proof")
        attributes = without_proof.split(",")
        if len(attributes) < 2:
            raise _Malformed(f"Invalid SCRAM {what}: expected c=<binding>,r=<nonce>,p=<proof>")
        binding = _b64decode(_attribute(attributes[0], "c", what), f"Invalid SCRAM {what}: the channel binding")
        nonce = _attribute(attributes[1], "r", what)
        _extensions(attributes[2:], what)  # allowed and ignored, as in Kafka
        return cls(binding, nonce, proof, without_proof)


def _auth_message(client_first_bare: str, server_first: str, client_final_without_proof: str) -> bytes:
    return f"{client_first_bare},{server_first},{client_final_without_proof}".encode()


# -- server ---------------------------------------------------------------------------------------------

class _ServerState(Enum):
    RECEIVE_CLIENT_FIRST_MESSAGE = "RECEIVE_CLIENT_FIRST_MESSAGE"
    RECEIVE_CLIENT_FINAL_MESSAGE = "RECEIVE_CLIENT_FINAL_MESSAGE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class ScramSaslServer:
    """One exchange. ``credential(username)`` gives the user's credential for this mechanism, or None."""

    def __init__(self, mechanism: str, credential: CredentialLookup, *, nonce: str | None = None,
                 reauthentication: bool = False) -> None:
        self._spec = mechanism_spec(mechanism)
        self.mechanism = mechanism
        self._credential_lookup = credential
        if nonce is not None and not _is_printable(nonce):
            raise ValueError("a SCRAM nonce must be printable ASCII without ','")
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._failure_message = invalid_credentials_message(mechanism, reauthentication=reauthentication)
        self._state = _ServerState.RECEIVE_CLIENT_FIRST_MESSAGE
        self._client_first: ClientFirstMessage | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self._authorization_id: str | None = None

    @property
    def is_complete(self) -> bool:
        return self._state is _ServerState.COMPLETE

    @property
    def authorization_id(self) -> str:
        if self._state is not _ServerState.COMPLETE or self._authorization_id is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._authorization_id

    def evaluate_response(self, token: bytes) -> bytes:
        state = self._state
        try:
            if state is _ServerState.RECEIVE_CLIENT_FIRST_MESSAGE:
                return self._receive_client_first(token)
            if state is _ServerState.RECEIVE_CLIENT_FINAL_MESSAGE:
                return self._receive_client_final(token)
            raise IllegalSaslStateError(f"Unexpected challenge in Sasl server state {state.value}")
        except _Malformed as e:
            self._fail()
            raise SaslAuthenticationError(self._failure_message, detail=str(e)) from None
        except SaslAuthenticationError:
            if state not in (_ServerState.COMPLETE, _ServerState.FAILED):
                self._fail()
            raise

    def _fail(self, detail: str | None = None) -> SaslAuthenticationError:
        self._state = _ServerState.FAILED
        self._credential = None
        self._client_first = None
        return SaslAuthenticationError(self._failure_message, detail=detail)

    def _receive_client_first(self, token: bytes) -> bytes:
        first = ClientFirstMessage.parse(token)
        if first.extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true":
            raise SaslAuthenticationError(DELEGATION_TOKENS_UNSUPPORTED)
        try:
            credential = self._credential_lookup(first.username)
        except Exception as e:
            raise self._fail(f"Authentication failed: Credentials could not be obtained "
                             f"({type(e).__name__}: {e})") from e
        if credential is None:
            raise self._fail("Authentication failed: Invalid user credentials")
        if not isinstance(credential, ScramCredential):
            raise self._fail(f"Authentication failed: Credentials could not be obtained (got "
                             f"{type(credential).__name__})")
        if first.authorization_id and first.authorization_id != first.username:
            raise SaslAuthenticationError(AUTHORIZATION_ID_DIFFERS)
        if credential.iterations < self._spec.min_iterations:
            raise self._fail(f"Iterations {credential.iterations} is less than the minimum "
                             f"{self._spec.min_iterations} for {self.mechanism}")
        if len(credential.stored_key) != self._spec.digest_size or len(credential.server_key) != \
                self._spec.digest_size:
            raise self._fail(f"Authentication failed: the stored credential is not a {self.mechanism} credential")
        server_first = ServerFirstMessage(first.nonce + self._server_nonce, credential.salt, credential.iterations)
        self._client_first = first
        self._credential = credential
        self._server_first = server_first.to_text()
        self._state = _ServerState.RECEIVE_CLIENT_FINAL_MESSAGE
        return self._server_first.encode()

    def _receive_client_final(self, token: bytes) -> bytes:
        first, credential = self._client_first, self._credential
        assert first is not None and credential is not None
        final = ClientFinalMessage.parse(token)
        if final.channel_binding not in (_GS2_NO_AUTHZID, first.gs2_header.encode()):
            raise self._fail("Invalid channel binding in the final client message")
        # Kafka's check is endsWith, not equality: librdkafka up to 2.0 (Debian's kcat) sends its client nonce
        # once more in front of the combined nonce, and real Kafka brokers accept it.
        if not final.nonce.endswith(first.nonce + self._server_nonce):
            raise self._fail("Invalid client nonce in the final client message.")
        if len(final.proof) != self._spec.digest_size:
            raise self._fail("Invalid client credentials")  # a proof of the wrong length cannot be right
        auth_message = _auth_message(first.bare, self._server_first, final.without_proof)
        client_signature = hmac_digest(self._spec.hash_name, credential.stored_key, auth_message)
        computed_stored_key = hashlib.new(self._spec.hash_name, _xor(final.proof, client_signature)).digest()
        if not hmac.compare_digest(computed_stored_key, credential.stored_key):
            raise self._fail("Invalid client credentials")
        server_signature = hmac_digest(self._spec.hash_name, credential.server_key, auth_message)
        self._authorization_id = first.username
        self._credential = None
        self._client_first = None
        self._state = _ServerState.COMPLETE
        return f"v={_b64encode(server_signature)}".encode()


# -- client ---------------------------------------------------------------------------------------------

class _ClientState(Enum):
    SEND_CLIENT_FIRST_MESSAGE = "SEND_CLIENT_FIRST_MESSAGE"
    RECEIVE_SERVER_FIRST_MESSAGE = "RECEIVE_SERVER_FIRST_MESSAGE"
    RECEIVE_SERVER_FINAL_MESSAGE = "RECEIVE_SERVER_FINAL_MESSAGE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class ScramSaslClient:
    """One exchange as Kafka's client: gs2 header ``n,,``, no extensions, a random nonce."""

    def __init__(self, mechanism: str, username: str, password: str, *, nonce: str | None = None) -> None:
        self._spec = mechanism_spec(mechanism)
        self.mechanism = mechanism
        if not username:
            raise ValueError("SCRAM needs a username")
        if nonce is not None and not _is_printable(nonce):
            raise ValueError("a SCRAM nonce must be printable ASCII without ','")
        self._username = username
        self._password: str | None = password
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._state = _ClientState.SEND_CLIENT_FIRST_MESSAGE
        self._client_first_bare = ""
        self._expected_server_signature = b""

    @property
    def is_complete(self) -> bool:
        return self._state is _ClientState.COMPLETE

    def initial_response(self) -> bytes:
        if self._state is not _ClientState.SEND_CLIENT_FIRST_MESSAGE:
            raise IllegalSaslStateError(f"Unexpected initial response in Sasl client state {self._state.value}")
        self._client_first_bare = f"n={encode_saslname(self._username)},r={self._nonce}"
        self._state = _ClientState.RECEIVE_SERVER_FIRST_MESSAGE
        return ("n,," + self._client_first_bare).encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        state = self._state
        if state not in (_ClientState.RECEIVE_SERVER_FIRST_MESSAGE, _ClientState.RECEIVE_SERVER_FINAL_MESSAGE):
            raise IllegalSaslStateError(f"Unexpected challenge in Sasl client state {state.value}")
        try:
            if state is _ClientState.RECEIVE_SERVER_FIRST_MESSAGE:
                return self._receive_server_first(challenge)
            self._receive_server_final(challenge)
            return None
        except _Malformed as e:
            self._fail()
            raise SaslAuthenticationError(str(e)) from None
        except SaslAuthenticationError:
            self._fail()
            raise

    def _fail(self) -> None:
        self._state = _ClientState.FAILED
        self._password = None
        self._expected_server_signature = b""

    def _server_error(self, text: bytes) -> None:
        if text.startswith(b"e="):
            error = text[2:].decode("utf-8", "replace")[:_DETAIL_LIMIT]
            raise SaslAuthenticationError(f"Sasl authentication using {self.mechanism} failed with error: {error}")

    def _receive_server_first(self, challenge: bytes) -> bytes:
        self._server_error(bytes(challenge))
        server_first = ServerFirstMessage.parse(challenge)
        if not server_first.nonce.startswith(self._nonce):
            raise SaslAuthenticationError("Invalid server nonce: does not start with client nonce")
        if server_first.iterations < self._spec.min_iterations:
            raise SaslAuthenticationError(f"Requested iterations {server_first.iterations} is less than the minimum "
                                          f"{self._spec.min_iterations} for {self.mechanism}")
        assert self._password is not None
        salted = salted_password(self.mechanism, self._password, server_first.salt, server_first.iterations)
        self._password = None
        without_proof = f"c={_b64encode(_GS2_NO_AUTHZID)},r={server_first.nonce}"
        auth_message = _auth_message(self._client_first_bare, bytes(challenge).decode(), without_proof)
        key = client_key(self.mechanism, salted)
        stored = hashlib.new(self._spec.hash_name, key).digest()
        proof = _xor(key, hmac_digest(self._spec.hash_name, stored, auth_message))
        self._expected_server_signature = hmac_digest(self._spec.hash_name, server_key(self.mechanism, salted),
                                                      auth_message)
        self._state = _ClientState.RECEIVE_SERVER_FINAL_MESSAGE
        return f"{without_proof},p={_b64encode(proof)}".encode()

    def _receive_server_final(self, challenge: bytes) -> None:
        text = bytes(challenge)
        self._server_error(text)
        what = "server final message"
        attributes = _text(text, what).split(",")
        signature = _b64decode(_attribute(attributes[0], "v", what), f"Invalid SCRAM {what}: the signature")
        _extensions(attributes[1:], what)
        if not hmac.compare_digest(signature, self._expected_server_signature):
            raise SaslAuthenticationError("Invalid server signature in server final message")
        self._expected_server_signature = b""
        self._state = _ClientState.COMPLETE
