"""Kafka principals, ssl.principal.mapping.rules (Kafka's SslPrincipalMapperTest cases) and RFC 2253 names."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.security.certs import Pki, make_pki, self_signed_der

from strata.errors import InvalidConfigError
from strata.security.principal import (
    ANONYMOUS,
    WILDCARD,
    CertificateParseError,
    KafkaPrincipal,
    NoMatchingRuleError,
    SslPrincipalMapper,
    certificate_info,
    distinguished_name,
    escape_rdn_value,
    principal_from_tls,
    same_distinguished_name,
    subject_alt_names_kept,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


# -- KafkaPrincipal ------------------------------------------------------------------------------------

def test_principal_text_form_and_parse() -> None:
    alice = KafkaPrincipal("User", "alice")
    assert str(alice) == "User:alice"
    assert KafkaPrincipal.parse("User:alice") == alice
    assert hash(KafkaPrincipal.parse("User:alice")) == hash(alice)
    assert KafkaPrincipal.parse("User:CN=a:b,O=c") == KafkaPrincipal("User", "CN=a:b,O=c")  # first colon splits
    assert KafkaPrincipal.parse("Group:") == KafkaPrincipal("Group", "")
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert str(WILDCARD) == "User:*" and WILDCARD.is_wildcard and not alice.is_wildcard
    with pytest.raises(AttributeError):
        alice.name = "bob"  # type: ignore[misc]


@pytest.mark.parametrize("text", ["", "alice", "User"])
def test_principal_parse_refuses_text_without_a_type(text: str) -> None:
    with pytest.raises(ValueError, match="principalType:principalName"):
        KafkaPrincipal.parse(text)


# -- SslPrincipalMapper: Kafka's SslPrincipalMapperTest ------------------------------------------------

@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules: str) -> None:
    SslPrincipalMapper.from_rules(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(InvalidConfigError, match="ssl.principal.mapping.rules"):
        SslPrincipalMapper.from_rules(rules)


def test_ssl_principal_mapper() -> None:
    mapper = SslPrincipalMapper.from_rules(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.get_name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.get_name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.get_name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.get_name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.get_name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize(("expected", "rules"), [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    # empty rules are ignored
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    # escape sequences
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    # rules rule
    ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_rules_splitting(expected: str, rules: str) -> None:
    assert str(SslPrincipalMapper.from_rules(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_comma_with_whitespace() -> None:
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.get_name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


# -- SslPrincipalMapper: beyond Kafka's tests ------------------------------------------------------------

def test_no_matching_rule_fails_like_kafka() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=eng,.*$/$1/")
    assert mapper.get_name("CN=alice,OU=eng,O=Strata") == "alice"
    with pytest.raises(NoMatchingRuleError, match="No rules apply to CN=bob,OU=ops,O=Strata"):
        mapper.get_name("CN=bob,OU=ops,O=Strata")
    with pytest.raises(NoMatchingRuleError):
        SslPrincipalMapper("").get_name("CN=alice")  # no rules at all
    assert SslPrincipalMapper(None).get_name("CN=alice") == "CN=alice"  # unset: DEFAULT


def test_first_matching_rule_wins_and_rules_may_be_on_separate_lines() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=([^,]+),OU=eng,.*$/eng-$1/\n  RULE:^CN=([^,]+),.*$/$1/U\nDEFAULT\n")
    assert str(mapper) == ("SslPrincipalMapper(rules = [RULE:^CN=([^,]+),OU=eng,.*$/eng-$1, "
                           "RULE:^CN=([^,]+),.*$/$1/U, DEFAULT])")
    assert mapper.get_name("CN=alice,OU=eng,O=Strata") == "eng-alice"
    assert mapper.get_name("CN=bob,OU=ops,O=Strata") == "BOB"
    assert mapper.get_name("O=Strata") == "O=Strata"


def test_java_replacement_syntax() -> None:
    three = "RULE:^CN=(.*?),OU=(.*?),O=(.*?)$"
    dn = "CN=a,OU=b,O=c"
    assert SslPrincipalMapper(f"{three}/$1@$4/").get_name(dn) == "a@$4"  # no group 4: literal (Kafka)
    assert SslPrincipalMapper(f"{three}/$12/").get_name(dn) == "a2"  # group 1, then "2" (Java)
    assert SslPrincipalMapper(f"{three}/$3.$2.$1/").get_name(dn) == "c.b.a"
    assert SslPrincipalMapper(f"{three}/\\$1 is $1/").get_name(dn) == "$1 is a"  # \$ is a literal $
    assert SslPrincipalMapper(f"{three}/$0/").get_name(dn) == dn
    assert SslPrincipalMapper("RULE:^CN=(?<user>[a-z]+),.*$/${user}/U").get_name(dn) == "A"  # Java named groups
    assert SslPrincipalMapper("RULE:^CN=(a)?(x)?.*$/[$2]/").get_name(dn) == "[]"  # a group that did not match
    assert SslPrincipalMapper("RULE:^O=a\\/b$/a\\/b\\,c/").get_name("O=a/b") == "a/b,c"  # escaped / and ,
    assert SslPrincipalMapper("RULE:^cn=([a-z]+)$/$1/").rules[0].apply("CN=a") is None


@pytest.mark.parametrize("rules", [
    "RULE:^CN=(.*$/$1/",  # not a regex
    "RULE:^CN=.*$/$1/",  # $1 without a group
    "RULE:^CN=(.*)$/$/",  # $ at the end
    "RULE:^CN=(.*)$/$x/",  # $ not followed by a group
    "RULE:^CN=(.*)$/${nope}/",  # no such named group
    "RULE:^CN=(.*)$/a\\/",  # nothing after the escape... the / closes the replacement: invalid rule
])
def test_invalid_patterns_and_replacements_are_config_errors(rules: str) -> None:
    with pytest.raises(InvalidConfigError, match="ssl.principal.mapping.rules"):
        SslPrincipalMapper(rules)


# -- distinguished names ---------------------------------------------------------------------------------

def _peer(*rdns: tuple[tuple[str, str], ...]) -> dict[str, object]:
    return {"subject": rdns, "issuer": ((("commonName", "CA"),),)}


def test_distinguished_name_reverses_python_order() -> None:
    peer = _peer((("countryName", "US"),), (("organizationName", "Acme"),), (("organizationalUnitName", "eng"),),
                 (("commonName", "alice"),))
    assert distinguished_name(peer) == "CN=alice,OU=eng,O=Acme,C=US"
    assert distinguished_name(peer, "issuer") == "CN=CA"
    assert distinguished_name({}) == ""


@pytest.mark.parametrize(("value", "escaped"), [
    ("Doe, John", "Doe\\, John"),
    ("a+b", "a\\+b"),
    ('say "hi"', 'say \\"hi\\"'),
    ("back\\slash", "back\\\\slash"),
    ("<tag>;", "\\<tag\\>\\;"),
    ("a=b", "a\\=b"),  # Java escapes = and # anywhere
    ("#1", "\\#1"),
    ("x#y", "x\\#y"),
    (" lead", "\\ lead"),
    ("trail  ", "trail\\ \\ "),
    ("  ", "\\ \\ "),
    ("mid space", "mid space"),
    ("nul\x00", "nul\\00"),
    ("Ünïcödé", "Ünïcödé"),
    ("", ""),
])
def test_rfc2253_escaping(value: str, escaped: str) -> None:
    assert escape_rdn_value(value) == escaped


def test_multi_valued_rdns_and_attributes_without_keyword() -> None:
    peer = _peer((("countryName", "US"),), (("commonName", "Doe; John"), ("userId", "jdoe")),
                 (("emailAddress", "jdoe@example.com"),), (("domainComponent", "example"),),
                 (("serialNumber", "42"),), (("1.2.3.4", "x"),))
    assert distinguished_name(peer) == (
        "1.2.3.4=#0c0178,2.5.4.5=#13023432,DC=example,1.2.840.113549.1.9.1=#16106a646f65406578616d706c652e636f6d,"
        "CN=Doe\\; John+UID=jdoe,C=US")


def test_certificate_reader_matches_java_names(tmp_path: Path) -> None:
    der = self_signed_der(tmp_path, "/C=US/O=Acme, Inc./OU=#eng /CN=Doe; John+UID=jdoe/emailAddress=jdoe@example.com"
                                    "/serialNumber=42",
                          san="DNS:a.example, IP:::1, IP:10.0.0.1, email:x@y.z, URI:https://u.example/p")
    info = certificate_info(der)
    java = ("2.5.4.5=#13023432,1.2.840.113549.1.9.1=#16106a646f65406578616d706c652e636f6d,CN=Doe\\; John+UID=jdoe,"
            "OU=\\#eng\\ ,O=Acme\\, Inc.,C=US")
    assert info.subject == java and info.issuer == java
    assert info.subject_alt_names == (("DNS", "a.example"), ("IP Address", "::1"), ("IP Address", "10.0.0.1"),
                                      ("email", "x@y.z"), ("URI", "https://u.example/p"))
    # the same name from the getpeercert() form of this certificate
    peer = _peer((("countryName", "US"),), (("organizationName", "Acme, Inc."),),
                 (("organizationalUnitName", "#eng "),), (("commonName", "Doe; John"), ("userId", "jdoe")),
                 (("emailAddress", "jdoe@example.com"),), (("serialNumber", "42"),))
    assert distinguished_name(peer) == java


def test_certificate_reader_on_the_test_pki(pki: Pki) -> None:
    def der(path: Path) -> bytes:
        import ssl

        return ssl.PEM_cert_to_DER_cert(path.read_text().split("-----END CERTIFICATE-----")[0]
                                        + "-----END CERTIFICATE-----\n")

    server = certificate_info(der(pki.server.cert))
    assert server.subject == "CN=localhost,OU=brokers,O=Strata" == pki.server.dn
    assert server.issuer == "CN=Strata Test CA,O=Strata"
    assert server.subject_alt_names == (("DNS", "localhost"), ("IP Address", "127.0.0.1"))
    assert server.not_before < datetime.now(UTC) < server.not_after
    assert "subject=CN=localhost" in server.summary()
    assert "SAN=[DNS:localhost, IP Address:127.0.0.1]" in server.summary()
    expired = certificate_info(der(pki.expired.cert))
    assert expired.subject == "CN=carol,OU=eng,O=Strata"
    assert expired.not_after == datetime(2020, 1, 31, tzinfo=UTC)
    assert certificate_info(der(pki.alice.cert)).subject_alt_names == ()
    with pytest.raises(CertificateParseError):
        certificate_info(b"\x30\x03\x02\x01")
    with pytest.raises(CertificateParseError):
        certificate_info(b"not a certificate")


def test_identity_comparisons_of_keystore_updates() -> None:
    assert same_distinguished_name("CN=localhost,O=Strata", "cn=LOCALHOST,o=strata")
    assert not same_distinguished_name("CN=localhost,O=Strata", "CN=other,O=Strata")
    old = (("DNS", "localhost"), ("IP Address", "127.0.0.1"))
    assert subject_alt_names_kept(old, old[::-1])
    assert subject_alt_names_kept(old, (*old, ("DNS", "new.example")))  # adding is allowed
    assert not subject_alt_names_kept(old, old[:1])


# -- principal_from_tls ---------------------------------------------------------------------------------

def test_principal_from_tls() -> None:
    peer = _peer((("organizationName", "Strata"),), (("organizationalUnitName", "eng"),), (("commonName", "Alice"),))
    assert principal_from_tls(peer, None) == KafkaPrincipal("User", "CN=Alice,OU=eng,O=Strata")
    mapper = SslPrincipalMapper("RULE:^CN=([^,]+),OU=eng,O=Strata$/$1/L")
    assert principal_from_tls(peer, mapper) == KafkaPrincipal("User", "alice")
    assert principal_from_tls(None, mapper) == ANONYMOUS  # no client certificate
    assert principal_from_tls({}, mapper) == ANONYMOUS  # getpeercert() of an unverified peer
    with pytest.raises(NoMatchingRuleError):
        principal_from_tls(_peer((("commonName", "bob"),)), mapper)
