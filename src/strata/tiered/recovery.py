"""Topic recovery from the bucket (issue 29, part 4): what a new cluster needs to serve a topic whose cluster is
gone, read from the bucket alone (``docs/bucket-format.md``).

A topic created with ``remote.recovery=true`` comes back as it was: its id (the bucket's keys and every segment's
metadata name it), its partition count and config overrides (the topic manifest), and every live segment of each
partition (the partition's manifest chain, each segment's manifest checked against the SHA-256 the chain
recorded). :func:`plan_recovery` reads all that; :func:`publish` writes the segments into the new cluster's
``__remote_log_metadata`` (COPY_SEGMENT_STARTED, then COPY_SEGMENT_FINISHED with the v2 marker), after which the
partitions' leaders start their logs where the bucket ends (``RemoteLogManager.recover_leader_log``).

Why the leader epoch matters: every restored batch carries the leader epoch it was written in, and reads look
segments up by epoch, so each restored log keeps the old epochs below its end and the new leaders must lead in a
later epoch (``initial_leader_epoch``): an epoch history that went backwards would make the new leader's first
epoch swallow the old ones.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from strata.log.checkpoints import topic_id_from_str as str_to_uuid
from strata.tiered.api import (
    ObjectStore,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    TopicIdPartition,
)
from strata.tiered.storage.common import MANIFEST_SUFFIX
from strata.tiered.storage.manifests import (
    TOPIC_MANIFEST_NAME,
    ChainSegment,
    TopicManifest,
    read_chain,
    sha256_hex,
)
from strata.tiered.storage.object_format import V2_MARKER, SegmentManifest

__all__ = ["RecoveryError", "RecoveryPlan", "find_topic_manifests", "plan_recovery", "publish"]

log = logging.getLogger("strata.tiered.recovery")
_ID = r"[A-Za-z0-9_-]{22}"


class RecoveryError(Exception):
    """The bucket cannot restore the topic (no manifest of it, an unreadable one); the message says why."""


@dataclass(slots=True)
class RecoveryPlan:
    manifest: TopicManifest
    segments: dict[int, list[RemoteLogSegmentMetadata]] = field(default_factory=dict)  # partition -> in chain order
    skipped: list[str] = field(default_factory=list)  # what could not be restored, and why

    @property
    def topic_id(self) -> uuid.UUID:
        return str_to_uuid(self.manifest.topic_id)

    @property
    def initial_leader_epoch(self) -> int:
        """One above every epoch of every restored segment (0 when there is none)."""
        epochs = [e for mds in self.segments.values() for md in mds for e in md.segment_leader_epochs]
        return max(epochs) + 1 if epochs else 0

    @property
    def segment_count(self) -> int:
        return sum(len(v) for v in self.segments.values())

    def describe(self) -> str:
        ends = {p: max(md.end_offset for md in mds) for p, mds in self.segments.items() if mds}
        return (f"topic {self.manifest.topic} (id {self.manifest.topic_id}, {self.manifest.partitions} partitions): "
                f"{self.segment_count} segments, offsets up to "
                + (", ".join(f"{p}:{e}" for p, e in sorted(ends.items())) or "none"))


def find_topic_manifests(store: ObjectStore, topic: str) -> list[TopicManifest]:
    """Every topic manifest of ``topic`` in the bucket (a name deleted and created again has several ids),
    the latest written first."""
    pattern = re.compile(rf"{re.escape(topic)}-(?P<topic_id>{_ID})/{re.escape(TOPIC_MANIFEST_NAME)}")
    found = []
    for info in store.list_objects(f"{topic}-"):
        if pattern.fullmatch(info.key) is None:
            continue
        try:
            manifest = TopicManifest.from_bytes(store.get_object_range(info.key, 0, 1 << 30))
        except (ValueError, RemoteResourceNotFoundError) as e:
            raise RecoveryError(f"the topic manifest {info.key} cannot be read: {e}") from None
        if manifest.topic == topic:
            found.append(manifest)
    return sorted(found, key=lambda m: m.timestamp_ms, reverse=True)


def all_topic_manifests(store: ObjectStore) -> list[TopicManifest]:
    """The latest topic manifest of every topic in the bucket (``strata bucket restore``)."""
    pattern = re.compile(rf"(?P<topic>[^/]+)-(?P<topic_id>{_ID})/{re.escape(TOPIC_MANIFEST_NAME)}")
    latest: dict[str, TopicManifest] = {}
    for info in store.list_objects(""):
        if pattern.fullmatch(info.key) is None:
            continue
        try:
            manifest = TopicManifest.from_bytes(store.get_object_range(info.key, 0, 1 << 30))
        except (ValueError, RemoteResourceNotFoundError) as e:
            log.warning("skipping the unreadable topic manifest %s: %s", info.key, e)
            continue
        if manifest.topic not in latest or manifest.timestamp_ms > latest[manifest.topic].timestamp_ms:
            latest[manifest.topic] = manifest
    return sorted(latest.values(), key=lambda m: m.topic)


def plan_recovery(store: ObjectStore, topic: str, topic_id: str | None = None,
                  progress: Callable[[str], None] | None = None) -> RecoveryPlan:
    """Read what restoring ``topic`` needs; ``topic_id`` picks one of several incarnations (else the latest)."""
    manifests = find_topic_manifests(store, topic)
    if topic_id is not None:
        manifests = [m for m in manifests if m.topic_id == topic_id]
    if not manifests:
        raise RecoveryError(f"the remote store holds no topic manifest of topic '{topic}'"
                            + (f" with id {topic_id}" if topic_id else "")
                            + ": nothing to recover (only format v2 buckets describe their topics)")
    if len(manifests) > 1:
        log.warning("the bucket holds %d incarnations of topic %s (ids %s): restoring the latest, %s", len(manifests),
                    topic, ", ".join(m.topic_id for m in manifests), manifests[0].topic_id)
    plan = RecoveryPlan(manifests[0])
    tid = str_to_uuid(plan.manifest.topic_id)
    for partition in range(plan.manifest.partitions):
        tip = TopicIdPartition(tid, topic, partition)
        plan.segments[partition] = _partition_segments(store, tip, plan.skipped)
        if progress is not None:
            progress(f"{topic}-{partition}: {len(plan.segments[partition])} segments")
    return plan


def _partition_segments(store: ObjectStore, tip: TopicIdPartition,
                        skipped: list[str]) -> list[RemoteLogSegmentMetadata]:
    view = read_chain(store, tip)
    for key, why in view.breaks:
        skipped.append(f"{key}: chain break ({why}); the live segments are taken as the chain has them")
    out = []
    for seg in view.live.values():
        try:
            out.append(chained_segment_metadata(store, tip, seg))
        except ValueError as e:
            skipped.append(str(e))
    return out


def chained_segment_metadata(store: ObjectStore, tip: TopicIdPartition, seg: ChainSegment) -> RemoteLogSegmentMetadata:
    """A chained segment's metadata (COPY_SEGMENT_STARTED), from its manifest checked against the chain's SHA-256;
    ``ValueError`` saying why when its manifest is missing, different or unreadable."""
    key = f"{seg.stem(tip)}.{MANIFEST_SUFFIX}"
    try:
        data = store.get_object_range(key, 0, 1 << 30)
    except RemoteResourceNotFoundError:
        raise ValueError(f"{key}: chained, but its manifest is not in the bucket; offsets {seg.start_offset}-"
                         f"{seg.end_offset} are left out") from None
    if sha256_hex(data) != seg.manifest_sha256:
        raise ValueError(f"{key}: not the manifest its chain recorded (SHA-256 differs); offsets "
                         f"{seg.start_offset}-{seg.end_offset} are left out")
    try:
        m = SegmentManifest.from_bytes(data)
    except Exception as e:  # noqa: BLE001 - any parse failure: this segment is left out, the rest is not
        raise ValueError(f"{key}: {e}") from None
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, str_to_uuid(m.segment_id)), m.start_offset, m.end_offset, m.max_timestamp_ms,
        m.broker_id, m.event_timestamp_ms, m.segment_size_in_bytes, dict(m.segment_leader_epochs),
        RemoteLogSegmentState.COPY_SEGMENT_STARTED, None, m.txn_idx_empty)


def publish(rlmm: RemoteLogMetadataManager, segments: Iterable[RemoteLogSegmentMetadata], broker_id: int,
            now_ms: int) -> int:
    """Write each segment into ``__remote_log_metadata`` as an upload that finished (v2); how many."""
    n = 0
    for md in segments:
        rlmm.add_remote_log_segment_metadata(md)
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, now_ms, V2_MARKER, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, broker_id))
        n += 1
    return n


# -- committed offsets of consumer groups (offsets.remote.upload.interval.ms) ----------------------------------

OFFSETS_PREFIX = "consumer-offsets/"
OFFSETS_FORMAT = "strata.consumer-offsets"
GroupOffsets = dict[str, dict[tuple[str, int], tuple[int, str]]]  # group -> (topic, partition) -> (offset, metadata)


def offsets_key(partition: int) -> str:
    """``consumer-offsets/{partition:05d}.json``: one object per ``__consumer_offsets`` partition."""
    return f"{OFFSETS_PREFIX}{partition:05d}.json"


def encode_offsets(partition: int, groups: GroupOffsets, broker_id: int, timestamp_ms: int) -> bytes:
    return json.dumps({
        "format": OFFSETS_FORMAT, "version": 1, "partition": partition, "broker_id": broker_id,
        "timestamp_ms": timestamp_ms,
        "groups": {g: [{"topic": t, "partition": p, "offset": o, "metadata": m}
                       for (t, p), (o, m) in sorted(offsets.items())] for g, offsets in sorted(groups.items())},
    }, separators=(",", ":")).encode()


def read_offsets(store: ObjectStore) -> tuple[GroupOffsets, list[str]]:
    """Every uploaded group's committed offsets (a group found in two objects, as when its coordinator moved
    between uploads: the later upload's), and what could not be read."""
    latest: dict[str, tuple[int, dict[tuple[str, int], tuple[int, str]]]] = {}
    problems: list[str] = []
    for info in store.list_objects(OFFSETS_PREFIX):
        try:
            d = json.loads(bytes(store.get_object_range(info.key, 0, 1 << 30)))
            if d.get("format") != OFFSETS_FORMAT or d.get("version") != 1:
                raise ValueError("not a consumer offsets object of version 1")
            ts = int(d["timestamp_ms"])
            for group, entries in d["groups"].items():
                if group not in latest or latest[group][0] < ts:
                    latest[group] = (ts, {(str(e["topic"]), int(e["partition"])): (int(e["offset"]),
                                                                                  str(e.get("metadata") or ""))
                                          for e in entries})
        except RemoteResourceNotFoundError:
            continue
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            problems.append(f"{info.key}: {e}")
    return {g: offsets for g, (_ts, offsets) in latest.items()}, problems
