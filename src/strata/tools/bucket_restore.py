"""``strata bucket restore`` (every topic of a bucket re-created on a cluster, and the groups' offsets), ``unmount``
and ``mount`` (one topic moved between clusters through the bucket).

Each topic the bucket describes (its latest topic manifest; ``docs/bucket-format.md``) is created on the cluster
with ``remote.recovery=true``, which makes the cluster adopt the topic's id, partitions and configs and serve
every tiered record (see :mod:`strata.tiered.recovery`). Once every partition's log starts where the bucket
ends, the committed offsets the group coordinators copied to the bucket (``offsets.remote.upload.interval.ms``)
are committed again, each at most the partition's end: records acknowledged but never tiered are gone with
the old cluster, and a group past them resumes at the end instead of failing with an out-of-range offset.

A topic that exists on the cluster with the bucket's id was restored before (skipped: the command can be run
again after a failure); one with another id is a conflict (reported, not touched).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from strata.tiered.api import ObjectStore
from strata.tiered.recovery import RecoveryError, all_topic_manifests, plan_recovery, read_offsets
from strata.tools.admin import RESOURCE_TOPIC

RESTORE_WAIT_S = 120.0


@dataclass(slots=True)
class RestoreReport:
    restored: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already restored
    groups: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def restore(store: ObjectStore, admin: Any, *, topics: Sequence[str] = (), replication_factor: int = -1,
            dry_run: bool = False, out: TextIO = sys.stdout, wait_s: float = RESTORE_WAIT_S) -> RestoreReport:
    """See the module doc; ``admin`` is a :class:`strata.tools.admin.KafkaAdmin` of the target cluster."""
    report = RestoreReport()
    manifests = [m for m in all_topic_manifests(store) if not topics or m.topic in topics]
    missing = sorted(set(topics) - {m.topic for m in manifests})
    report.problems += [f"{t}: the bucket holds no topic manifest of it" for t in missing]
    existing = admin.cluster().topics
    ends: dict[tuple[str, int], int] = {}  # what each restored partition's log must reach
    for m in manifests:
        have = existing.get(m.topic)
        try:
            plan = plan_recovery(store, m.topic, m.topic_id)
        except RecoveryError as e:
            report.problems.append(f"{m.topic}: {e}")
            continue
        for p, segments in plan.segments.items():
            ends[(m.topic, p)] = max((md.end_offset + 1 for md in segments), default=0)
        if have is not None:
            if str(have.topic_id) == str(plan.topic_id):
                report.skipped.append(m.topic)
                print(f"{m.topic}: restored already (topic id {m.topic_id})", file=out)
            else:
                report.problems.append(f"{m.topic}: the cluster has a topic of that name with another id "
                                       f"({have.topic_id}, the bucket's is {m.topic_id}); not restored")
                for p in range(m.partitions):
                    ends.pop((m.topic, p), None)
            continue
        print(f"{m.topic}: {'would restore' if dry_run else 'restoring'} {plan.describe()}", file=out)
        if dry_run:
            continue
        try:
            admin.create_topic(m.topic, -1, replication_factor, None, {"remote.recovery": "true"})
            report.restored.append(m.topic)
        except Exception as e:  # noqa: BLE001 - AdminError, unreachable: reported, the other topics go on
            report.problems.append(f"{m.topic}: {e}")
            for p in range(m.partitions):
                ends.pop((m.topic, p), None)
    if dry_run:
        return report
    _wait_restored(admin, ends, wait_s, report)
    groups, problems = read_offsets(store)
    report.problems += problems
    for group, offsets in sorted(groups.items()):
        commit = {tp: min(offset, ends[tp]) for tp, (offset, _meta) in offsets.items() if tp in ends}
        if not commit:
            continue
        try:
            admin.commit_offsets(group, commit)
        except Exception as e:  # noqa: BLE001 - a group active meanwhile, a coordinator away: reported
            report.problems.append(f"group {group}: {e}")
            continue
        report.groups.append(group)
        print(f"group {group}: committed offsets of {len(commit)} partitions", file=out)
    return report


def _wait_restored(admin: Any, ends: dict[tuple[str, int], int], wait_s: float, report: RestoreReport) -> None:
    """Until every restored partition's log ends at least where the bucket does (its leader restored it)."""
    pending = {tp for tp, end in ends.items() if end > 0}
    deadline = time.monotonic() + wait_s
    while pending and time.monotonic() < deadline:
        try:
            now = admin.offsets(pending, -1)
        except Exception:  # noqa: BLE001 - leaders still moving in: asked again
            now = {}
        pending = {tp for tp in pending if (now.get(tp) or 0) < ends[tp]}
        if pending:
            time.sleep(0.2)
    for topic, partition in sorted(pending):
        report.problems.append(f"{topic}-{partition}: not restored after {wait_s:.0f} s (its log does not reach "
                               f"offset {ends[(topic, partition)]}); its groups' offsets are not committed")
        ends.pop((topic, partition), None)


# -- unmount / mount: a topic moved between clusters through the bucket ----------------------------------------

UNMOUNT_WAIT_S = 300.0


def unmount(admin: Any, topic: str, *, wait_s: float = UNMOUNT_WAIT_S, out: TextIO = sys.stdout,
            progress_interval_s: float = 2.0) -> None:
    """Set ``remote.unmount=true`` (produce refused, the active segments roll and upload), wait until every
    record of every partition is in the bucket, then delete the topic from the cluster: its remote data stays
    (``docs/remote-storage.md``). Raises ``RuntimeError`` naming the partitions that did not finish uploading."""
    state = admin.cluster([topic]).topics.get(topic)
    if state is None:
        raise RuntimeError(f"topic '{topic}' does not exist")
    admin.incremental_alter_configs(RESOURCE_TOPIC, topic, {"remote.unmount": "true"}, [])
    partitions = [(topic, p.partition) for p in state.partitions]
    deadline = time.monotonic() + wait_s
    last_print = 0.0
    while True:
        ends = admin.offsets(partitions, -1)
        tiered = admin.offsets(partitions, -5)
        # uploaded through the end (or empty: nothing to upload)
        left = [tp for tp in partitions if (ends.get(tp) or 0) > 0 and (tiered.get(tp) or -1) + 1 < (ends[tp] or 0)]
        if not left:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(left)} partitions of '{topic}' are not all uploaded after {wait_s:.0f} s: "
                               + ", ".join(f"{t}-{p} (tiered to {tiered.get((t, p))}, ends at {ends.get((t, p))})"
                                           for t, p in left[:5]))
        if time.monotonic() - last_print >= progress_interval_s:
            last_print = time.monotonic()
            print(f"... {len(partitions) - len(left)}/{len(partitions)} partitions of {topic} uploaded", file=out)
        time.sleep(0.2)
    admin.delete_topics([topic])
    print(f"{topic}: unmounted ({len(partitions)} partitions uploaded; the topic is deleted from the cluster, its "
          "data stays in the remote store)", file=out)


def mount(store: ObjectStore, admin: Any, topic: str, *, read_only: bool = False, replication_factor: int = -1,
          out: TextIO = sys.stdout) -> RestoreReport:
    """Mount a topic of the bucket on a cluster: restored (it then belongs to this cluster) or, ``read_only``,
    as a read replica (it follows whoever writes it)."""
    if not read_only:
        return restore(store, admin, topics=[topic], replication_factor=replication_factor, out=out)
    report = RestoreReport()
    admin.create_topic(topic, -1, replication_factor, None, {"remote.read.replica": "true"})
    report.restored.append(topic)
    print(f"{topic}: mounted read-only (remote.read.replica=true)", file=out)
    return report
