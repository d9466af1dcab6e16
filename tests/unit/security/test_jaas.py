"""Kafka's sasl.jaas.config values: JaasConfig's tokenizer rules, one login module, errors that hide values."""

from __future__ import annotations

import pytest

from strata.errors import InvalidConfigError
from strata.security.sasl.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasConfig, parse_jaas_config

PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
         'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="x";'


def test_plain_example() -> None:
    config = parse_jaas_config(PLAIN)
    assert config.login_module == PLAIN_LOGIN_MODULE
    assert config.control_flag == "required"
    assert config.username == "admin" and config.password == "admin-secret"
    assert config.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}
    assert dict(config.options) == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                                    "user_alice": "alice-secret"}


def test_scram_example() -> None:
    config = parse_jaas_config(SCRAM)
    assert config.login_module == SCRAM_LOGIN_MODULE
    assert (config.username, config.password) == ("admin", "x")
    assert config.plain_users() == {}  # PlainServerCallbackHandler reads PlainLoginModule entries only


def test_scram_module_user_options_are_not_plain_users() -> None:
    config = parse_jaas_config(f'{SCRAM_LOGIN_MODULE} required user_bob="pw";')
    assert config.plain_users() == {} and config.options["user_bob"] == "pw"


def test_missing_username_password() -> None:
    config = parse_jaas_config(f"{PLAIN_LOGIN_MODULE} optional;")
    assert config.username is None and config.password is None and config.plain_users() == {}
    assert config.control_flag == "optional"


@pytest.mark.parametrize("flag", ["required", "REQUIRED", "Requisite", "sufficient", "OPTIONAL"])
def test_control_flags(flag: str) -> None:
    assert parse_jaas_config(f"M {flag};").control_flag == flag.lower()


def test_layout_quotes_and_unquoted_values() -> None:
    value = f"""
        {PLAIN_LOGIN_MODULE}
            required
            username = admin
            password='single quoted'
            user_admin=\t"with \\"escaped\\" quotes";
    """
    config = parse_jaas_config(value)
    assert config.options == {"username": "admin", "password": "single quoted", "user_admin": 'with "escaped" quotes'}


def test_java_escapes() -> None:
    config = parse_jaas_config(r'M required a="x\ny" b="t\tb" c="back\\slash" d="\101\60\7" e="\q" f="" g="\0";')
    assert config.options == {"a": "x\ny", "b": "t\tb", "c": "back\\slash", "d": "A0\x07", "e": "q", "f": "",
                              "g": "\x00"}
    assert parse_jaas_config(r'M required o="\477";').options["o"] == "'7"  # \47 then 7: a first digit > 3 stops at 2


def test_comments() -> None:
    value = f"""// the broker's users
        {PLAIN_LOGIN_MODULE} /* flag: */ required
        user_alice="alice-secret" // trailing comment
        ;"""
    assert parse_jaas_config(value).plain_users() == {"alice": "alice-secret"}


def test_quoted_values_keep_slashes_and_specials() -> None:
    config = parse_jaas_config('M required path="/etc/kafka/x.keytab" p="a;b=c d//e/*f*/";')
    assert config.options == {"path": "/etc/kafka/x.keytab", "p": "a;b=c d//e/*f*/"}


def test_unquoted_slash_starts_a_comment_as_in_kafka() -> None:
    # StreamTokenizer's comment character: the rest of the line is dropped, so the ';' is never seen
    with pytest.raises(InvalidConfigError, match="Value not specified for key 'path'"):
        parse_jaas_config("M required path=/etc/x;")
    with pytest.raises(InvalidConfigError, match="not terminated by semi-colon"):
        parse_jaas_config("M required path=a/etc/x;")
    assert parse_jaas_config("M required path=a/etc/x\n;").options == {"path": "a"}


def test_last_duplicate_option_wins() -> None:
    assert parse_jaas_config('M required a="1" a="2";').options == {"a": "2"}


def test_repr_hides_values() -> None:
    text = repr(parse_jaas_config(PLAIN))
    assert "admin-secret" not in text and "alice-secret" not in text
    assert "user_alice" in text and PLAIN_LOGIN_MODULE in text


def test_options_are_read_only() -> None:
    config = parse_jaas_config(PLAIN)
    with pytest.raises(TypeError):
        config.options["username"] = "x"  # type: ignore[index]
    assert isinstance(config, JaasConfig)


@pytest.mark.parametrize(("value", "problem"), [
    ("", "JAAS config property does not contain any login modules"),
    ("  // just a comment\n /* and another */ ", "JAAS config property does not contain any login modules"),
    (PLAIN_LOGIN_MODULE, "Login module control flag not specified in JAAS config"),
    (f"{PLAIN_LOGIN_MODULE} ;", "Login module control flag is not available in the JAAS config"),
    (f"{PLAIN_LOGIN_MODULE} mandatory;", "Invalid login module control flag 'mandatory' in JAAS config"),
    (f'{PLAIN_LOGIN_MODULE} required username="admin" password="admin-secret"',
     "JAAS config entry not terminated by semi-colon"),
    (f'{PLAIN_LOGIN_MODULE} required password=;', "Value not specified for key 'password' in JAAS config"),
    (f'{PLAIN_LOGIN_MODULE} required password=', "Value not specified for key 'password' in JAAS config"),
    (f'{PLAIN_LOGIN_MODULE} required password==;', "Value not specified for key 'password' in JAAS config"),
    (f'{PLAIN_LOGIN_MODULE} required password;', "Value not specified for an option after the control flag"),
    (f'{PLAIN_LOGIN_MODULE} required =x;', "Option name not specified before '='"),
    (f'{PLAIN_LOGIN_MODULE} required username=admin password=admin secret;',
     "Value not specified for an option after 'password' in JAAS config"),
    (f'{PLAIN_LOGIN_MODULE} required password="admin-secret;', "a quoted value is not closed on its line"),
    (f'{PLAIN_LOGIN_MODULE} required password="admin-\nsecret";', "a quoted value is not closed on its line"),
    (f'{PLAIN_LOGIN_MODULE} required password="admin-secret\\', "a quoted value is not closed on its line"),
    (f"{PLAIN} {SCRAM}", "JAAS config property contains 2 login modules, should be 1 module"),
    ("; M required;", "Login module class not specified in JAAS config"),
    ("= M required;", "Login module class not specified in JAAS config"),
])
def test_errors(value: str, problem: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        parse_jaas_config(value, config_name="listener.name.sasl_ssl.plain.sasl.jaas.config")
    text = str(info.value)
    assert text == f"Invalid value [hidden] for configuration listener.name.sasl_ssl.plain.sasl.jaas.config: " \
        f"{text.split(': ', 1)[1]}"
    assert problem in text
    assert "secret" not in text and "admin" not in text  # no value is ever shown


def test_quoted_flag_is_not_echoed() -> None:
    with pytest.raises(InvalidConfigError) as info:
        parse_jaas_config('M "hunter2";')
    assert "hunter2" not in str(info.value) and "Invalid login module control flag" in str(info.value)
