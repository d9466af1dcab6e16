"""``kafka-configs.sh --entity-type users|clients``: client quotas and SCRAM credentials, as Kafka 3.9's tool.

The commands run the ``bin/`` wrapper against one broker (module scope) with a PLAINTEXT listener, which the
tool uses, and a SASL_PLAINTEXT one, where a librdkafka client logs in with the credentials the tool made.
Quotas are read back over the raw protocol (DescribeClientQuotas) and SCRAM credentials with confluent-kafka's
admin client, so the tool's own reading is not the only witness. The argument handling that needs no broker
is checked at the end, without one.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient
from tests.integration.test_kafka_cli import ok, run

from strata.cli import build_parser, main
from strata.tools.configs_cmd import ConfigError, check_args, entities, java_double, java_parse_double


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("configs-quotas"), {
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "connection.failed.authentication.delay.ms": "0",
    }, listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}).start()
    try:
        yield b
    finally:
        b.stop()


def configs(broker: BrokerProcess, *args: str) -> str:
    return ok("configs", *args, bootstrap=broker.bootstrap)


def fails(broker: BrokerProcess, *args: str) -> str:
    """The stderr of a command that must exit 1 with nothing on stdout."""
    r = run("configs", *args, bootstrap=broker.bootstrap)
    assert r.returncode == 1, f"{r.returncode}\n{r.stdout}\n{r.stderr}"
    assert r.stdout == "", r.stdout
    return r.stderr


def refused(capsys: pytest.CaptureFixture[str], broker: BrokerProcess, *args: str) -> str:
    """``fails`` in this process (``strata.cli.main``, no interpreter start-up): the stderr of exit code 1."""
    capsys.readouterr()
    code = main(["configs", "--bootstrap-server", broker.bootstrap, *args])
    out, err = capsys.readouterr()
    assert code == 1 and out == "", f"{code}\n{out}\n{err}"
    return err


def wire_quotas(broker: BrokerProcess, *components: tuple[str, int, str | None]) -> dict[tuple, dict[str, float]]:
    """DescribeClientQuotas over the raw protocol: {((type, name), ...): {key: value}} (strict filter)."""
    with WireClient(broker.bootstrap) as w:
        r = w.call(48, 1, components=[{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
                   strict=True)
    assert r.error_code == 0, r
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in r.entries}


def scram_login(broker: BrokerProcess, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> bool:
    """Whether a librdkafka producer logs in on the SASL listener: True once it has the cluster's brokers,
    False once it reports an authentication failure (whichever comes first, within 20 s)."""
    errors: list[KafkaError] = []
    conf = {"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password,
            "error_cb": errors.append}
    producer = Producer(conf)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return False
        try:
            if producer.list_topics(timeout=0.5).brokers:
                return True
        except Exception:  # noqa: BLE001 - not connected yet: keep waiting for one outcome or the other
            pass
        producer.poll(0.1)
    raise AssertionError(f"no login outcome for {user} within 20 s: {errors}")


# -- client quotas -------------------------------------------------------------------------------

def test_user_quotas_are_set_described_and_deleted(broker: BrokerProcess) -> None:
    out = configs(broker, "--alter", "--entity-type", "users", "--entity-name", "alice",
                  "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    assert out == "Completed updating config for user alice.\n"
    assert wire_quotas(broker, ("user", 0, "alice")) == {
        (("user", "alice"),): {"consumer_byte_rate": 2048.0, "producer_byte_rate": 1024.0}}
    assert configs(broker, "--describe", "--entity-type", "users", "--entity-name", "alice") == \
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0\n"
    # --user is the same entity
    assert configs(broker, "--describe", "--user", "alice") == \
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0\n"

    out = configs(broker, "--alter", "--user", "alice", "--delete-config", "producer_byte_rate")
    assert out == "Completed updating config for user alice.\n"
    assert wire_quotas(broker, ("user", 0, "alice")) == {(("user", "alice"),): {"consumer_byte_rate": 2048.0}}
    # a quota that is not set cannot be deleted (checked by the tool before anything is sent)
    assert fails(broker, "--alter", "--user", "alice", "--delete-config", "producer_byte_rate") == \
        "Invalid config(s): producer_byte_rate\n"
    configs(broker, "--alter", "--user", "alice", "--delete-config", "consumer_byte_rate")
    assert wire_quotas(broker, ("user", 0, "alice")) == {}
    assert configs(broker, "--describe", "--user", "alice") == ""


def test_client_quotas_with_both_forms(broker: BrokerProcess) -> None:
    out = configs(broker, "--alter", "--entity-type", "clients", "--entity-name", "app",
                  "--add-config", "request_percentage=12.5,controller_mutation_rate=10")
    assert out == "Completed updating config for client app.\n"
    assert wire_quotas(broker, ("client-id", 0, "app")) == {
        (("client-id", "app"),): {"controller_mutation_rate": 10.0, "request_percentage": 12.5}}
    expected = "Quota configs for client-id 'app' are controller_mutation_rate=10.0, request_percentage=12.5\n"
    assert configs(broker, "--describe", "--client", "app") == expected
    assert configs(broker, "--describe", "--entity-type", "clients", "--entity-name", "app") == expected
    # no SCRAM lookup for clients, and every client-id entity (only) without a name
    assert expected in configs(broker, "--describe", "--entity-type", "clients")
    configs(broker, "--alter", "--client", "app", "--delete-config", "request_percentage,controller_mutation_rate")
    assert wire_quotas(broker, ("client-id", 0, "app")) == {}


def test_user_and_client_together(broker: BrokerProcess) -> None:
    out = configs(broker, "--alter", "--entity-type", "users", "--entity-name", "bob", "--entity-type", "clients",
                  "--entity-name", "app", "--add-config", "producer_byte_rate=4096")
    assert out == "Completed updating config for user bob.\n"
    assert wire_quotas(broker, ("user", 0, "bob"), ("client-id", 0, "app")) == {
        (("user", "bob"), ("client-id", "app")): {"producer_byte_rate": 4096.0}}
    # --user/--client: Kafka lists the client first, so that is what the completion line names
    out = configs(broker, "--alter", "--user", "bob", "--client", "app", "--add-config", "consumer_byte_rate=100")
    assert out == "Completed updating config for client app.\n"
    expected = ("Quota configs for user-principal 'bob', client-id 'app' are consumer_byte_rate=100.0, "
                "producer_byte_rate=4096.0\n")
    assert configs(broker, "--describe", "--user", "bob", "--client", "app") == expected
    assert configs(broker, "--describe", "--entity-type", "clients", "--entity-name", "app", "--entity-type",
                   "users", "--entity-name", "bob") == expected
    # the user's client-ids, any name; the user alone has no quota (strict match: nothing else)
    assert configs(broker, "--describe", "--entity-type", "users", "--entity-name", "bob", "--entity-type",
                   "clients") == expected
    assert configs(broker, "--describe", "--user", "bob") == ""
    configs(broker, "--alter", "--user", "bob", "--client", "app", "--delete-config",
            "consumer_byte_rate,producer_byte_rate")
    assert wire_quotas(broker, ("user", 0, "bob"), ("client-id", 0, "app")) == {}


def test_default_entities(broker: BrokerProcess) -> None:
    out = configs(broker, "--alter", "--entity-type", "users", "--entity-default",
                  "--add-config", "producer_byte_rate=10485760")
    assert out == "Completed updating default config for users in the cluster.\n"
    assert wire_quotas(broker, ("user", 1, None)) == {(("user", None),): {"producer_byte_rate": 10485760.0}}
    assert configs(broker, "--describe", "--user-defaults") == \
        "Quota configs for the default user-principal are producer_byte_rate=1.048576E7\n"

    out = configs(broker, "--alter", "--client-defaults", "--add-config", "consumer_byte_rate=512")
    assert out == "Completed updating default config for clients in the cluster.\n"
    assert configs(broker, "--describe", "--entity-type", "clients", "--entity-default") == \
        "Quota configs for the default client-id are consumer_byte_rate=512.0\n"

    # a named user's quota for every client-id, and the default user's default client-id
    out = configs(broker, "--alter", "--entity-type", "users", "--entity-name", "carl", "--entity-type", "clients",
                  "--entity-default", "--add-config", "request_percentage=50")
    assert out == "Completed updating config for user carl.\n"
    assert configs(broker, "--describe", "--user", "carl", "--client-defaults") == \
        "Quota configs for user-principal 'carl', the default client-id are request_percentage=50.0\n"
    configs(broker, "--alter", "--user-defaults", "--client-defaults", "--add-config", "request_percentage=25")
    assert wire_quotas(broker, ("user", 1, None), ("client-id", 1, None)) == {
        (("user", None), ("client-id", None)): {"request_percentage": 25.0}}
    assert configs(broker, "--describe", "--entity-type", "users", "--entity-default", "--entity-type", "clients",
                   "--entity-default") == \
        "Quota configs for the default user-principal, the default client-id are request_percentage=25.0\n"

    # every user entity: the default first, then the names (the broker's order)
    configs(broker, "--alter", "--user", "dora", "--add-config", "consumer_byte_rate=300")
    assert configs(broker, "--describe", "--entity-type", "users").splitlines()[:2] == [
        "Quota configs for the default user-principal are producer_byte_rate=1.048576E7",
        "Quota configs for user-principal 'dora' are consumer_byte_rate=300.0"]

    for args in (["--user-defaults", "--delete-config", "producer_byte_rate"],
                 ["--client-defaults", "--delete-config", "consumer_byte_rate"],
                 ["--user", "carl", "--client-defaults", "--delete-config", "request_percentage"],
                 ["--user-defaults", "--client-defaults", "--delete-config", "request_percentage"],
                 ["--user", "dora", "--delete-config", "consumer_byte_rate"]):
        configs(broker, "--alter", *args)
    assert wire_quotas(broker, ("user", 2, None)) == {}
    assert wire_quotas(broker, ("client-id", 2, None)) == {}


# -- SCRAM credentials ---------------------------------------------------------------------------

def test_scram_credentials_added_used_described_and_deleted(broker: BrokerProcess) -> None:
    out = configs(broker, "--alter", "--entity-type", "users", "--entity-name", "erin", "--add-config",
                  "SCRAM-SHA-256=[iterations=8192,password=erin-secret],SCRAM-SHA-512=[password=erin-secret]")
    assert out == "Completed updating config for user erin.\n"
    # what the broker stored, through another admin client
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_user_scram_credentials(["erin"])["erin"].result(30)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)]
    # the salted password was derived right: a real client logs in with the password (and not without it)
    assert scram_login(broker, "erin", "erin-secret", "SCRAM-SHA-256")
    assert scram_login(broker, "erin", "erin-secret", "SCRAM-SHA-512")
    assert not scram_login(broker, "erin", "wrong-secret", "SCRAM-SHA-256")

    assert configs(broker, "--describe", "--entity-type", "users", "--entity-name", "erin") == \
        "SCRAM credential configs for user-principal 'erin' are SCRAM-SHA-256=iterations=8192, " \
        "SCRAM-SHA-512=iterations=4096\n"

    # quotas and credentials side by side; each change leaves the other alone
    configs(broker, "--alter", "--user", "erin", "--add-config", "producer_byte_rate=2000")
    assert configs(broker, "--describe", "--user", "erin") == (
        "Quota configs for user-principal 'erin' are producer_byte_rate=2000.0\n"
        "SCRAM credential configs for user-principal 'erin' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096\n")

    out = configs(broker, "--alter", "--user", "erin", "--delete-config", "SCRAM-SHA-512")
    assert out == "Completed updating config for user erin.\n"
    assert configs(broker, "--describe", "--user", "erin") == (
        "Quota configs for user-principal 'erin' are producer_byte_rate=2000.0\n"
        "SCRAM credential configs for user-principal 'erin' are SCRAM-SHA-256=iterations=8192\n")
    assert not scram_login(broker, "erin", "erin-secret", "SCRAM-SHA-512")
    assert scram_login(broker, "erin", "erin-secret", "SCRAM-SHA-256")

    configs(broker, "--alter", "--user", "erin", "--delete-config", "SCRAM-SHA-256")
    configs(broker, "--alter", "--user", "erin", "--delete-config", "producer_byte_rate")
    assert configs(broker, "--describe", "--user", "erin") == ""
    assert not scram_login(broker, "erin", "erin-secret", "SCRAM-SHA-256")


def test_scram_users_made_elsewhere_are_described(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 5000), b"frank-pw")])["frank"].result(30)
    assert configs(broker, "--describe", "--user", "frank") == \
        "SCRAM credential configs for user-principal 'frank' are SCRAM-SHA-512=iterations=5000\n"
    # without a name: every user's quotas, then every user with a credential
    assert "SCRAM credential configs for user-principal 'frank' are SCRAM-SHA-512=iterations=5000\n" in \
        configs(broker, "--describe", "--entity-type", "users")
    # a user with a client-id, or the default user, has no SCRAM lookup
    assert configs(broker, "--describe", "--user", "frank", "--client", "x") == ""
    assert "SCRAM" not in configs(broker, "--describe", "--user-defaults")
    # iterations=-1 is the default 4096; the new credential replaces the old one
    configs(broker, "--alter", "--user", "frank", "--add-config", "SCRAM-SHA-512=[iterations=-1,password=pw2]")
    assert configs(broker, "--describe", "--user", "frank") == \
        "SCRAM credential configs for user-principal 'frank' are SCRAM-SHA-512=iterations=4096\n"
    assert scram_login(broker, "frank", "pw2", "SCRAM-SHA-512")


# -- errors --------------------------------------------------------------------------------------

def test_tool_side_errors(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    """Each refused by the tool (after asking the broker, for some), in this process: nothing is changed."""
    def refuse(*args: str) -> str:
        return refused(capsys, broker, *args)

    alter = ("--alter", "--entity-type", "users", "--entity-name", "gina")
    assert refuse( *alter, "--add-config", "foo=1,producer_byte_rate=5") == (
        "Only quota and SCRAM credential configs can be added for 'users' using --bootstrap-server. "
        "Unexpected config names: Set(foo)\n")
    assert refuse( *alter, "--delete-config", "foo,bar") == (
        "Only quota and SCRAM credential configs can be deleted for 'users' using --bootstrap-server. "
        "Unexpected config names: ArrayBuffer(foo, bar)\n")
    assert refuse( "--alter", "--client", "app", "--add-config", "SCRAM-SHA-256=[password=x]") == (
        "Only quota configs can be added for 'clients' using --bootstrap-server. "
        "Unexpected config names: Set(SCRAM-SHA-256)\n")
    assert refuse( "--alter", "--user", "gina", "--client", "app", "--delete-config", "SCRAM-SHA-256") == (
        "Only quota configs can be deleted for 'clients' using --bootstrap-server. "
        "Unexpected config names: ArrayBuffer(SCRAM-SHA-256)\n")
    assert refuse( "--alter", "--user-defaults", "--add-config", "SCRAM-SHA-256=[password=x]") == (
        "The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials using "
        "--bootstrap-server.\n")
    assert refuse( *alter, "--add-config", "SCRAM-SHA-256=[password=x],producer_byte_rate=5") == (
        "Cannot alter both quota and SCRAM credential configs simultaneously for 'users' using "
        "--bootstrap-server.\n")
    assert refuse( *alter, "--add-config", "producer_byte_rate=lots") == \
        "Cannot parse quota configuration value for producer_byte_rate: lots\n"
    assert refuse( *alter, "--add-config", "SCRAM-SHA-256=[iterations=1000,password=x]") == \
        "Iterations 1000 is less than the minimum 4096 required for SCRAM-SHA-256\n"
    assert refuse( *alter, "--add-config", "SCRAM-SHA-512=secret") == \
        "Invalid credential property SCRAM_SHA_512=secret\n"
    assert refuse( *alter, "--add-config", "SCRAM-SHA-256=[iterations=,password=x]") == \
        'For input string: ""\n'
    assert refuse( "--alter", "--entity-type", "users", "--add-config", "producer_byte_rate=5") == (
        "an entity-name or default entity must be specified with --alter of users, clients, brokers or ips\n")
    assert refuse( "--alter", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "gina",
                 "--add-config", "producer_byte_rate=5") == "An entity name must be specified for every entity type\n"
    assert refuse( "--describe", "--entity-type", "users", "--entity-name", "a", "--entity-name", "b") == \
        "More entity names specified than entity types\n"
    assert refuse( "--describe", "--user", "gina", "--entity-type", "clients") == \
        "--entity-{type,name,default} should not be used in conjunction with specific entity flags\n"
    assert refuse( "--describe", "--entity-type", "users", "--entity-type", "topics") == \
        "Only 'users' and 'clients' entity types may be specified together\n"
    assert refuse( "--describe", "--entity-type", "users", "--entity-type", "users") == \
        "Duplicate entity type(s) specified: users\n"
    assert "Entity type ips is not supported by Strata" in refuse( "--describe", "--ip", "1.2.3.4")
    assert wire_quotas(broker, ("user", 0, "gina")) == {}  # nothing was changed by any of them


def test_broker_side_errors(broker: BrokerProcess) -> None:
    argv = ["--alter", "--user", "hank", "--add-config", "SCRAM-SHA-256=[iterations=20000,password=x]"]
    assert fails(broker, *argv) == (
        f"Error while executing config command with args '--bootstrap-server {broker.bootstrap} {' '.join(argv)}'\n"
        "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.UnacceptableCredentialException: "
        "Too many iterations\n")
    # an empty password is refused by the admin client before anything is sent
    err = fails(broker, "--alter", "--user", "hank", "--add-config", "SCRAM-SHA-256=[password=]")
    assert err.endswith("java.util.concurrent.ExecutionException: org.apache.kafka.common.errors."
                        "UnacceptableCredentialException: Password must not be empty\n"), err
    err = fails(broker, "--alter", "--user", "hank", "--delete-config", "SCRAM-SHA-512")
    assert err.endswith("org.apache.kafka.common.errors.ResourceNotFoundException: Attempt to delete a user "
                        "credential that does not exist\n"), err
    err = fails(broker, "--alter", "--user", "hank", "--add-config", "producer_byte_rate=-5")
    assert err.startswith("Error while executing config command with args") and \
        "org.apache.kafka.common.errors.InvalidRequestException: " in err, err
    assert wire_quotas(broker, ("user", 0, "hank")) == {}
    assert configs(broker, "--describe", "--user", "hank") == ""


# -- argument handling (no broker) ---------------------------------------------------------------

def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["configs", "--bootstrap-server", "localhost:9092", *argv])


def test_entity_types_and_names_in_kafkas_order() -> None:
    # the specific flags go in Kafka's order (client before user), whatever the command line's
    assert entities(_args("--describe", "--user", "u", "--client", "c")) == (["clients", "users"], ["c", "u"])
    assert entities(_args("--describe", "--client-defaults", "--user", "u")) == (["users", "clients"], ["u", ""])
    assert entities(_args("--describe", "--user-defaults", "--client-defaults")) == (["clients", "users"], ["", ""])
    # --entity-name and --entity-default keep their command-line order
    args = _args("--describe", "--entity-type", "users", "--entity-default", "--entity-type", "clients",
                 "--entity-name", "c")
    assert entities(args) == (["users", "clients"], ["", "c"])
    assert check_args(_args("--alter", "--user", "u", "--add-config", "producer_byte_rate=1")) == (["users"], ["u"])
    with pytest.raises(ConfigError, match="^Only 'users' and 'clients' entity types may be specified together$"):
        check_args(_args("--describe", "--user", "u", "--topic", "t"))
    with pytest.raises(ConfigError, match="^Duplicate entity type"):
        check_args(_args("--describe", "--user", "u", "--user-defaults"))


def test_java_number_forms() -> None:
    assert [java_double(v) for v in (1024.0, 12.5, 1e7, 10485760.0, 9999999.0, 0.001, 1e-4, 2.5e-5, 0.0)] == [
        "1024.0", "12.5", "1.0E7", "1.048576E7", "9999999.0", "0.001", "1.0E-4", "2.5E-5", "0.0"]
    assert [java_parse_double(t) for t in ("1024", " 1e3 ", "1.5f", "2d", ".5", "5.", "0x1p3", "-7")] == [
        1024.0, 1000.0, 1.5, 2.0, 0.5, 5.0, 8.0, -7.0]
    for bad in ("", "1_000", "inf", "1e", "0x", "abc", "1,5"):
        with pytest.raises(ValueError):
            java_parse_double(bad)
