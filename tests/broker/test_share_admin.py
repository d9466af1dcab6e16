"""Share-group administration (KIP-932) over the wire and through ``strata share-groups``, against a real broker.

The APIs first, with a raw client: AlterShareGroupOffsets creates a group that does not exist yet (empty, at
epoch 0) and sets start offsets the share coordinator then holds; DescribeShareGroupOffsets reads them back
(all initialized partitions, or named ones, -1 for what has no state) with v1's lag; ShareGroupDescribe shows
the group and a member that joined with ShareGroupHeartbeat; a group with a member refuses the changes
(NON_EMPTY_GROUP); DeleteShareGroupOffsets and DeleteGroups delete the share-partition state at the share
coordinator (read back with ReadShareGroupStateSummary) before the group forgets it; and the group's records
outlive a restart. Then the tool, as ``python -m strata share-groups`` and ``bin/kafka-share-groups.sh``
subprocesses, with expected lines built from the format strings of Kafka 4.2's ``ShareGroupCommand``; and
the tool on a group that confluent-kafka's ShareConsumer reads.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, ensure_topic
from tests.support.share import SHARE_BROKER_PROPS, poll_until, set_group_configs, share_consumer
from tests.tiered.harness import wait_until

from strata.errors import ErrorCode as E

CG_HEARTBEAT, SHARE_HEARTBEAT, DESCRIBE, DESCRIBE_OFFSETS, ALTER, DELETE_OFFSETS = 68, 76, 77, 90, 91, 92
DELETE_GROUPS, SUMMARY, LIST_GROUPS = 42, 87, 16
PROPS = {"num.partitions": "2", "share.coordinator.state.topic.num.partitions": "3",
         "offsets.topic.num.partitions": "3"}
REPO = Path(__file__).resolve().parents[2]
NO_SUCH_PARTITION = "This server does not host this topic-partition."


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share-admin"), PROPS).start()
    try:
        with WireClient(b.bootstrap) as w:
            for topic in ("t", "u", "cli-t"):
                ensure_topic(w, topic)
        p = Producer({"bootstrap.servers": b.bootstrap, "log_level": 3})
        for i in range(10):
            p.produce("t", value=b"%d" % i, partition=0)
        for i in range(6):
            p.produce("cli-t", value=b"%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        yield b
    finally:
        b.stop()


# -- the raw requests --------------------------------------------------------------------------------

def alter(w: WireClient, group: str, topics: dict[str, dict[int, int]]) -> tuple[int, dict[tuple[str, int], int]]:
    r = w.call(ALTER, 0, group_id=group, topics=[
        {"topic_name": t, "partitions": [{"partition_index": p, "start_offset": o} for p, o in ps.items()]}
        for t, ps in topics.items()])
    return int(r.error_code), {(t.topic_name, p.partition_index): int(p.error_code)
                               for t in r.responses for p in t.partitions}


def offsets(w: WireClient, group: str, topics: dict[str, list[int]] | None = None,
            version: int = 1) -> tuple[int, dict[tuple[str, int], tuple[int, ...]]]:
    """(group error, (topic, partition) -> (start offset, leader epoch, lag, error)); v0 has no lag (-1)."""
    r = w.call(DESCRIBE_OFFSETS, version, groups=[{"group_id": group, "topics": None if topics is None else
                                                   [{"topic_name": t, "partitions": ps} for t, ps in topics.items()]}])
    (g,) = r.groups
    return int(g.error_code), {(t.topic_name, p.partition_index): (
        p.start_offset, p.leader_epoch, getattr(p, "lag", -1), int(p.error_code)) for t in g.topics
        for p in t.partitions}


def describe(w: WireClient, group: str) -> Any:
    (g,) = w.call(DESCRIBE, 1, group_ids=[group], include_authorized_operations=False).groups
    return g


def delete_offsets(w: WireClient, group: str, topics: list[str]) -> tuple[int, dict[str, int]]:
    r = w.call(DELETE_OFFSETS, 0, group_id=group, topics=[{"topic_name": t} for t in topics])
    return int(r.error_code), {t.topic_name: int(t.error_code) for t in r.responses}


def delete_group(w: WireClient, group: str) -> int:
    (result,) = w.call(DELETE_GROUPS, 2, groups_names=[group]).results
    return int(result.error_code)


def join(w: WireClient, group: str, topics: list[str]) -> Any:
    r = w.call(SHARE_HEARTBEAT, 1, group_id=group, member_id=uuid.uuid4().hex[:22], member_epoch=0, rack_id=None,
               subscribed_topic_names=topics)
    assert int(r.error_code) == E.NONE, r
    return r


def leave(w: WireClient, group: str, member_id: str) -> None:
    r = w.call(SHARE_HEARTBEAT, 1, group_id=group, member_id=member_id, member_epoch=-1, rack_id=None,
               subscribed_topic_names=None)
    assert int(r.error_code) == E.NONE, r


def start_offset(w: WireClient, group: str, topic_id: Any, partition: int) -> int:
    """What the share coordinator holds (ReadShareGroupStateSummary): -1 when there is no state."""
    r = w.call(SUMMARY, 1, group_id=group, topics=[{"topic_id": topic_id, "partitions": [
        {"partition": partition, "leader_epoch": 0}]}])
    [[p]] = [x.partitions for x in r.results]
    assert int(p.error_code) == E.NONE
    return int(p.start_offset)


def share_groups(w: WireClient) -> dict[str, str]:
    r = w.call(LIST_GROUPS, 5, states_filter=[], types_filter=["share"])
    return {g.group_id: g.group_state for g in r.groups}


def test_share_group_admin_apis(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as w:
        t_id = ensure_topic(w, "t").topic_id
        u_id = ensure_topic(w, "u").topic_id

        # no group yet: ShareGroupDescribe says so, DescribeShareGroupOffsets has nothing (and no error)
        g = describe(w, "sg")
        assert (int(g.error_code), g.error_message) == (E.GROUP_ID_NOT_FOUND, "Group sg not found.")
        assert offsets(w, "sg") == (E.NONE, {})
        assert int(describe(w, "").error_code) == E.INVALID_GROUP_ID

        # AlterShareGroupOffsets creates the group, empty, and the share coordinator holds the offsets
        code, result = alter(w, "sg", {"t": {0: 4, 1: 0, 5: 1}, "nope": {0: 0}})
        assert code == E.NONE
        assert result == {("t", 0): 0, ("t", 1): 0, ("t", 5): E.UNKNOWN_TOPIC_OR_PARTITION,
                          ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        g = describe(w, "sg")
        assert (int(g.error_code), g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name, g.members) == \
            (E.NONE, "Empty", 0, 0, "simple", ())
        assert share_groups(w) == {"sg": "Empty"}
        assert (start_offset(w, "sg", t_id, 0), start_offset(w, "sg", t_id, 1)) == (4, 0)

        # DescribeShareGroupOffsets: every initialized partition; v1's lag = high watermark - start - delivered
        assert offsets(w, "sg") == (E.NONE, {("t", 0): (4, 0, 6, 0), ("t", 1): (0, 0, 0, 0)})
        assert offsets(w, "sg", version=0) == (E.NONE, {("t", 0): (4, 0, -1, 0), ("t", 1): (0, 0, -1, 0)})
        assert offsets(w, "sg", {"u": [0], "nope": [3], "t": [1]}) == (E.NONE, {
            ("u", 0): (-1, 0, -1, 0), ("nope", 3): (-1, 0, -1, 0), ("t", 1): (0, 0, 0, 0)})
        assert offsets(w, "sg", {}) == (E.NONE, {})

        # a member: ShareGroupDescribe shows it with its assignment; the changes need an empty group
        member = join(w, "sg", ["t", "u"])
        g = describe(w, "sg")
        assert g.group_state == "Stable" and g.group_epoch >= 1
        (m,) = g.members
        assert (m.member_id, m.client_id, m.client_host, sorted(m.subscribed_topic_names)) == \
            (member.member_id, "strata-test", "/127.0.0.1", ["t", "u"])
        assert {(tp.topic_name, tp.topic_id) for tp in m.assignment.topic_partitions} <= {("t", t_id), ("u", u_id)}
        assert alter(w, "sg", {"t": {0: 1}})[0] == E.NON_EMPTY_GROUP
        assert delete_offsets(w, "sg", ["t"])[0] == E.NON_EMPTY_GROUP
        assert delete_group(w, "sg") == E.NON_EMPTY_GROUP
        leave(w, "sg", member.member_id)
        assert describe(w, "sg").group_state == "Empty"

        # altering an existing group: at its epoch, over the start offsets it had
        code, result = alter(w, "sg", {"t": {0: 7}})
        assert (code, result) == (E.NONE, {("t", 0): 0})
        assert start_offset(w, "sg", t_id, 0) == 7

        # DeleteShareGroupOffsets: the state goes, then the group forgets the topic
        assert delete_offsets(w, "sg", ["t", "nope"]) == (E.NONE, {"t": E.NONE, "nope": E.UNKNOWN_TOPIC_OR_PARTITION})
        assert (start_offset(w, "sg", t_id, 0), start_offset(w, "sg", t_id, 1)) == (-1, -1)
        assert ("t", 0) not in offsets(w, "sg")[1]
        assert delete_offsets(w, "sg", ["t"]) == (E.NONE, {"t": E.UNKNOWN_TOPIC_OR_PARTITION})  # nothing left
        assert delete_offsets(w, "missing", ["t"])[0] == E.GROUP_ID_NOT_FOUND

        # the group's records outlive a restart
        assert alter(w, "sg", {"u": {1: 0}})[0] == E.NONE
        before = offsets(w, "sg")
    broker.restart()
    with WireClient(broker.bootstrap) as w:
        assert offsets(w, "sg") == before
        assert describe(w, "sg").group_state == "Empty"

        # DeleteGroups: the share-partition state first, then the group
        assert delete_group(w, "sg") == E.NONE
        assert start_offset(w, "sg", u_id, 1) == -1
        assert int(describe(w, "sg").error_code) == E.GROUP_ID_NOT_FOUND
        assert "sg" not in share_groups(w)
        assert delete_group(w, "sg") == E.GROUP_ID_NOT_FOUND


def test_other_kinds_of_group_are_not_share_groups(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as w:
        r = w.call(CG_HEARTBEAT, 1, group_id="cg", member_id=uuid.uuid4().hex[:22], member_epoch=0,
                   rebalance_timeout=30000, subscribed_topic_names=["u"], subscribed_topic_regex=None,
                   topic_partitions=[])
        assert int(r.error_code) == E.NONE
        g = describe(w, "cg")
        assert (int(g.error_code), g.error_message) == (E.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
        assert alter(w, "cg", {"u": {0: 0}})[0] == E.GROUP_ID_NOT_FOUND
        assert delete_offsets(w, "cg", ["u"])[0] == E.GROUP_ID_NOT_FOUND
        assert delete_group(w, "cg") == E.NON_EMPTY_GROUP  # the consumer group's own answer
        assert "cg" not in share_groups(w)


# -- the tool ----------------------------------------------------------------------------------------

def tool(b: BrokerProcess, *args: str, wrapper: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m strata share-groups`` (or ``bin/kafka-share-groups.sh``) ``--bootstrap-server B args``."""
    command = [str(REPO / "bin" / "kafka-share-groups.sh")] if wrapper else [sys.executable, "-m", "strata",
                                                                              "share-groups"]
    result = subprocess.run([*command, "--bootstrap-server", b.bootstrap, *args], capture_output=True, text=True,
                            timeout=60, cwd="/")
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    return result


def ok(b: BrokerProcess, *args: str, wrapper: bool = False) -> str:
    result = tool(b, *args, wrapper=wrapper)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result.stdout


def lines(fmt: str, *rows: tuple[object, ...]) -> str:
    """What ShareGroupCommand prints: ``printf("\\n" + fmt, row)`` per row, then ``println()``."""
    return "".join(("\n" + fmt) % row for row in rows) + "\n"


OFFSETS = "%-15s %-15s %-10s %-13s %s"
OFFSETS_VERBOSE = "%-15s %-15s %-10s %-13s %-13s %s"
RESET = "%-15s %-15s %-10s %s"
LISTING = "%-15s %s"  # --list --state, and --delete-offsets' TOPIC STATUS


def test_share_groups_tool(broker: BrokerProcess) -> None:
    b = broker
    assert "cli-g" not in ok(b, "--list").split()

    # --reset-offsets: a plan, printed; --execute creates the group and sets it
    plan = lines(RESET, ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), ("cli-g", "cli-t", 0, 3),
                 ("cli-g", "cli-t", 1, 3))
    assert ok(b, "--reset-offsets", "--group", "cli-g", "--topic", "cli-t", "--to-latest", "--dry-run") == plan
    assert "cli-g" not in ok(b, "--list").split()
    assert ok(b, "--reset-offsets", "--group", "cli-g", "--topic", "cli-t", "--to-latest", "--execute") == plan
    assert ok(b, "--reset-offsets", "--group", "cli-g", "--topic", "cli-t:1", "--to-earliest", "--execute",
              wrapper=True) == lines(RESET, ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), ("cli-g", "cli-t", 1, 0))

    # --list, --describe (offsets, state, members)
    assert "cli-g" in ok(b, "--list", wrapper=True).splitlines()
    listed = ok(b, "--list", "--state", "empty").splitlines()
    assert listed[0] == LISTING % ("GROUP", "STATE") and LISTING % ("cli-g", "Empty") in listed
    assert ok(b, "--describe", "--group", "cli-g") == lines(
        OFFSETS, ("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"), ("cli-g", "cli-t", 0, 3, 0),
        ("cli-g", "cli-t", 1, 0, 3))
    assert ok(b, "--describe", "--group", "cli-g", "--offsets", "--verbose") == lines(
        OFFSETS_VERBOSE, ("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"),
        ("cli-g", "cli-t", 0, 0, 3, 0), ("cli-g", "cli-t", 1, 0, 0, 3))
    coordinator = f"127.0.0.1:{b.port}  (1)"
    state = f"%-15s %-{max(25, len(coordinator))}s %-15s "
    result = tool(b, "--describe", "--group", "cli-g", "--state", "--verbose")
    assert result.returncode == 0 and result.stdout == lines(
        state + "%-12s %-17s %s", ("GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"),
        ("cli-g", coordinator, "Empty", 0, 0, 0))
    assert "Share group 'cli-g' has no active members." in result.stderr
    assert ok(b, "--describe", "--group", "cli-g", "--members") == ""  # empty: nothing but the note

    with WireClient(b.bootstrap) as w:
        member = join(w, "cli-g", ["cli-t"])
        w.call(SHARE_HEARTBEAT, 1, group_id="cli-g", member_id=member.member_id, member_epoch=member.member_epoch,
               rack_id=None, subscribed_topic_names=None)
        m = describe(w, "cli-g").members[0]
        partitions = sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions)
        assignment = "cli-t:" + ",".join(map(str, partitions)) if partitions else ""
        members = f"%-15s %-{max(15, len(m.member_id))}s %-15s %-15s %-12s "
        assert ok(b, "--describe", "--group", "cli-g", "--members", "--verbose") == lines(
            members + "%-13s %s", ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH",
                                   "ASSIGNMENT"),
            ("cli-g", m.member_id, "/127.0.0.1", "strata-test", len(partitions), m.member_epoch, assignment))
        assert ok(b, "--describe", "--group", "cli-g", "--state") == lines(
            state + "%s", ("GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"), ("cli-g", coordinator, "Stable", 1))

        # with a member: no reset, no offset deletion, no deletion
        refused = tool(b, "--reset-offsets", "--group", "cli-g", "--all-topics", "--to-earliest", "--execute")
        assert (refused.returncode, refused.stderr.strip()) == (1, "Share group 'cli-g' is not empty.")
        refused = tool(b, "--delete-offsets", "--group", "cli-g", "--topic", "cli-t")
        assert refused.returncode == 1
        assert refused.stdout == "\nError: The group is not empty.\n" + lines(
            LISTING, ("TOPIC", "STATUS"), ("cli-t", "Error: The group is not empty."))
        refused = tool(b, "--delete", "--group", "cli-g", "--group", "not-a-group")
        assert refused.returncode == 1
        assert refused.stdout.splitlines() == [
            "", "Error: Deletion of some share groups failed:",
            "* Group 'cli-g' could not be deleted due to: org.apache.kafka.common.errors.GroupNotEmptyException: "
            "Share group 'cli-g' is not EMPTY.",
            "* Group 'not-a-group' could not be deleted due to: java.lang.IllegalArgumentException: Group "
            "'not-a-group' is not a share group."]
        leave(w, "cli-g", member.member_id)

    # --all-topics resets every share-partition the group has; --delete-offsets; --delete
    assert ok(b, "--reset-offsets", "--group", "cli-g", "--all-topics", "--to-earliest", "--execute") == lines(
        RESET, ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), ("cli-g", "cli-t", 0, 0), ("cli-g", "cli-t", 1, 0))
    assert ok(b, "--delete-offsets", "--group", "cli-g", "--topic", "cli-t") == lines(
        LISTING, ("TOPIC", "STATUS"), ("cli-t", "Successful"))
    assert ok(b, "--describe", "--group", "cli-g") == "\nShare group 'cli-g' has no offset information.\n"
    assert ok(b, "--delete", "--group", "cli-g", wrapper=True) == \
        "Deletion of requested share groups ('cli-g') was successful.\n"
    gone = tool(b, "--describe", "--group", "cli-g")
    assert (gone.returncode, gone.stdout) == (1, "\nError: Executing share group command failed due to "
                                                 "org.apache.kafka.common.errors.GroupIdNotFoundException: Group cli-g "
                                                 "not found.\n")


@pytest.mark.parametrize(("args", "message"), [
    (["--describe"], "Option [describe] takes one of these options: [all-groups], [group]"),
    (["--describe", "--group", "g", "--members", "--state"],
     "Option [describe] takes at most one of these options: [members], [offsets], [state]"),
    (["--list", "--members"], "Option(s) [members] are unavailable given other options on the command line"),
    (["--delete", "--group", "g", "--all-groups"], "Option [delete] takes either [group] or [all-groups], not both."),
    (["--delete-offsets", "--group", "g"], "Option [delete-offsets] takes the following options: [group], [topic]"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-latest"],
     "Option [reset-offsets] takes the option: [execute] or [dry-run]"),
    (["--reset-offsets", "--group", "g", "--to-latest", "--dry-run"],
     "Option [reset-offsets] takes one of these options: [all-topics], [topic]"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--dry-run"],
     "Option [reset-offsets] takes one of these options: [to-datetime], [to-earliest], [to-latest]"),
    (["--list", "--state", "rebalancing"], "Invalid state list 'rebalancing'. Valid states are: Empty, Stable, Dead"),
    (["--all-groups"], "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                       "--delete-offsets."),
])
def test_share_groups_tool_checks_its_options_as_kafka(broker: BrokerProcess, args: list[str], message: str) -> None:
    result = tool(broker, *args)
    assert result.returncode == 1 and result.stderr.splitlines()[0] == message, result.stderr


# -- with confluent-kafka's ShareConsumer --------------------------------------------------------------

@pytest.fixture
def share_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", {**SHARE_BROKER_PROPS, **PROPS}).start()
    try:
        with WireClient(b.bootstrap) as w:
            ensure_topic(w, "q")
        p = Producer({"bootstrap.servers": b.bootstrap, "log_level": 3})
        for i in range(10):
            p.produce("q", value=b"r%d" % i, partition=0)
        assert p.flush(30) == 0
        set_group_configs(b.bootstrap, "real", share_auto_offset_reset="earliest")
        yield b
    finally:
        b.stop()


def consume_all(b: BrokerProcess, timeout_s: float = 60) -> list[int]:
    """A ShareConsumer of group ``real`` reads and acknowledges partition 0's ten records, then leaves."""
    c = share_consumer(b.bootstrap, "real", "q")
    try:
        got = sorted(m.offset() for m in poll_until(c, lambda ms: len(ms) >= 10, timeout_s) if m.partition() == 0)
        c.commit_sync(30)  # the implicit acknowledgements, written before the consumer goes
    finally:
        c.close()
    wait_until("the consumer gone", lambda: tool(b, "--describe", "--group", "real", "--state").stdout.split()[-2:]
               == ["Empty", "0"])
    return got


def test_a_share_consumer_seen_by_the_tool(share_broker: BrokerProcess) -> None:
    b = share_broker
    c = share_consumer(b.bootstrap, "real", "q")
    try:
        assert sorted(m.offset() for m in poll_until(c, lambda ms: len(ms) >= 10)) == list(range(10))
        c.commit_sync(30)
        with WireClient(b.bootstrap) as w:
            (m,) = describe(w, "real").members
            _, found = offsets(w, "real")
        assert found[("q", 0)][2:] == (0, E.NONE)  # all delivered and acknowledged: no lag
        out = ok(b, "--describe", "--group", "real", "--members").splitlines()
        assert out[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert out[2].split() == ["real", m.member_id, "/127.0.0.1", m.client_id, "2", "q:0,1"]
        refused = tool(b, "--reset-offsets", "--group", "real", "--all-topics", "--to-earliest", "--execute")
        assert (refused.returncode, refused.stderr.strip()) == (1, "Share group 'real' is not empty.")
    finally:
        c.close()
    wait_until("the group empty", lambda: ok(b, "--list", "--state").splitlines()[1:] == [LISTING % ("real", "Empty")])


def test_a_reset_is_what_the_next_share_consumer_reads(share_broker: BrokerProcess) -> None:
    b = share_broker
    assert consume_all(b) == list(range(10))
    ok(b, "--reset-offsets", "--group", "real", "--all-topics", "--to-earliest", "--execute")
    with WireClient(b.bootstrap) as w:
        assert offsets(w, "real")[1][("q", 0)][:3] == (0, 0, 10)
    assert consume_all(b, timeout_s=15) == list(range(10))  # delivered again from the new start offset
