"""SASL/SCRAM server and client: the RFC vectors, round trips, Kafka's failure rules, malformed input."""

from __future__ import annotations

import base64
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.security import scram_credentials
from strata.security.sasl import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    SaslClient,
    SaslServer,
    UnsupportedSaslMechanismError,
    client_mechanism,
    invalid_credentials_message,
    server_mechanism,
)
from strata.security.sasl.scram import (
    DELEGATION_TOKENS_UNSUPPORTED,
    ScramSaslClient,
    ScramSaslServer,
    decode_saslname,
    encode_saslname,
)
from strata.security.scram_credentials import (
    ScramCredential,
    ScramMechanismSpec,
    credential_from_password,
    from_kafka_string,
)

# RFC 7677 section 3
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC7677_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")

# RFC 5802 section 5 (SCRAM-SHA-1, which Kafka does not offer: enabled here for the test only)
RFC5802_CLIENT_FIRST = b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
RFC5802_SERVER_FIRST = b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
RFC5802_CLIENT_FINAL = b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
RFC5802_SERVER_FINAL = b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="

SHA256 = "SCRAM-SHA-256"
SHA512 = "SCRAM-SHA-512"
GENERIC_256 = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
PENCIL_256 = credential_from_password(SHA256, "pencil", RFC_SALT, 4096)
USERS = {SHA256: {"user": PENCIL_256}, SHA512: {"user": credential_from_password(SHA512, "pencil", RFC_SALT)}}


def rfc_server(nonce: str = RFC7677_SERVER_NONCE) -> ScramSaslServer:
    return ScramSaslServer(SHA256, {"user": PENCIL_256}.get, nonce=nonce)


def after_first(server: ScramSaslServer, first: bytes = RFC7677_CLIENT_FIRST) -> ScramSaslServer:
    assert server.evaluate_response(first) == RFC7677_SERVER_FIRST
    return server


def expect_generic(server: ScramSaslServer, token: bytes) -> SaslAuthenticationError:
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate_response(token)
    assert str(info.value) == GENERIC_256
    assert info.value.detail and info.value.detail != GENERIC_256
    assert not server.is_complete
    with pytest.raises(IllegalSaslStateError, match="state FAILED"):
        server.evaluate_response(token)  # a failed exchange takes nothing more
    return info.value


# -- RFC vectors --------------------------------------------------------------------------------------------

def test_rfc7677_server() -> None:
    server = rfc_server()
    assert server.evaluate_response(RFC7677_CLIENT_FIRST) == RFC7677_SERVER_FIRST
    assert not server.is_complete
    assert server.evaluate_response(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert server.is_complete and server.authorization_id == "user"
    with pytest.raises(IllegalSaslStateError, match="Unexpected challenge in Sasl server state COMPLETE"):
        server.evaluate_response(RFC7677_CLIENT_FINAL)
    assert server.is_complete


def test_rfc7677_client() -> None:
    client = ScramSaslClient(SHA256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.initial_response() == RFC7677_CLIENT_FIRST
    assert client.evaluate_challenge(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    assert not client.is_complete
    assert client.evaluate_challenge(RFC7677_SERVER_FINAL) is None
    assert client.is_complete


def test_rfc5802_sha1_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    mechanisms = dict(scram_credentials.MECHANISMS, **{"SCRAM-SHA-1": ScramMechanismSpec("sha1", 4096, 16384, 0)})
    monkeypatch.setattr(scram_credentials, "MECHANISMS", MappingProxyType(mechanisms))
    credential = credential_from_password("SCRAM-SHA-1", "pencil", base64.b64decode("QSXCR+Q6sek8bf92"))
    server = ScramSaslServer("SCRAM-SHA-1", {"user": credential}.get, nonce="3rfcNHYJY1ZVvWVs7j")
    assert server.evaluate_response(RFC5802_CLIENT_FIRST) == RFC5802_SERVER_FIRST
    assert server.evaluate_response(RFC5802_CLIENT_FINAL) == RFC5802_SERVER_FINAL
    client = ScramSaslClient("SCRAM-SHA-1", "user", "pencil", nonce="fyko+d2lbbFgONRv9qkxdawL")
    assert client.initial_response() == RFC5802_CLIENT_FIRST
    assert client.evaluate_challenge(RFC5802_SERVER_FIRST) == RFC5802_CLIENT_FINAL
    assert client.evaluate_challenge(RFC5802_SERVER_FINAL) is None and client.is_complete


# -- round trips -----------------------------------------------------------------------------------------------

def exchange(server: SaslServer, client: SaslClient) -> None:
    token: bytes | None = client.initial_response()
    while token is not None:
        challenge = server.evaluate_response(token)
        token = client.evaluate_challenge(challenge)
    assert server.is_complete and client.is_complete


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
@pytest.mark.parametrize("username", ["alice", "a,b=c", "=2C", "\u00e9l\u00e8ve", "x" * 300])
def test_round_trip(mechanism: str, username: str) -> None:
    password = "p\u00e4ss,word=1"
    creds = {username: credential_from_password(mechanism, password, iterations=4096)}
    server = server_mechanism(mechanism, scram_credentials=creds)
    client = client_mechanism(mechanism, username, password)
    assert server.mechanism == client.mechanism == mechanism
    exchange(server, client)
    assert server.authorization_id == username


def test_factory_with_lookup_callable_and_more_iterations() -> None:
    seen: list[str] = []
    credential = credential_from_password(SHA512, "pw", iterations=8192)

    def lookup(username: str) -> ScramCredential | None:
        seen.append(username)
        return credential if username == "bob" else None

    exchange(server_mechanism(SHA512, scram_credentials=lookup), client_mechanism(SHA512, "bob", "pw"))
    assert seen == ["bob"]


def test_factory_errors() -> None:
    with pytest.raises(UnsupportedSaslMechanismError, match="Unsupported SASL mechanism GSSAPI"):
        server_mechanism("GSSAPI", scram_credentials={})
    with pytest.raises(UnsupportedSaslMechanismError, match="SCRAM-SHA-256 has no credential store"):
        server_mechanism(SHA256)
    with pytest.raises(UnsupportedSaslMechanismError):
        client_mechanism("OAUTHBEARER", "u", "p")
    with pytest.raises(ValueError):
        ScramSaslServer("SCRAM-SHA-1", {}.get)


def test_each_exchange_uses_a_new_server_nonce() -> None:
    a = ScramSaslServer(SHA256, {"user": PENCIL_256}.get).evaluate_response(RFC7677_CLIENT_FIRST)
    b = ScramSaslServer(SHA256, {"user": PENCIL_256}.get).evaluate_response(RFC7677_CLIENT_FIRST)
    assert a != b and a.startswith(b"r=rOprNGfwEbeRWgbNEkqO") and b.startswith(b"r=rOprNGfwEbeRWgbNEkqO")


def test_saslname_encoding() -> None:
    assert encode_saslname("a,b=c") == "a=2Cb=3Dc"
    assert decode_saslname("a=2Cb=3Dc") == "a,b=c"
    assert decode_saslname("=3D2C") == "=2C"
    for bad in ("=", "a=", "=2", "=2c", "=3d", "==3D", "a=41"):
        with pytest.raises(Exception, match="Invalid username"):
            decode_saslname(bad)


# -- credential failures: one message --------------------------------------------------------------------------

def test_wrong_password_and_unknown_user_fail_alike() -> None:
    wrong = ScramSaslClient(SHA256, "user", "pencil2")
    server = rfc_server()
    with pytest.raises(SaslAuthenticationError) as wrong_password:
        exchange(server, wrong)
    unknown = ScramSaslClient(SHA256, "nobody", "pencil")
    with pytest.raises(SaslAuthenticationError) as unknown_user:
        exchange(rfc_server(), unknown)
    assert str(wrong_password.value) == str(unknown_user.value) == GENERIC_256
    assert str(wrong_password.value) == invalid_credentials_message(SHA256)
    assert wrong_password.value.detail == "Invalid client credentials"
    assert unknown_user.value.detail == "Authentication failed: Invalid user credentials"


def test_sha512_message_and_reauthentication_wording() -> None:
    server = server_mechanism(SHA512, scram_credentials=USERS[SHA512], reauthentication=True)
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate_response(b"n,,n=ghost,r=abc")
    assert str(info.value) == ("Authentication failed during re-authentication due to invalid credentials with "
                               "SASL mechanism SCRAM-SHA-512")


def test_credential_store_failures_are_generic() -> None:
    def broken(username: str) -> ScramCredential | None:
        raise OSError("zookeeper is down")

    err = expect_generic(ScramSaslServer(SHA256, broken), RFC7677_CLIENT_FIRST)
    assert "Credentials could not be obtained" in err.detail and "zookeeper is down" in err.detail
    expect_generic(ScramSaslServer(SHA256, lambda u: "salt=..."), RFC7677_CLIENT_FIRST)  # type: ignore[arg-type]
    weak = ScramSaslServer(SHA256, {"user": ScramCredential(RFC_SALT, PENCIL_256.stored_key, PENCIL_256.server_key,
                                                            4095)}.get)
    assert "Iterations 4095 is less than the minimum 4096" in expect_generic(weak, RFC7677_CLIENT_FIRST).detail
    sha512_credential = USERS[SHA512]["user"]
    expect_generic(ScramSaslServer(SHA256, {"user": sha512_credential}.get), RFC7677_CLIENT_FIRST)


# -- authzid, extensions, channel binding ------------------------------------------------------------------------

def test_authorization_id_equal_to_username() -> None:
    server = rfc_server()
    first = b"n,a=user,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert server.evaluate_response(first) == RFC7677_SERVER_FIRST
    # the bare message is RFC 7677's, so is the proof: c=biws is accepted with an authzid ...
    assert server.evaluate_response(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert server.authorization_id == "user"

    server = rfc_server()
    server.evaluate_response(first)
    binding = base64.b64encode(b"n,a=user,").decode()  # ... and so is base64 of the actual gs2 header
    without_proof = f"c={binding},r=rOprNGfwEbeRWgbNEkqO{RFC7677_SERVER_NONCE}"
    final = _final_for(without_proof, "n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server.evaluate_response(final).startswith(b"v=") and server.is_complete


def _final_for(without_proof: str, client_first_bare: str, password: str = "pencil") -> bytes:
    """A client-final with a correct proof for RFC 7677's server-first and any client-final-without-proof."""
    import hashlib
    import hmac

    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), RFC_SALT, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    auth = f"{client_first_bare},{RFC7677_SERVER_FIRST.decode()},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_authorization_id_different_from_username() -> None:
    server = rfc_server()
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate_response(b"n,a=admin,n=user,r=abc")
    assert str(info.value) == ("Authentication failed: Client requested an authorization id that is different "
                               "from username")
    # the credential is looked up first: an unknown user with an authzid gets the generic message
    expect_generic(rfc_server(), b"n,a=admin,n=ghost,r=abc")


def test_delegation_token_authentication_is_refused() -> None:
    server = rfc_server()
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate_response(b"n,,n=tokenid,r=abc,tokenauth=true")
    assert str(info.value) == DELEGATION_TOKENS_UNSUPPORTED
    assert "delegation token" in str(info.value)
    with pytest.raises(IllegalSaslStateError):
        server.evaluate_response(RFC7677_CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationError, match="delegation token"):
        rfc_server().evaluate_response(b"n,,n=user,r=abc,tokenauth=TRUE")


def test_other_extensions_are_ignored_but_kept_in_the_auth_message() -> None:
    first = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO,tokenauth=false,custom=x y"
    server = rfc_server()
    assert server.evaluate_response(first) == RFC7677_SERVER_FIRST
    final = _final_for(f"c=biws,r=rOprNGfwEbeRWgbNEkqO{RFC7677_SERVER_NONCE}",
                       "n=user,r=rOprNGfwEbeRWgbNEkqO,tokenauth=false,custom=x y")
    assert server.evaluate_response(final).startswith(b"v=")
    # an extension in client-final too (RFC 5802 allows it before the proof)
    server = after_first(rfc_server())
    final = _final_for(f"c=biws,r=rOprNGfwEbeRWgbNEkqO{RFC7677_SERVER_NONCE},ext=1", "n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server.evaluate_response(final).startswith(b"v=")


# -- malformed input --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("first", [
    b"",
    b"n",
    b"n,",
    b"n,,",
    b"n,,n=user",
    b"n,,n=user,",
    b"n,,r=abc,n=user",
    b"y,,n=user,r=abc",
    b"p=tls-unique,,n=user,r=abc",
    b"p=tls-server-end-point,,n=user,r=abc",
    b"N,,n=user,r=abc",
    b"n,x=1,n=user,r=abc",
    b"n,a=,n=user,r=abc",
    b"n,a=us=er,n=user,r=abc",
    b"n,,n=,r=abc",
    b"n,,n=us=er,r=abc",
    b"n,,n=us=2cer,r=abc",
    b"n,,n=user,r=",
    b"n,,n=user,r=a b",
    b"n,,n=user,r=\xc3\xa9",
    b"n,,m=ext,n=user,r=abc",
    b"n,,n=user,r=abc,",
    b"n,,n=user,r=abc,ext",
    b"n,,n=user,r=abc,1=x",
    b"n,,n=user,r=abc,ext=",
    b"n,,n=user,r=abc,ext=1,ext=2",
    b"n,,n=user\x00,r=abc",
    b"\xff\xfe\xfd",
    b"n,,n=\xff,r=abc",
    b"\x00\x00\x00",
    b"A" * 1_000_000,
    b"n,,n=user,r=" + b"," * 100_000,
    b"n,," + b"=" * 100_000,
])
def test_malformed_client_first(first: bytes) -> None:
    err = expect_generic(rfc_server(), first)
    assert len(err.detail) < 300  # a huge message is not echoed into the log


@pytest.mark.parametrize("final", [
    b"",
    b"c=biws",
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    b"c=biws,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,c=biws,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=,x=1",
    RFC7677_CLIENT_FINAL.replace(b"p=dHzb", b"p=!Hzb"),  # bad base64
    RFC7677_CLIENT_FINAL.replace(b"VQ=", b"VQ"),  # bad padding
    RFC7677_CLIENT_FINAL.replace(b"c=biws", b"c=bi!s"),
    RFC7677_CLIENT_FINAL.replace(b"c=biws", b"c=" + base64.b64encode(b"y,,")),  # binding not "n,,"
    RFC7677_CLIENT_FINAL.replace(b"c=biws", b"c=" + base64.b64encode(b"n,a=user,")),  # authzid not sent
    RFC7677_CLIENT_FINAL.replace(b"c=biws", b"c="),
    RFC7677_CLIENT_FINAL.replace(b"$k0,", b"$k1,"),  # wrong nonce
    RFC7677_CLIENT_FINAL.replace(b"hNlF$k0,", b","),  # truncated nonce
    RFC7677_CLIENT_FINAL.replace(b"r=rOpr", b"r=xOpr"),
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=",
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",  # proof of the wrong length
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=" + base64.b64encode(bytes(32)),
    RFC7677_CLIENT_FINAL + b"\x00",
    b"\xc3\x28" + RFC7677_CLIENT_FINAL,
    b"p=" * 200_000,
])
def test_malformed_client_final(final: bytes) -> None:
    err = expect_generic(after_first(rfc_server()), final)
    assert len(err.detail) < 300


def test_client_final_for_another_password_is_refused() -> None:
    final = _final_for(f"c=biws,r=rOprNGfwEbeRWgbNEkqO{RFC7677_SERVER_NONCE}", "n=user,r=rOprNGfwEbeRWgbNEkqO", "pen")
    assert expect_generic(after_first(rfc_server()), final).detail == "Invalid client credentials"


def test_authorization_id_before_completion() -> None:
    server = rfc_server()
    with pytest.raises(RuntimeError, match="has not completed"):
        _ = server.authorization_id
    after_first(server)
    with pytest.raises(RuntimeError):
        _ = server.authorization_id


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_client_first(token: bytes) -> None:
    server = rfc_server()
    try:
        challenge = server.evaluate_response(token)
    except SaslAuthenticationError:
        assert not server.is_complete
    else:
        assert challenge.startswith(b"r=")


_SCRAMISH = st.text(alphabet="nyparcsimvex=,23CDbiwsuU$%/+\u00e9\x00", max_size=80)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_SCRAMISH.map(str.encode), st.binary(max_size=120)))
def test_fuzz_client_final(token: bytes) -> None:
    server = after_first(rfc_server())
    with pytest.raises(SaslAuthenticationError):
        server.evaluate_response(token)


@settings(max_examples=300, deadline=None)
@given(_SCRAMISH)
def test_fuzz_scram_like_client_first(text: str) -> None:
    server = rfc_server()
    try:
        server.evaluate_response(text.encode())
    except SaslAuthenticationError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([0, 1]))
def test_fuzz_client_side(challenge: bytes, step: int) -> None:
    client = ScramSaslClient(SHA256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    client.initial_response()
    if step:
        client.evaluate_challenge(RFC7677_SERVER_FIRST)
    try:
        client.evaluate_challenge(challenge)
    except SaslAuthenticationError:
        assert not client.is_complete


# -- client ----------------------------------------------------------------------------------------------------

def started_client() -> ScramSaslClient:
    client = ScramSaslClient(SHA256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    client.initial_response()
    return client


@pytest.mark.parametrize(("server_first", "message"), [
    (b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "Invalid server nonce: does not start with client nonce"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095",
     "Requested iterations 4095 is less than the minimum 4096 for SCRAM-SHA-256"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=0", "invalid iterations"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999999", "invalid iterations"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=x", "invalid iterations"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=!!,i=4096", "salt is not base64"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,i=4096", "Invalid SCRAM server first message"),
    (b"m=x,r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "mandatory extensions"),
    (b"e=unknown-user", "Sasl authentication using SCRAM-SHA-256 failed with error: unknown-user"),
    (b"", "Invalid SCRAM server first message"),
])
def test_client_refuses_server_first(server_first: bytes, message: str) -> None:
    client = started_client()
    with pytest.raises(SaslAuthenticationError, match=message.replace("(", r"\(").replace("$", r"\$")):
        client.evaluate_challenge(server_first)
    assert not client.is_complete
    with pytest.raises(IllegalSaslStateError):
        client.evaluate_challenge(RFC7677_SERVER_FIRST)


@pytest.mark.parametrize(("server_final", "message"), [
    (b"v=" + base64.b64encode(bytes(32)), "Invalid server signature in server final message"),
    (b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4", "not base64"),
    (b"e=invalid-proof", "Sasl authentication using SCRAM-SHA-256 failed with error: invalid-proof"),
    (b"", "Invalid SCRAM server final message"),
    (b"x=1", "Invalid SCRAM server final message"),
])
def test_client_refuses_server_final(server_final: bytes, message: str) -> None:
    client = started_client()
    client.evaluate_challenge(RFC7677_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError, match=message):
        client.evaluate_challenge(server_final)
    assert not client.is_complete


def test_client_states_and_arguments() -> None:
    client = ScramSaslClient(SHA512, "u", "p")
    with pytest.raises(IllegalSaslStateError):
        client.evaluate_challenge(b"r=x,s=AA==,i=4096")
    first = client.initial_response()
    assert first.startswith(b"n,,n=u,r=") and len(first) > len(b"n,,n=u,r=") + 20
    with pytest.raises(IllegalSaslStateError):
        client.initial_response()
    with pytest.raises(ValueError):
        ScramSaslClient(SHA256, "", "p")
    with pytest.raises(ValueError):
        ScramSaslClient(SHA256, "u", "p", nonce="a,b")
    with pytest.raises(ValueError):
        ScramSaslClient("SCRAM-SHA-1", "u", "p")
    completed = started_client()
    completed.evaluate_challenge(RFC7677_SERVER_FIRST)
    completed.evaluate_challenge(RFC7677_SERVER_FINAL)
    with pytest.raises(IllegalSaslStateError):
        completed.evaluate_challenge(RFC7677_SERVER_FINAL)
    assert completed.is_complete


def test_kafka_credential_string_authenticates() -> None:
    text = ("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,"
            "server_key=wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=,iterations=4096")
    server = ScramSaslServer(SHA256, {"user": from_kafka_string(text)}.get, nonce=RFC7677_SERVER_NONCE)
    assert server.evaluate_response(RFC7677_CLIENT_FIRST) == RFC7677_SERVER_FIRST
    assert server.evaluate_response(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL


def test_a_client_nonce_repeated_in_front_is_accepted_as_kafka_does() -> None:
    """librdkafka up to 2.0 (Debian's kcat) sends ``r=<client nonce><client nonce><server nonce>`` in its
    final message; Kafka checks that the nonce *ends with* the combined one, so such clients log in."""
    import hashlib

    from strata.security.scram_credentials import client_key, hmac_digest, salted_password

    client_nonce = "rOprNGfwEbeRWgbNEkqO"
    without_proof = f"c=biws,r={client_nonce}{client_nonce}{RFC7677_SERVER_NONCE}"
    auth = b",".join([RFC7677_CLIENT_FIRST[3:], RFC7677_SERVER_FIRST, without_proof.encode()])
    ck = client_key(SHA256, salted_password(SHA256, "pencil", RFC_SALT, 4096))
    proof = bytes(a ^ b for a, b in zip(ck, hmac_digest("sha256", hashlib.sha256(ck).digest(), auth), strict=True))
    server = after_first(rfc_server())
    server.evaluate_response(without_proof.encode() + b",p=" + base64.b64encode(proof))
    assert server.is_complete and server.authorization_id == "user"
