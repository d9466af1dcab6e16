"""``strata remote-log-metadata-migration`` (``kafka-remote-log-metadata-migration.sh``): KIP-1266's migration of
an existing ``__remote_log_metadata`` from ``cleanup.policy=delete`` to a compacted topic, over the Kafka
protocol only (Metadata, DescribeConfigs, IncrementalAlterConfigs, ListOffsets, Fetch).

Kafka keeps ``remote.log.metadata.version`` as a KRaft feature; Strata has none, so the version is the topic's
``cleanup.policy`` (``strata.tiered.metadata.keys.metadata_version``): ``delete`` 0, ``compact,delete`` 1,
``compact`` 2. A new cluster creates the topic compacted (version 2); an older one keeps ``delete`` until
this tool moves it, because the log cleaner drops records without a key and Kafka's RLMM (and Strata's
before keys) wrote every record with a null key:

* ``--upgrade-to-v1 --retention-ms N``: ``cleanup.policy=compact,delete``, ``retention.ms=N``,
  ``min.compaction.lag.ms=N``. The brokers' new records are keyed (Strata writes keys at every version); the
  old null-key records expire by ``retention.ms`` before the cleaner may touch them (it leaves records younger
  than ``min.compaction.lag.ms`` alone). Choose N longer than any tiered topic's retention: a live segment
  whose records are all older than N loses its metadata (the tool warns when a tiered topic keeps data longer).
* ``--check``: scans every partition (progress on stderr) for records with a null key and prints how many
  remain, the newest one's timestamp and when it should have expired. Exit 1 while any remain.
* ``--upgrade-to-v2`` (with or without ``--check``: the scan always runs): refused while null-key records
  remain, with the newest one's timestamp and when to retry; otherwise ``cleanup.policy=compact`` and the
  ``retention.ms`` / ``min.compaction.lag.ms`` overrides removed. ``--force`` skips the scan: null-key records
  left are then removed by the next cleaning, and the segments they describe with them.

Run it once every broker runs a Strata that writes keys (a broker that writes null keys into a compacted topic
loses those records to the cleaner).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

from strata.client.cluster import EARLIEST, LATEST, OFFSET_OUT_OF_RANGE, RETRIABLE, KafkaClientError
from strata.client.remote_metadata import complete_batches
from strata.client.wire import WireError
from strata.protocol.records import decode_batch
from strata.tiered.metadata.keys import metadata_version
from strata.tools.admin import RESOURCE_TOPIC, AdminError, ConfigEntry, KafkaAdmin
from strata.tools.kafka_cli import UsageError, has, open_admin, refuse_zookeeper, require, spec, usage_exit

TOPIC = "__remote_log_metadata"
DYNAMIC_TOPIC_CONFIG = 1
FETCH_BYTES = 8 << 20
PROGRESS_INTERVAL_S = 2.0
RETRIES = 20
COMMAND = "kafka-remote-log-metadata-migration.sh"


class MigrationError(Exception):
    """Why the command cannot go on: the message on stderr, exit 1."""


@dataclass
class ScanResult:
    partitions: int = 0
    records: int = 0
    bytes: int = 0
    null_key_records: int = 0
    newest_null_key_ms: int | None = None
    newest_null_key_at: tuple[int, int] | None = None  # (partition, offset)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if refuse_zookeeper(args, COMMAND):
        return 1
    try:
        retention_ms = check_args(args)
        admin = open_admin(args)
    except UsageError as e:
        return usage_exit(parser, str(e))
    try:
        with admin:
            return migrate(admin, args, retention_ms, sys.stdout, sys.stderr)
    except MigrationError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except (AdminError, KafkaClientError, WireError) as e:
        cause = e.java() if isinstance(e, AdminError) else f"org.apache.kafka.common.KafkaException: {e}"
        print(f"Error while migrating {TOPIC}: {cause}", file=sys.stderr)
        return 1


def check_args(args: argparse.Namespace) -> int | None:
    """Kafka's option checks; the ``--retention-ms`` given (None without ``--upgrade-to-v1``)."""
    require(args, "bootstrap-server")
    actions = [name for name in ("upgrade-to-v1", "upgrade-to-v2") if has(args, name)]
    if len(actions) > 1:
        raise UsageError(f'Option "{spec("upgrade-to-v1")}" can\'t be used with option "{spec("upgrade-to-v2")}"')
    if not actions and not args.check:
        raise UsageError("Command must include exactly one action: --upgrade-to-v1, --check or --upgrade-to-v2")
    if args.upgrade_to_v1 and args.check:
        raise UsageError(f'Option "{spec("upgrade-to-v1")}" can\'t be used with option "{spec("check")}"')
    if args.force and not args.upgrade_to_v2:
        raise UsageError(f'Option "{spec("force")}" can only be used with option "{spec("upgrade-to-v2")}"')
    if args.retention_ms is not None and not args.upgrade_to_v1:
        raise UsageError(f'Option "{spec("retention-ms")}" can only be used with option "{spec("upgrade-to-v1")}"')
    if not args.upgrade_to_v1:
        return None
    require(args, "retention-ms")
    try:
        retention_ms = int(args.retention_ms)
    except ValueError:
        raise UsageError(f"Cannot parse argument '{args.retention_ms}' of option retention-ms") from None
    if retention_ms <= 0:
        raise UsageError(f"--retention-ms must be a positive number of milliseconds, got {retention_ms} (the null-key "
                         "records must expire by time before the topic can be compacted)")
    return retention_ms


def migrate(admin: KafkaAdmin, args: argparse.Namespace, retention_ms: int | None, out: TextIO, err: TextIO) -> int:
    configs = topic_configs(admin)
    policy = _value(configs, "cleanup.policy") or "delete"
    version = metadata_version(policy)
    print(f"{TOPIC} is at remote.log.metadata.version {version} (cleanup.policy={policy})", file=out)
    if args.upgrade_to_v1:
        assert retention_ms is not None
        return upgrade_to_v1(admin, version, retention_ms, out, err)
    if args.upgrade_to_v2:
        return upgrade_to_v2(admin, configs, version, args.force, out, err)
    result = scan(admin, err)
    report(result, configs, out)
    if result.null_key_records:
        print(_next_step(admin, result, configs, version), file=out)
        return 1
    return 0


def topic_configs(admin: KafkaAdmin) -> dict[str, ConfigEntry]:
    if TOPIC not in admin.cluster([TOPIC]).topics:
        raise MigrationError(f"Topic {TOPIC} does not exist: there is nothing to migrate. Brokers create it compacted "
                             "(remote.log.metadata.version 2) when tiered storage first starts.")
    return {e.name: e for e in admin.describe_configs(RESOURCE_TOPIC, TOPIC)}


def _value(configs: dict[str, ConfigEntry], name: str) -> str | None:
    entry = configs.get(name)
    return entry.value if entry is not None else None


def upgrade_to_v1(admin: KafkaAdmin, version: int, retention_ms: int, out: TextIO, err: TextIO) -> int:
    if version == 2:
        raise MigrationError(f"{TOPIC} is at version 2 already (cleanup.policy=compact); going back to version 1 "
                             "would delete records by time again")
    warn_about_tiered_retention(admin, retention_ms, err)
    admin.incremental_alter_configs(RESOURCE_TOPIC, TOPIC, {
        "cleanup.policy": "compact,delete", "retention.ms": str(retention_ms),
        "min.compaction.lag.ms": str(retention_ms)}, [])
    ready = _time_text(time.time() * 1000 + retention_ms)
    print(f"Upgraded {TOPIC} to remote.log.metadata.version 1: cleanup.policy=compact,delete, "
          f"retention.ms={retention_ms}, min.compaction.lag.ms={retention_ms}.", file=out)
    print(f"Records without a key expire by retention.ms; the cleaner leaves records younger than "
          f"min.compaction.lag.ms alone meanwhile. Run --check --upgrade-to-v2 after {ready}, and soon after: "
          f"while at version 1 retention also deletes keyed records older than {retention_ms} ms.", file=out)
    return 0


def warn_about_tiered_retention(admin: KafkaAdmin, retention_ms: int, err: TextIO) -> None:
    """Kafka's advice, checked: records older than ``retention_ms`` go, so a tiered topic keeping segments longer
    loses the metadata of the ones whose records (null-key ones above all) are older."""
    longer = []
    for name in sorted(admin.cluster().topics):
        if name == TOPIC:
            continue
        try:
            configs = {e.name: e.value for e in admin.describe_configs(RESOURCE_TOPIC, name)}
        except AdminError:
            continue  # deleted meanwhile, or not authorised: nothing to compare
        if (configs.get("remote.storage.enable") or "false").lower() != "true":
            continue
        try:
            topic_retention = int(configs.get("retention.ms") or -1)
        except ValueError:
            continue
        if topic_retention < 0 or topic_retention > retention_ms:
            longer.append(f"{name} (retention.ms={topic_retention})")
    if longer:
        print(f"WARNING: these tiered topics keep data longer than --retention-ms {retention_ms}: "
              f"{', '.join(longer)}. Metadata records older than {retention_ms} ms are deleted while at version 1: "
              "a segment still live whose records are older loses its metadata.", file=err)


def upgrade_to_v2(admin: KafkaAdmin, configs: dict[str, ConfigEntry], version: int, force: bool, out: TextIO,
                  err: TextIO) -> int:
    if version == 2:
        print(f"{TOPIC} is at version 2 already: nothing to do.", file=out)
        return 0
    retention = _value(configs, "retention.ms")
    if version == 1:
        print(f"Reminder: at version 1 the records without a key expire by retention.ms={retention} ms.", file=out)
    if force:
        print(f"WARNING: --force: not scanning {TOPIC}. Records without a key still in it are removed by the next "
              "cleaning, and the remote segments they describe are then unknown to brokers that replay the topic.",
              file=err)
    else:
        result = scan(admin, err)
        report(result, configs, out)
        if result.null_key_records:
            raise MigrationError(f"not upgrading to version 2: {result.null_key_records} records without a key remain "
                                 f"(see above). {_next_step(admin, result, configs, version)}")
    deleted = [name for name in ("retention.ms", "min.compaction.lag.ms")
               if name in configs and configs[name].source == DYNAMIC_TOPIC_CONFIG]
    admin.incremental_alter_configs(RESOURCE_TOPIC, TOPIC, {"cleanup.policy": "compact"}, deleted)
    removed = f" ({' and '.join(deleted)} overrides removed)" if deleted else ""
    print(f"Upgraded {TOPIC} to remote.log.metadata.version 2: cleanup.policy=compact{removed}.", file=out)
    return 0


def _next_step(admin: KafkaAdmin, result: ScanResult, configs: dict[str, ConfigEntry], version: int) -> str:
    policy = _value(configs, "cleanup.policy") or "delete"
    retention = int(_value(configs, "retention.ms") or -1)
    if "delete" not in policy or retention < 0:
        return ("They never expire with this topic's configs: run --upgrade-to-v1 --retention-ms N first."
                if version == 0 else "They never expire with this topic's configs: set retention.ms.")
    if version == 0:
        return "Run --upgrade-to-v1 --retention-ms N first, so they expire without the cleaner dropping them."
    assert result.newest_null_key_ms is not None
    due = result.newest_null_key_ms + retention
    segment_ms = int(_value(configs, "segment.ms") or 0)
    check_ms = _retention_check_interval_ms(admin)
    return (f"The newest expires at about {_time_text(due)} (its timestamp + retention.ms={retention}; retention "
            f"deletes whole segments once the next one is rolled (segment.ms={segment_ms}) and the broker's "
            f"retention check runs (log.retention.check.interval.ms={check_ms})). Retry after "
            f"{_time_text(due + max(0, min(segment_ms, retention)) + check_ms)}.")


def _retention_check_interval_ms(admin: KafkaAdmin) -> int:
    """The broker's ``log.retention.check.interval.ms`` (Kafka's default, 5 minutes, if it cannot be read)."""
    try:
        return int(admin.broker_configs().get("log.retention.check.interval.ms") or 300_000)
    except (KafkaClientError, WireError, ValueError):
        return 300_000


def report(result: ScanResult, configs: dict[str, ConfigEntry], out: TextIO) -> None:
    print(f"Scanned {result.partitions} partitions of {TOPIC}: {result.records} records, "
          f"{_mib(result.bytes)}.", file=out)
    if not result.null_key_records:
        print("No record without a key: the topic can be compacted (--upgrade-to-v2).", file=out)
        return
    partition, offset = result.newest_null_key_at or (-1, -1)
    assert result.newest_null_key_ms is not None
    print(f"{result.null_key_records} records without a key remain; the newest was written at "
          f"{_time_text(result.newest_null_key_ms)} ({TOPIC}-{partition} offset {offset}).", file=out)


def _time_text(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


# -- the scan --------------------------------------------------------------------------------------


def scan(admin: KafkaAdmin, err: TextIO, clock: Callable[[], float] = time.monotonic) -> ScanResult:
    """Every record of every partition, from its log start to its high watermark at the start of the scan, read
    with Fetch and decoded: the records without a key, and the newest one's timestamp."""
    info = admin.cluster([TOPIC]).topics[TOPIC]
    keys = [(TOPIC, p.partition) for p in info.partitions]
    starts = admin.list_offsets(dict.fromkeys(keys, EARLIEST))
    ends = admin.list_offsets(dict.fromkeys(keys, LATEST))
    total = sum(max(0, ends[k] - starts[k]) for k in keys)
    result = ScanResult(partitions=len(keys))
    progress = _Progress(err, total, len(keys), clock)
    for done, key in enumerate(keys):
        _scan_partition(admin, key[1], starts[key], ends[key], result,
                        lambda done=done: progress.tick(done, result))  # type: ignore[misc]
        progress.tick(done + 1, result, force=done + 1 == len(keys))
    return result


def _scan_partition(admin: KafkaAdmin, partition: int, position: int, end: int, result: ScanResult,
                    tick: Callable[[], None]) -> None:
    failures = 0
    while position < end:
        fetched = admin.fetch(TOPIC, partition, position, max_bytes=FETCH_BYTES, max_wait_ms=0)
        if fetched.error_code == OFFSET_OUT_OF_RANGE and position < fetched.log_start_offset:
            position = fetched.log_start_offset  # retention moved the start meanwhile: what it deleted is gone
            continue
        if fetched.error_code in RETRIABLE and failures < RETRIES:
            failures += 1
            time.sleep(min(1.0, 0.1 * failures))
            continue
        if fetched.error_code:
            raise KafkaClientError(f"Fetch {TOPIC}-{partition} at offset {position}: error {fetched.error_code}",
                                   fetched.error_code)
        failures = 0
        before = position
        for pos, header in complete_batches(fetched.records):
            if header.last_offset < position:
                continue
            result.bytes += header.size
            if not header.is_control:
                for record in decode_batch(fetched.records, pos).records:
                    if record.offset < position or record.offset >= end:
                        continue
                    result.records += 1
                    if record.key is None and (result.newest_null_key_ms is None
                                               or record.timestamp >= result.newest_null_key_ms):
                        result.newest_null_key_ms = record.timestamp
                        result.newest_null_key_at = (partition, record.offset)
                    if record.key is None:
                        result.null_key_records += 1
            position = header.last_offset + 1
        if position == before:
            if failures >= RETRIES:
                raise KafkaClientError(f"no progress reading {TOPIC}-{partition} at offset {position} (end {end})")
            failures += 1  # an empty answer (the leader moving): ask again
            time.sleep(min(1.0, 0.1 * failures))
        tick()


class _Progress:
    """One line on stderr at most every ``PROGRESS_INTERVAL_S``: a scan of a large topic takes a while."""

    def __init__(self, err: TextIO, total: int, partitions: int, clock: Callable[[], float]) -> None:
        self.err, self.total, self.partitions, self.clock = err, total, partitions, clock
        self.started = self.last = clock()

    def tick(self, done_partitions: int, result: ScanResult, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self.last < PROGRESS_INTERVAL_S:
            return
        self.last = now
        share = f" ({100 * result.records / self.total:.0f}%)" if self.total else ""
        print(f"Scanning {TOPIC}: {done_partitions}/{self.partitions} partitions, {result.records} of about "
              f"{self.total} records{share}, {_mib(result.bytes)}, {result.null_key_records} without a key, "
              f"{now - self.started:.1f} s", file=self.err, flush=True)
