"""``strata consumer-groups`` on KIP-848 consumer groups, laid out as Kafka 4.2's ``kafka-consumer-groups.sh``.

A real broker, real clients (confluent-kafka with ``group.protocol=consumer`` and a classic consumer): the
tool describes a consumer group through ConsumerGroupDescribe (member and assignment epochs, current and
target assignments, the server-side assignor) and a classic group through DescribeGroups (``-`` where a
classic group has no epoch), and lists both with their TYPE. Expected lines are built with the format
strings of Kafka's ``ConsumerGroupCommand`` (``printMembers``, ``printStates``, ``printOffsets``,
``printGroupInfo``), so the layout is checked byte for byte.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess

from strata.cli import main

FAST_GROUPS = {"group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "4000",
               "group.consumer.min.heartbeat.interval.ms": "200", "group.consumer.heartbeat.interval.ms": "300",
               "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}
MEMBERS = "%-15s %-{c}s %-15s %-{cl}s %-15s "  # GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS
VERBOSE = "%-15s %-20s %-15s %-20s"  # CURRENT-EPOCH CURRENT-ASSIGNMENT TARGET-EPOCH TARGET-ASSIGNMENT
LISTING = "%-25s %-20s"  # --list --type: GROUP (15 + 10) TYPE


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("cg-cli-kip848"), FAST_GROUPS).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})
        for topic, n in (("orders", 4), ("legacy", 2)):
            admin.create_topics([NewTopic(topic, n, 1)])[topic].result(15)
        p = Producer({"bootstrap.servers": b.bootstrap, "log_level": 3})
        for i in range(8):
            p.produce("orders", value=b"%d" % i, partition=i % 4)
            p.produce("legacy", value=b"%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        yield b
    finally:
        b.stop()


def cli(capsys: pytest.CaptureFixture[str], b: BrokerProcess, *args: str) -> str:
    capsys.readouterr()
    code = main(["consumer-groups", "--bootstrap-server", b.bootstrap, *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def consumer(b: BrokerProcess, group: str, client_id: str, **extra: str) -> Consumer:
    return Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "client.id": client_id,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 3, **extra})


def poll_until(consumers: list[Consumer], check, what: str, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        if check():
            return
    raise AssertionError(f"timed out waiting for {what}")


def assignment_text(c: Consumer) -> str:
    """Kafka 4's getAssignmentString for one topic: ``topic:0,1``."""
    parts = sorted(tp.partition for tp in c.assignment())
    return f"{c.assignment()[0].topic}:{','.join(map(str, parts))}"


def test_consumer_and_classic_groups_described_and_listed(broker: BrokerProcess,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    b = broker
    clients = ["kip848-a", "kip848-b"]
    members = [consumer(b, "g848", name, **{"group.protocol": "consumer"}) for name in clients]
    classic = consumer(b, "gclassic", "oldtimer")
    everyone = [*members, classic]
    try:
        for c in members:
            c.subscribe(["orders"])
        classic.subscribe(["legacy"])

        def consumed(c: Consumer, n: int, each: int) -> bool:
            return len(c.assignment()) == n and all(tp.offset == each for tp in c.position(c.assignment()))

        def settled() -> bool:
            if not all(consumed(c, 2, 2) for c in members) or not consumed(classic, 2, 4):
                return False
            out = cli(capsys, b, "--describe", "--group", "g848", "--members", "--verbose")
            rows = [line.split() for line in out.splitlines()[2:] if line]
            return len(rows) == 2 and all(r[5] == r[7] and r[6] == r[8] for r in rows)  # current == target

        poll_until(everyone, settled, "two consumer-group members with two partitions each, and a classic one")
        for c in everyone:  # commit what was consumed, with the records' leader epochs
            c.commit(asynchronous=False)

        # --members --verbose: epochs and assignments (ConsumerGroupDescribe)
        out = cli(capsys, b, "--describe", "--group", "g848", "--members", "--verbose")
        ids = {c.memberid(): (c, name) for c, name in zip(members, clients, strict=True)}
        width = max(15, *(len(m) for m in ids))
        lines = out.splitlines()
        assert lines[:2] == ["", (MEMBERS.format(c=width, cl=15) + VERBOSE) % (
            "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
            "TARGET-EPOCH", "TARGET-ASSIGNMENT")]
        rows = {line.split()[1]: line for line in lines[2:]}
        assert set(rows) == set(ids)
        epochs = set()
        for member_id, line in rows.items():
            c, client_id = ids[member_id]
            cells = line.split()
            epoch, host = cells[5], cells[2]
            epochs.add(epoch)
            assert line == (MEMBERS.format(c=width, cl=15) + VERBOSE) % (
                "g848", member_id, host, client_id, 2, epoch, assignment_text(c), epoch, assignment_text(c))
            assert host.endswith("127.0.0.1") and int(epoch) > 0

        # --state --verbose: the server-side assignor and the group's epochs
        out = cli(capsys, b, "--describe", "--group", "g848", "--state", "--verbose")
        coordinator = f"127.0.0.1:{b.port}  (1)"
        fmt = f"%-15s %-{max(25, len(coordinator))}s %-20s %-20s %-15s %-25s %s"
        header = fmt % ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                        "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS")
        (epoch,) = epochs
        assert out.splitlines() == ["", header, fmt % ("g848", coordinator, "uniform", "Stable", epoch, epoch, 2)]
        plain = cli(capsys, b, "--describe", "--group", "g848", "--state").splitlines()
        assert plain[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]

        # --describe --verbose: offsets with LEADER-EPOCH
        out = cli(capsys, b, "--describe", "--group", "g848", "--verbose").splitlines()
        assert out[1].split() == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                  "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        offsets = sorted(line.split()[1:8] for line in out[2:] if line)
        assert [r[:2] for r in offsets] == [["orders", str(p)] for p in range(4)]
        assert all(r[2] == "0" and r[3] == r[4] == "2" and r[5] == "0" and r[6] in ids for r in offsets), offsets

        # a classic group: DescribeGroups behind the same tables, "-" for what only consumer groups have
        out = cli(capsys, b, "--describe", "--group", "gclassic", "--members", "--verbose").splitlines()
        (row,) = out[2:]
        cells = row.split()
        assert cells[0] == "gclassic" and cells[3:] == ["oldtimer", "2", "-", "legacy:0,1", "-", "-"]
        assert row == (MEMBERS.format(c=max(15, len(cells[1])), cl=15) + VERBOSE) % (
            "gclassic", cells[1], cells[2], "oldtimer", 2, "-", "legacy:0,1", "-", "-")
        out = cli(capsys, b, "--describe", "--group", "gclassic", "--state", "--verbose").splitlines()
        assert out[2] == fmt % ("gclassic", coordinator, "range", "Stable", "-", "-", 1)

        # --all-groups: one table per group, in group order
        out = cli(capsys, b, "--describe", "--all-groups", "--members", "--verbose")
        groups = [line.split()[0] for line in out.splitlines() if line and not line.startswith("GROUP")]
        assert groups == ["g848", "g848", "gclassic"]
        assert out.count("CURRENT-EPOCH") == 2

        # --list with --type (and --state): Kafka's printGroupInfo
        listed = cli(capsys, b, "--list", "--type").splitlines()
        assert listed[0] == LISTING % ("GROUP", "TYPE")
        assert sorted(listed[1:]) == [LISTING % ("g848", "Consumer"), LISTING % ("gclassic", "Classic")]
        listed = cli(capsys, b, "--list", "--type", "consumer", "--state").splitlines()
        assert listed == [(LISTING + " %-20s") % row for row in (("GROUP", "TYPE", "STATE"),
                                                                  ("g848", "Consumer", "Stable"))]
        assert sorted(cli(capsys, b, "--list").split()) == ["g848", "gclassic"]
    finally:
        for c in everyone:
            c.close()

    # once the members left: an empty consumer group still describes as one (its assignor, no members)
    poll_until([], lambda: "Empty" in cli(capsys, b, "--describe", "--group", "g848", "--state"), "g848 empty")
    out = cli(capsys, b, "--describe", "--group", "g848", "--state", "--verbose").splitlines()
    assert out[2].split()[:5] == ["g848", f"127.0.0.1:{b.port}", "(1)", "uniform", "Empty"]


def test_upgraded_column_and_describe_groups_without_consumer_group_describe(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """No broker: a group with members of both protocols gets Kafka's UPGRADED column, and a broker that does
    not advertise ConsumerGroupDescribe is asked DescribeGroups alone."""
    from types import SimpleNamespace

    from strata.tools.admin import GroupDescription, KafkaAdmin, Member
    from strata.tools.consumer_groups_cmd import print_members

    desc = GroupDescription("mixed", "Reconciling", "consumer", "range", (
        Member("m-new", None, "c1", "/10.0.0.1", (("t", 0),), 5, (("t", 0), ("t", 1)), True),
        Member("m-old", None, "c2", "/10.0.0.2", (("u", 0), ("t", 2)), 4, (("t", 2), ("u", 0)), False)),
        (1, "h", 9092), "consumer", 6, 5)
    print_members(desc, verbose=True)
    out, err = capsys.readouterr()
    fmt = MEMBERS.format(c=15, cl=15) + VERBOSE + " %s"
    assert out.splitlines() == ["", fmt % ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                                           "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT", "UPGRADED"),
                                fmt % ("mixed", "m-new", "/10.0.0.1", "c1", 1, 5, "t:0", 5, "t:0,1", "true"),
                                fmt % ("mixed", "m-old", "/10.0.0.2", "c2", 2, 4, "t:2;u:0", 5, "t:2;u:0", "false")]
    assert "Warning: Consumer group 'mixed' is rebalancing." in err

    admin = KafkaAdmin("127.0.0.1:1")
    asked: list[int] = []
    monkeypatch.setattr(admin, "coordinator", lambda group: (1, "h", 9092))
    monkeypatch.setattr(admin, "api_version", lambda node, api_key: None if api_key == 69 else 5)

    def call_node(node: int, api_key: int, version: int, **fields: object) -> object:
        asked.append(api_key)
        return SimpleNamespace(groups=[SimpleNamespace(error_code=0, group_id="old", group_state="Empty",
                                                       protocol_type="consumer", protocol_data="", members=[])])

    monkeypatch.setattr(admin, "call_node", call_node)
    old = admin.describe_group("old")
    assert (old.group_type, old.state, old.group_epoch, asked) == ("classic", "Empty", None, [15])
