"""Which broker a client should read a diskless partition from: one in the client's rack (AZ).

A diskless partition has no leader to go to: any broker serves it, from the coordinator and the store, and
each replica also serves its consolidated local log and the remote tier below it. What costs money in a
cloud is the traffic between zones, so a client that says where it runs is sent to a *replica* in its
zone, if the partition has a live one there. Replicas only: a non-replica broker cannot serve offsets below
the WAL's start (pruned after tiering) and has no warm local copy.

Two ways for a client to say its rack, both matched against ``broker.rack``:

* Inkless's convention, ``diskless_az=<rack>`` inside ``client.id`` (``client.id=myapp,diskless_az=use1-az1``),
  which works with every client and every API (Metadata carries no rack: KIP-1163 adds one); it makes the
  Metadata answer name a replica in that rack as the partition's leader;
* a consumer's ``client.rack``, sent in Fetch v11+ as ``rack_id`` (KIP-392): a broker outside that rack
  answers ``preferred_read_replica``, as Kafka's ``RackAwareReplicaSelector`` does for follower fetching.

The choice is deterministic (every broker gives every client of a rack the same answer, so a partition's
reads in a rack go to one broker and its object cache) and spreads a topic's consecutive partitions over
the matching replicas. Pure functions, no I/O.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Collection, Mapping, Sequence

NO_BROKER = -1

# Inkless's ClientAZExtractor: the token starts the client id or follows a space, comma or pipe (MirrorMaker
# appends ``|source->target|...`` to client ids); the value runs to the next separator or '='.
_CLIENT_AZ = re.compile(r"(?:^|[ ,|])diskless_az=([^=,| ]*)")


def client_az(client_id: str | None, known_racks: Collection[str] = ()) -> str | None:
    """The rack a ``client.id`` names with ``diskless_az=``, or None (no token, or an empty value).

    With ``known_racks`` (the live brokers' racks) a value that is not one of them is cut back at its last
    '-' until it is (``use1-az2-configs`` -> ``use1-az2``: Kafka Connect appends suffixes to client ids),
    the longest known prefix winning, else None. Without known racks the value is taken as it is."""
    if not client_id:
        return None
    match = _CLIENT_AZ.search(client_id)
    if match is None or not match.group(1):
        return None
    az = match.group(1)
    if not known_racks or az in known_racks:
        return az
    cut = az.rfind("-")
    while cut > 0:
        az = az[:cut]
        if az in known_racks:
            return az
        cut = az.rfind("-")
    return None


def rack_replica(topic: str, partition: int, replicas: Sequence[int], racks: Mapping[int, str | None],
                 rack: str | None) -> int:
    """A live replica of ``topic``-``partition`` whose rack is ``rack``, or NO_BROKER.

    ``racks``: every *live* broker's rack (None when it has none); a replica missing from it is down.
    Among several matching replicas the choice rotates with the partition index, offset by a stable hash of
    the topic name so that every topic's partition 0 does not land on the same broker."""
    if not rack:
        return NO_BROKER
    candidates = sorted({r for r in replicas if r in racks and racks[r] == rack})
    if not candidates:
        return NO_BROKER
    return candidates[(zlib.crc32(topic.encode()) + partition) % len(candidates)]


def metadata_leader(topic: str, partition: int, leader: int, replicas: Sequence[int],
                    racks: Mapping[int, str | None], rack: str | None) -> int:
    """The leader a Metadata answer gives a client in ``rack`` for a diskless partition: a live replica in
    that rack when there is one (even with the classic leader down: a diskless partition needs no leader to
    be read or written), else the classic ``leader`` (-1 when it has none)."""
    chosen = rack_replica(topic, partition, replicas, racks, rack)
    return leader if chosen == NO_BROKER else chosen


def preferred_read_replica(topic: str, partition: int, replicas: Sequence[int], racks: Mapping[int, str | None],
                           client_rack: str | None, local_id: int) -> int:
    """KIP-392 for a diskless partition: the replica a consumer in ``client_rack`` should fetch from instead of
    this broker (``local_id``), or NO_BROKER to serve it here: no rack given, this broker in it, or no live
    replica in it."""
    if not client_rack or racks.get(local_id) == client_rack:
        return NO_BROKER
    chosen = rack_replica(topic, partition, replicas, racks, client_rack)
    return NO_BROKER if chosen == local_id else chosen
