"""strata.diskless.placement: the client's rack from ``client.id`` (Inkless's rules) and the broker chosen in it."""

from __future__ import annotations

import pytest

from strata.diskless.placement import (
    NO_BROKER,
    client_az,
    metadata_leader,
    preferred_read_replica,
    rack_replica,
)

# six brokers, two per rack
RACKS = {1: "az-a", 2: "az-b", 3: "az-c", 4: "az-a", 5: "az-b", 6: "az-c"}


@pytest.mark.parametrize("client_id", [
    "diskless_az=az1", "app,diskless_az=az1", "app, diskless_az=az1", "diskless_az=az1,app=x",
    "app|diskless_az=az1", "app| diskless_az=az1", "diskless_az=az1|app", "a=b,diskless_az=az1|c=d",
    "a=b|diskless_az=az1,c=d", "a=b, c=d|diskless_az=az1|e=f", "app diskless_az=az1",
])
def test_the_token_anywhere_after_a_separator(client_id: str) -> None:
    assert client_az(client_id) == "az1"


@pytest.mark.parametrize("client_id", [
    None, "", "app", "appdiskless_az=az1", "diskless_az=", "app,diskless_az=", "diskless_az=|app",
    "app:diskless_az=az1", "diskles_az=az1",
])
def test_no_rack(client_id: str | None) -> None:
    assert client_az(client_id) is None


def test_the_first_token_wins() -> None:
    assert client_az("diskless_az=az1,diskless_az=az2") == "az1"


@pytest.mark.parametrize(("client_id", "known", "expected"), [
    ("my-app,diskless_az=eu-west-1a", {"eu-west-1a", "eu-west-1b"}, "eu-west-1a"),
    ("connect,diskless_az=use1-az2-575969bf-aae2-47c5-98d6-8750ef0536f8", {"use1-az2", "use1-az4"}, "use1-az2"),
    ("connect,diskless_az=eu-west-1a-offsets", {"eu-west-1a", "eu-west-1b"}, "eu-west-1a"),
    ("app,diskless_az=us-east-1a-suffix", {"us", "us-east", "us-east-1a"}, "us-east-1a"),  # longest prefix
    ("mm,diskless_az=use1-az2|source->target|MirrorSourceConnector-0", {"use1-az2"}, "use1-az2"),
    ("app,diskless_az=unknown", {"eu-west-1a"}, None),
    ("app,diskless_az=eu-west-kaboom", {"eu-west-1a"}, None),
    ("app,diskless_az=use1-az2-suffix", set(), "use1-az2-suffix"),  # nothing to check against: as given
])
def test_checked_against_the_known_racks(client_id: str, known: set[str], expected: str | None) -> None:
    assert client_az(client_id, known) == expected


def test_no_rack_or_an_unknown_rack_keeps_the_classic_leader() -> None:
    for rack in (None, "", "az-z"):
        assert metadata_leader("t", 0, 3, (3, 1, 2), RACKS, rack) == 3


def test_the_only_replica_in_the_rack() -> None:
    for p in range(12):
        assert metadata_leader("t", p, 3, (3, 1, 2), RACKS, "az-b") == 2
        assert metadata_leader("t", p, 3, (3, 1, 2), RACKS, "az-a") == 1
        assert metadata_leader("t", p, 3, (3, 1, 2), RACKS, "az-c") == 3


def test_several_replicas_in_the_rack_share_its_partitions() -> None:
    replicas = (1, 2, 3, 4, 5, 6)
    chosen = [metadata_leader("t", p, 1, replicas, RACKS, "az-b") for p in range(10)]
    assert set(chosen) == {2, 5}
    assert chosen.count(2) == chosen.count(5) == 5  # consecutive partitions alternate
    assert all(a != b for a, b in zip(chosen, chosen[1:], strict=False))
    # deterministic, whatever order the replicas and brokers come in
    shuffled = {k: RACKS[k] for k in (6, 2, 4, 5, 1, 3)}
    assert chosen == [metadata_leader("t", p, 1, (5, 3, 2, 6, 1, 4), shuffled, "az-b") for p in range(10)]


def test_topics_do_not_all_start_on_the_same_broker() -> None:
    firsts = {rack_replica(f"topic-{i}", 0, (1, 2, 3, 4, 5, 6), RACKS, "az-b") for i in range(20)}
    assert firsts == {2, 5}


def test_a_leader_down_still_reads_from_a_live_replica_in_the_rack() -> None:
    assert metadata_leader("t", 0, -1, (3, 1, 2), RACKS, "az-b") == 2
    # the rack's replica down too: no live leader to give
    live = {k: v for k, v in RACKS.items() if k not in (2, 3)}
    assert metadata_leader("t", 0, -1, (3, 1, 2), live, "az-b") == -1


def test_a_replica_down_is_never_chosen() -> None:
    live = {k: v for k, v in RACKS.items() if k != 2}
    assert {metadata_leader("t", p, 1, (1, 2, 5), live, "az-b") for p in range(6)} == {5}
    assert metadata_leader("t", 0, 1, (1, 2, 3), live, "az-b") == 1  # none left in the rack: the classic leader


def test_non_replica_brokers_are_never_chosen() -> None:
    # broker 5 is in az-b and live, but no replica of the partition
    assert {metadata_leader("t", p, 1, (1, 2, 3), RACKS, "az-b") for p in range(12)} == {2}
    assert metadata_leader("t", 0, 1, (1, 3, 4), RACKS, "az-b") == 1
    assert {rack_replica("t", p, (1, 3, 4), RACKS, "az-a") for p in range(12)} == {1, 4}


def test_preferred_read_replica() -> None:
    replicas = (1, 2, 3)
    # this broker (1, az-a) serves a consumer without a rack, in its own rack, or in a rack without a replica
    assert preferred_read_replica("t", 0, replicas, RACKS, None, 1) == NO_BROKER
    assert preferred_read_replica("t", 0, replicas, RACKS, "", 1) == NO_BROKER
    assert preferred_read_replica("t", 0, replicas, RACKS, "az-a", 1) == NO_BROKER
    assert preferred_read_replica("t", 0, replicas, RACKS, "az-z", 1) == NO_BROKER
    # and sends one in az-b to the replica there, the broker Metadata gives a diskless_az=az-b client
    for p in range(6):
        assert preferred_read_replica("t", p, replicas, RACKS, "az-b", 1) == 2
        assert preferred_read_replica("t", p, (1, 2, 5), RACKS, "az-b", 1) == metadata_leader(
            "t", p, 1, (1, 2, 5), RACKS, "az-b")
    # a broker in the rack but not a replica serves it rather than send the consumer elsewhere in its rack
    assert preferred_read_replica("t", 0, replicas, RACKS, "az-b", 5) == NO_BROKER
    # the rack's replica down: served here
    live = {k: v for k, v in RACKS.items() if k != 2}
    assert preferred_read_replica("t", 0, replicas, live, "az-b", 1) == NO_BROKER
    # a broker without a rack sends a consumer to its rack
    assert preferred_read_replica("t", 0, (7, 2), {**RACKS, 7: None}, "az-b", 7) == 2
