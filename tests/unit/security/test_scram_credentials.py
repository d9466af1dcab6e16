"""SCRAM credentials: the RFC 5802 derivations, Kafka's string form and the /config/users entity config."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from strata.security.scram_credentials import (
    MECHANISM_TYPES,
    MECHANISMS,
    ScramCredential,
    UnacceptableCredentialError,
    credential_from_password,
    credential_from_salted_password,
    credentials_from_user_config,
    from_kafka_string,
    mechanism_spec,
    salted_password,
    to_kafka_string,
    validate_iterations,
    with_user_credential,
)

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")  # RFC 7677's example
# What Kafka's ScramFormatter gives for "pencil" with that salt and 4096 iterations (checked against scramp 1.5.0
# and, for SHA-256, by the RFC 7677 exchange in test_sasl_scram.py, which verifies against this stored key).
PENCIL_256 = ("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,"
              "server_key=wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=,iterations=4096")
PENCIL_512 = ("salt=W22ZaJ0SNY7soEsUEjb6gQ==,"
              "stored_key=6AAub3065EYRmyFpM2RNwqK+eGnrkYuEWbXn19LsEmBqzu8QaCXNc1FwpnX9NhH2hK/60dzj9DoO5DvVkOHbvg==,"
              "server_key=jZHbYjC1aHh0/hKbxyBuGFjDrgjgKTT1esA7awWiKcRZ0o/0b1yWEebBeSVkkCFewf91nLDfKF24mvD5nmE6rA==,"
              "iterations=4096")


def test_mechanisms_are_kafkas() -> None:
    assert MECHANISMS["SCRAM-SHA-256"] == ("sha256", 4096, 16384, 1)
    assert MECHANISMS["SCRAM-SHA-512"] == ("sha512", 4096, 16384, 2)
    assert MECHANISMS["SCRAM-SHA-256"].digest_size == 32 and MECHANISMS["SCRAM-SHA-512"].digest_size == 64
    assert MECHANISM_TYPES == {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
    with pytest.raises(ValueError, match="Unsupported SCRAM mechanism 'SCRAM-SHA-1'"):
        mechanism_spec("SCRAM-SHA-1")


@pytest.mark.parametrize(("mechanism", "expected"), [("SCRAM-SHA-256", PENCIL_256), ("SCRAM-SHA-512", PENCIL_512)])
def test_known_vector_for_pencil(mechanism: str, expected: str) -> None:
    credential = credential_from_password(mechanism, "pencil", RFC_SALT, 4096)
    assert to_kafka_string(credential) == expected
    assert from_kafka_string(expected) == credential


def test_keys_follow_rfc_5802_definitions() -> None:
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", RFC_SALT, 4096)
    assert salted_password("SCRAM-SHA-256", "pencil", RFC_SALT, 4096) == salted
    credential = credential_from_password("SCRAM-SHA-256", "pencil", RFC_SALT)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert credential.stored_key == hashlib.sha256(client_key).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", "sha256").digest()
    assert credential.salt == RFC_SALT and credential.iterations == 4096


def test_password_is_utf8_without_saslprep() -> None:
    # Kafka's ScramFormatter.normalize is a plain UTF-8 encoding: no NFKC, no mapping of U+00AD to nothing
    for password in ("\u2168", "pass\u00adword", "caf\u00e9"):
        expected = hashlib.pbkdf2_hmac("sha512", password.encode(), RFC_SALT, 4096)
        assert salted_password("SCRAM-SHA-512", password, RFC_SALT, 4096) == expected


def test_from_salted_password_matches_from_password() -> None:
    for mechanism, spec in MECHANISMS.items():
        salted = hashlib.pbkdf2_hmac(spec.hash_name, b"secret", b"salty", 8192)
        assert credential_from_salted_password(mechanism, b"salty", salted, 8192) == \
            credential_from_password(mechanism, "secret", b"salty", 8192)


def test_random_salt_and_minimum_iterations() -> None:
    a = credential_from_password("SCRAM-SHA-256", "pw")
    b = credential_from_password("SCRAM-SHA-256", "pw")
    assert a.salt != b.salt and len(a.salt) == 32 and a.iterations == 4096
    with pytest.raises(ValueError, match="Iterations 4095 is less than the minimum 4096 required for SCRAM-SHA-256"):
        credential_from_password("SCRAM-SHA-256", "pw", iterations=4095)


def test_alter_user_scram_credentials_iteration_bounds() -> None:
    validate_iterations("SCRAM-SHA-256", 4096)
    validate_iterations("SCRAM-SHA-512", 16384)
    with pytest.raises(UnacceptableCredentialError, match="^Too few iterations$"):
        validate_iterations("SCRAM-SHA-256", 4095)
    with pytest.raises(UnacceptableCredentialError, match="^Too many iterations$"):
        validate_iterations("SCRAM-SHA-512", 16385)


def test_repr_hides_keys() -> None:
    credential = from_kafka_string(PENCIL_256)
    text = repr(credential)
    assert "stored_key" not in text and "server_key" not in text and "iterations=4096" in text


def test_credential_validates_fields() -> None:
    with pytest.raises(TypeError):
        ScramCredential("salt", b"", b"", 4096)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ScramCredential(b"salt", b"", b"", 0)


def test_string_form_accepts_any_order_and_unpadded_base64() -> None:
    credential = from_kafka_string(PENCIL_256)
    parts = PENCIL_256.split(",")
    assert from_kafka_string(",".join(reversed(parts))) == credential
    unpadded = PENCIL_256.replace("gQ==", "gQ")
    assert from_kafka_string(unpadded) == credential


@pytest.mark.parametrize("text", [
    "",
    "salt=AA==",
    PENCIL_256 + ",extra=1",
    PENCIL_256.replace("iterations=4096", "iterations=abc"),
    PENCIL_256.replace("iterations=4096", "iterations=0"),
    PENCIL_256.replace("iterations=4096", "iterations=-4096"),
    PENCIL_256.replace("iterations=4096", "iterations=99999999999"),
    PENCIL_256.replace("stored_key=", "stored_key=!!"),
    PENCIL_256.replace("salt=", "=salt"),
    PENCIL_256.replace(",server_key", "server_key"),
])
def test_malformed_string_form(text: str) -> None:
    with pytest.raises(ValueError, match="^Credentials not valid") as info:
        from_kafka_string(text)
    assert "WG5d8oPm" not in str(info.value) and "wfPLwcE6" not in str(info.value)  # keys are never echoed


def test_user_entity_config_keeps_other_keys() -> None:
    credential = from_kafka_string(PENCIL_256)
    # /config/users/alice as Kafka writes it, with a quota beside the credential
    entity = json.loads('{"version":1,"config":{"producer_byte_rate":"1024","SCRAM-SHA-256":"' + PENCIL_256 + '"}}')
    config = entity["config"]
    assert credentials_from_user_config(config) == {"SCRAM-SHA-256": credential}

    other = credential_from_password("SCRAM-SHA-512", "pencil", RFC_SALT)
    updated = with_user_credential(config, "SCRAM-SHA-512", other)
    assert list(updated) == ["producer_byte_rate", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert updated["producer_byte_rate"] == "1024" and updated["SCRAM-SHA-512"] == PENCIL_512
    assert config == entity["config"] and "SCRAM-SHA-512" not in config  # the input is not changed
    assert json.dumps({"version": 1, "config": updated}, separators=(",", ":")).startswith(
        '{"version":1,"config":{"producer_byte_rate":"1024","SCRAM-SHA-256":"salt=W22ZaJ0SNY7soEsUEjb6gQ==,')

    removed = with_user_credential(updated, "SCRAM-SHA-256", None)
    assert removed == {"producer_byte_rate": "1024", "SCRAM-SHA-512": PENCIL_512}
    assert with_user_credential({}, "SCRAM-SHA-256", None) == {}
    assert credentials_from_user_config({"consumer_byte_rate": "1"}) == {}
    with pytest.raises(ValueError):
        with_user_credential({}, "SCRAM-SHA-1", None)


def test_malformed_entity_credential_names_mechanism() -> None:
    with pytest.raises(ValueError, match="^SCRAM-SHA-512: Credentials not valid"):
        credentials_from_user_config({"SCRAM-SHA-512": "salt=AA=="})
