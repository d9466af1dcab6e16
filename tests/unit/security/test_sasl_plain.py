"""SASL/PLAIN server and client with Kafka's PlainSaslServer messages, and the password-check plugin loader."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.errors import InvalidConfigError
from strata.security.sasl import (
    IllegalSaslStateError,
    PlainSaslClient,
    PlainSaslServer,
    SaslAuthenticationError,
    UnsupportedSaslMechanismError,
    client_mechanism,
    load_callback,
    server_mechanism,
)

USERS = {"admin": "admin-secret", "alice": "alice-secret", "\u00e9l\u00e8ve": "m\u00f6t de passe"}
INVALID = "Authentication failed: Invalid username or password"
AUTHZID = "Authentication failed: Client requested an authorization id that is different from username"


def message(authzid: str, username: str, password: str) -> bytes:
    return f"{authzid}\x00{username}\x00{password}".encode()


def fail(server: PlainSaslServer, token: bytes) -> str:
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate_response(token)
    assert not server.is_complete
    return str(info.value)


@pytest.mark.parametrize("authzid", ["", "alice"])
def test_success(authzid: str) -> None:
    server = PlainSaslServer(USERS)
    assert server.mechanism == "PLAIN"
    assert server.evaluate_response(message(authzid, "alice", "alice-secret")) == b""
    assert server.is_complete and server.authorization_id == "alice"
    with pytest.raises(IllegalSaslStateError):
        server.evaluate_response(message("", "alice", "alice-secret"))


def test_non_ascii_credentials() -> None:
    server = PlainSaslServer(USERS)
    server.evaluate_response(message("", "\u00e9l\u00e8ve", "m\u00f6t de passe"))
    assert server.authorization_id == "\u00e9l\u00e8ve"
    assert fail(PlainSaslServer(USERS), message("", "\u00e9l\u00e8ve", "mot de passe")) == INVALID


def test_wrong_password_and_unknown_user_fail_alike() -> None:
    assert fail(PlainSaslServer(USERS), message("", "alice", "wrong")) == INVALID
    assert fail(PlainSaslServer(USERS), message("", "mallory", "alice-secret")) == INVALID
    assert fail(PlainSaslServer(USERS), message("", "alice", "alice-secret-")) == INVALID
    assert fail(PlainSaslServer(USERS), message("", "alice", "ALICE-SECRET")) == INVALID
    assert fail(PlainSaslServer(USERS), b"\x00alice\x00\xff\xfe") == INVALID
    assert fail(PlainSaslServer(USERS), b"\x00\xffalice\x00alice-secret") == INVALID


def test_authorization_id_must_be_the_username() -> None:
    assert fail(PlainSaslServer(USERS), message("admin", "alice", "alice-secret")) == AUTHZID
    # the password is checked first, as in Kafka
    assert fail(PlainSaslServer(USERS), message("admin", "alice", "wrong")) == INVALID


def test_kafka_empty_token_cases() -> None:
    # PlainSaslServerTest.emptyTokens
    cases = [
        (message("", "", ""), "Authentication failed: username not specified"),
        (message("", "", "p"), "Authentication failed: username not specified"),
        (message("", "u", ""), "Authentication failed: password not specified"),
        (message("a", "", ""), "Authentication failed: username not specified"),
        (message("a", "", "p"), "Authentication failed: username not specified"),
        (message("a", "u", ""), "Authentication failed: password not specified"),
        (b"a\x00u\x00p\x00", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\x00u", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"a\x00u\x00p\x00x\x00y\x00z", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    ]
    for token, expected in cases:
        server = PlainSaslServer(USERS)
        assert fail(server, token) == expected
        with pytest.raises(IllegalSaslStateError):
            server.evaluate_response(message("", "alice", "alice-secret"))


def test_authorization_id_before_completion() -> None:
    with pytest.raises(RuntimeError, match="has not completed"):
        _ = PlainSaslServer(USERS).authorization_id


def test_password_check_callback() -> None:
    calls: list[tuple[str, str]] = []

    def check(username: str, password: str) -> bool:
        calls.append((username, password))
        return password == "ok"

    server = PlainSaslServer(check)
    server.evaluate_response(message("", "anyone", "ok"))
    assert server.authorization_id == "anyone" and calls == [("anyone", "ok")]
    assert fail(PlainSaslServer(check), message("", "anyone", "nope")) == INVALID
    # only True is success: a truthy object returned by mistake is not
    assert fail(PlainSaslServer(lambda u, p: "yes"), message("", "u", "p")) == INVALID  # type: ignore[arg-type,return-value]

    def broken(username: str, password: str) -> bool:
        raise ConnectionError("LDAP down")

    with pytest.raises(SaslAuthenticationError) as info:
        PlainSaslServer(broken).evaluate_response(message("", "u", "p"))
    assert str(info.value) == "Authentication failed: credentials for user could not be verified"
    assert "LDAP down" in info.value.detail


def test_server_arguments() -> None:
    with pytest.raises(TypeError):
        PlainSaslServer(42)  # type: ignore[arg-type]
    assert server_mechanism("PLAIN", plain_users=USERS).mechanism == "PLAIN"
    # a check callback replaces the JAAS users (Kafka: the callback handler class replaces the default one)
    server = server_mechanism("PLAIN", plain_users=USERS, plain_check=lambda u, p: p == "from-plugin")
    server.evaluate_response(message("", "x", "from-plugin"))
    assert server.authorization_id == "x"
    server = server_mechanism("PLAIN", plain_users=None, plain_check=lambda u, p: p == "from-plugin")
    assert fail(server, message("", "alice", "alice-secret")) == INVALID
    with pytest.raises(UnsupportedSaslMechanismError, match="PLAIN has no users"):
        server_mechanism("PLAIN")


def test_client() -> None:
    client = client_mechanism("PLAIN", "alice", "alice-secret")
    assert client.mechanism == "PLAIN" and not client.is_complete
    token = client.initial_response()
    assert token == b"\x00alice\x00alice-secret"
    assert client.is_complete
    assert client.evaluate_challenge(b"") is None
    with pytest.raises(SaslAuthenticationError):
        client.evaluate_challenge(b"unexpected")
    with pytest.raises(IllegalSaslStateError):
        client.initial_response()
    server = PlainSaslServer(USERS)
    server.evaluate_response(token)
    assert server.authorization_id == "alice"
    assert PlainSaslClient("alice", "pw", authorization_id="alice").initial_response() == b"alice\x00alice\x00pw"
    with pytest.raises(IllegalSaslStateError):
        PlainSaslClient("a", "b").evaluate_challenge(b"")
    for username, password in (("", "p"), ("u", ""), ("u\x00", "p"), ("u", "p\x00")):
        with pytest.raises(ValueError):
            PlainSaslClient(username, password)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=100))
def test_fuzz(token: bytes) -> None:
    server = PlainSaslServer(USERS)
    try:
        assert server.evaluate_response(token) == b""
    except SaslAuthenticationError:
        assert not server.is_complete
    else:
        assert server.authorization_id in USERS


# -- load_callback ---------------------------------------------------------------------------------------------

def test_load_function_from_module_spec() -> None:
    check = load_callback("operator:eq")  # check(username, password) is username == password
    server = PlainSaslServer(check)
    server.evaluate_response(message("", "same", "same"))
    assert server.authorization_id == "same"


def test_load_class_and_dotted_attribute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "strata_test_plain_plugin.py").write_text(textwrap.dedent("""
        class Checker:
            def __call__(self, username, password):
                return (username, password) == ("bob", "hunter2")

        class Holder:
            @staticmethod
            def check(username, password):
                return password == "static"
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    server = PlainSaslServer(load_callback("strata_test_plain_plugin:Checker"))
    server.evaluate_response(message("", "bob", "hunter2"))
    assert server.is_complete
    assert load_callback("strata_test_plain_plugin:Holder.check")("x", "static") is True


@pytest.mark.parametrize(("spec", "problem"), [
    ("com.example.MyCallbackHandler", "a Java callback handler class cannot be loaded"),
    ("nocolon", "expected module:callable"),
    ("operator:", "expected module:callable"),
    (":eq", "expected module:callable"),
    ("strata_no_such_module_xyz:check", "cannot import module 'strata_no_such_module_xyz'"),
    ("operator:no_such_function", "'operator' has no attribute 'no_such_function'"),
    ("math:pi", "pi is not callable"),
    ("collections:Counter", "Counter is not callable"),
    ("functools:partial", "cannot instantiate partial without arguments"),
])
def test_load_errors(spec: str, problem: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        load_callback(spec, config_name="listener.name.sasl_plaintext.plain.sasl.server.callback.handler.class")
    text = str(info.value)
    assert text.startswith(f"Invalid value {spec!r} for configuration "
                           "listener.name.sasl_plaintext.plain.sasl.server.callback.handler.class: ")
    assert problem in text
