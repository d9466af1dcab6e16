"""``strata bucket``: work on the remote store itself, configured by a broker's properties file (issue 29).

``rewrap``: key rotation without rewriting data. Every v2 segment's manifest holds its data key wrapped by a
key-encryption key; ``rewrap`` unwraps each data key not yet under the active key pair
(``rsm.config.encryption.key.pair.id``) and wraps it again with it, rewriting only the manifest (one small PUT,
atomic in both stores). The data objects are not touched, so a bucket of any size rotates in minutes, and
brokers reading meanwhile are not disturbed (the data key itself does not change). Once every manifest is under
the new key pair, the old one can leave ``encryption.key.pairs``.

``restore``: re-create every topic of the store on a cluster (``remote.recovery=true``) and commit the groups'
offsets copied to the store; see :mod:`strata.tools.bucket_restore`.

``verify`` (with ``--repair``): check every segment of the store against its format (and, with
``--bootstrap-server``, against the cluster's ``__remote_log_metadata``); see :mod:`strata.tools.bucket_verify`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from strata.config.broker_config import BrokerConfig
from strata.config.defs import parse_properties
from strata.errors import InvalidConfigError
from strata.tiered.api import (
    RSM_ALIASES,
    ObjectStore,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
    load_class,
)
from strata.tiered.recovery import OFFSETS_PREFIX
from strata.tiered.storage.common import LOG_SUFFIX, MANIFEST_SUFFIX
from strata.tiered.storage.envelope import DecryptionError
from strata.tiered.storage.object_format import CorruptObjectError, ObjectFormat, SegmentManifest
from strata.tools.args import non_negative_int
from strata.tools.bucket_verify import (
    DEFAULT_GRACE_PERIOD_MS,
    DEFAULT_PARALLELISM,
    BucketVerifier,
    VerifyOptions,
    print_report,
    read_remote_log_metadata,
)

if TYPE_CHECKING:  # (the restore module loads the admin client: only the commands that use it import it)
    from strata.tools.bucket_restore import RestoreReport

PROGRESS_INTERVAL_S = 2.0


class BucketError(Exception):
    """Why the command cannot run at all: the message on stderr, exit 1."""


def add_bucket_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> argparse.ArgumentParser:
    p = subparsers.add_parser("bucket", parents=list(parents), help="work on the remote store (tiered storage)",
                              description="Commands on the remote store a broker's properties file configures.")
    commands = p.add_subparsers(dest="bucket_command", required=True, metavar="COMMAND")
    rewrap = commands.add_parser(
        "rewrap", parents=list(parents), help="re-wrap every segment's data key with the active key pair",
        description="Key rotation without rewriting data: every v2 segment whose data key is wrapped by another "
                    "key pair than rsm.config.encryption.key.pair.id gets its manifest rewritten with the key "
                    "wrapped by the active one. Needs the private keys of the old pairs.")
    rewrap.add_argument("--config", required=True, metavar="FILE",
                        help="the broker's properties file (its remote store and encryption.key.pairs)")
    rewrap.add_argument("--dry-run", action="store_true", help="count what would be rewrapped, write nothing")
    rewrap.set_defaults(func=_cmd_rewrap, command_parser=rewrap)
    _add_verify_parser(commands, parents)
    _add_restore_parser(commands, parents)
    return p


def _add_restore_parser(commands: Any, parents: Sequence[argparse.ArgumentParser]) -> None:
    restore = commands.add_parser(
        "restore", parents=list(parents), help="re-create every topic of the remote store on a cluster",
        description="Create each topic the remote store describes (its topic manifest) on the cluster with "
                    "remote.recovery=true: its id, partitions, configs and every tiered record come back. Then "
                    "commit the consumer groups' offsets copied to the store (offsets.remote.upload.interval.ms). "
                    "Topics restored before are skipped, so the command can be run again.")
    restore.add_argument("--config", required=True, metavar="FILE",
                         help="a broker's properties file (the remote store holding the topics)")
    restore.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the cluster to restore to")
    restore.add_argument("--command-config", metavar="FILE", default=None,
                         help="client properties for a secured listener (security.protocol, sasl.*, ssl.*)")
    restore.add_argument("--topic", action="append", default=[], metavar="NAME",
                         help="restore only this topic (repeatable; default: every topic of the store)")
    restore.add_argument("--replication-factor", type=_positive_int, default=None, metavar="N",
                         help="replication factor of the restored topics (default: the topic manifest's, at most "
                              "the cluster's brokers)")
    restore.add_argument("--dry-run", action="store_true", help="say what would be restored, change nothing")
    restore.set_defaults(func=_cmd_restore, command_parser=restore)
    unmount = commands.add_parser(
        "unmount", parents=list(parents), help="move a topic out of a cluster into the remote store",
        description="Set remote.unmount=true on the topic (produce is refused, the active segments roll and "
                    "upload), wait until every record is in the remote store, then delete the topic from the "
                    "cluster; its data stays in the store for `strata bucket mount` on another cluster.")
    unmount.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the topic's cluster")
    unmount.add_argument("--topic", required=True, metavar="NAME")
    unmount.add_argument("--command-config", metavar="FILE", default=None,
                         help="client properties for a secured listener (security.protocol, sasl.*, ssl.*)")
    unmount.add_argument("--timeout-s", type=_positive_int, default=300, metavar="N",
                         help="how long to wait for the uploads (default 300)")
    unmount.set_defaults(func=_cmd_unmount, command_parser=unmount)
    mount = commands.add_parser(
        "mount", parents=list(parents), help="mount a topic of the remote store on a cluster",
        description="Create the topic from the remote store on the cluster: restored (remote.recovery=true; it "
                    "then belongs to this cluster), or with --read-only as a read replica (remote.read.replica=true: "
                    "it follows the cluster that writes it).")
    mount.add_argument("--config", required=True, metavar="FILE", help="a broker's properties file (the store)")
    mount.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the cluster to mount on")
    mount.add_argument("--topic", required=True, metavar="NAME")
    mount.add_argument("--read-only", action="store_true", help="mount as a read replica")
    mount.add_argument("--command-config", metavar="FILE", default=None,
                       help="client properties for a secured listener (security.protocol, sasl.*, ssl.*)")
    mount.set_defaults(func=_cmd_mount, command_parser=mount)


def _add_verify_parser(commands: Any, parents: Sequence[argparse.ArgumentParser]) -> None:
    verify = commands.add_parser(
        "verify", parents=list(parents), help="check every segment of the remote store; --repair removes orphans",
        description="Check the remote store a broker's properties file configures: objects missing, damaged "
                    "(size, SHA-256, chunks that do not decode, record batches that fail their CRC), orphaned, "
                    "segments without their manifest, and with --bootstrap-server the cluster's "
                    "__remote_log_metadata against the bucket. One line per finding, then a summary. Exit 0 "
                    "when nothing is found (or everything found was repaired), 1 otherwise.")
    verify.add_argument("--config", required=True, metavar="FILE",
                        help="the broker's properties file (its remote store, and the key pairs to decode with)")
    verify.add_argument("--bootstrap-server", metavar="HOST:PORT", default=None,
                        help="also compare with this cluster's __remote_log_metadata (a segment it does not list "
                             "is an orphan; one it lists that is not in the bucket is a finding)")
    verify.add_argument("--command-config", metavar="FILE", default=None,
                        help="client properties for a secured listener (security.protocol, sasl.*, ssl.*)")
    verify.add_argument("--sample", type=_fraction, default=1.0, metavar="FRACTION",
                        help="read the bytes of this fraction of the segments only (0 < F <= 1; default 1: all); "
                             "the others get the checks that need no data read")
    verify.add_argument("--seed", type=int, default=None,
                        help="the seed that picks the --sample segments (default: random, printed)")
    verify.add_argument("--repair", action="store_true",
                        help="remove the orphans (and nothing else) last modified before the grace period")
    verify.add_argument("--grace-period-ms", type=non_negative_int, default=DEFAULT_GRACE_PERIOD_MS, metavar="N",
                        help="orphans younger than this are kept by --repair, and a copy started less than this "
                             f"long ago is in progress, not an orphan (default {DEFAULT_GRACE_PERIOD_MS})")
    verify.add_argument("--parallelism", type=_positive_int, default=DEFAULT_PARALLELISM, metavar="N",
                        help=f"segments checked at once (default {DEFAULT_PARALLELISM})")
    verify.add_argument("--json", action="store_true", help="print the findings and the summary as JSON")
    verify.set_defaults(func=_cmd_verify, command_parser=verify)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value:g} is not a fraction in (0, 1]")
    return value


def _positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 is not a positive number")
    return value


def _load_config(config_file: str | Path) -> BrokerConfig:
    try:
        props = parse_properties(Path(config_file).read_text())
        return BrokerConfig.from_props(props)
    except OSError as e:
        raise BucketError(f"cannot read {config_file}: {e}") from e
    except (InvalidConfigError, ValueError) as e:
        raise BucketError(f"{config_file}: {e}") from e


def diskless_prefixes(config_file: str | Path) -> tuple[str, ...]:
    """The key prefixes of diskless objects (WAL objects, coordinator snapshots) in the store: not segments.
    The configured ``diskless.object.key.prefix`` and the default one (objects written before a change of it)."""
    from strata.diskless.writer.object_key import DEFAULT_PREFIX  # imported here: the diskless package is heavy

    prefix = _load_config(config_file).diskless.object_key_prefix.strip("/")
    default = DEFAULT_PREFIX.split("/", 1)[0]
    own = (f"{prefix}/",) if prefix else ("wal/", "coordinator/")
    return tuple(dict.fromkeys((*own, f"{default}/")))


def open_store(config_file: str | Path) -> tuple[RemoteStorageManager, ObjectFormat]:
    """The RSM a broker with these properties would use, configured alike, and its object format."""
    config = _load_config(config_file)
    remote = config.remote
    try:
        rsm = load_class(remote.rsm_class_name, RSM_ALIASES, RemoteStorageManager)()
        rsm.configure(remote.rsm_configs(config.node_id, config.log_dirs[0]))  # type: ignore[attr-defined]
    except (ValueError, TypeError, RemoteStorageError) as e:
        raise BucketError(f"{config_file}: the remote store's configuration ({remote.rsm_prefix}*): {e}") from e
    if not isinstance(rsm, ObjectStore):
        raise BucketError(f"{remote.rsm_class_name} is not an object store (put/get/list/delete objects)")
    fmt = getattr(rsm, "object_format", None)
    if not isinstance(fmt, ObjectFormat):
        raise BucketError(f"{remote.rsm_class_name} does not store object format v2")
    return rsm, fmt


def rewrap(store: ObjectStore, fmt: ObjectFormat, *, dry_run: bool = False,
           err: TextIO = sys.stderr) -> tuple[int, int, list[str]]:
    """(manifests rewrapped, manifests seen, problems): see the module doc."""
    keys = fmt.keys
    if keys is None:
        raise BucketError("no encryption.key.pairs are configured: nothing can be unwrapped or wrapped")
    done = seen = 0
    problems: list[str] = []
    last = time.monotonic()
    for info in store.list_objects(""):
        if not info.key.endswith(f".{MANIFEST_SUFFIX}"):
            continue
        seen += 1
        try:
            manifest = SegmentManifest.from_bytes(store.get_object_range(info.key, 0, info.size))
            if manifest.wrapped_key is None or manifest.key_id == keys.active:
                continue
            new = manifest.with_wrapped_key(keys.rewrap(manifest.wrapped_key))
            stem = info.key[: -len(MANIFEST_SUFFIX) - 1]
            store.get_object_range(f"{stem}.{LOG_SUFFIX}", 0, 0)  # deleted meanwhile: no orphan manifest back
            if not dry_run:
                store.put_object(info.key, new.to_bytes())
            done += 1
        except RemoteResourceNotFoundError:
            continue  # the segment was deleted (retention) while the command ran
        except (CorruptObjectError, DecryptionError, RemoteStorageError) as e:
            problems.append(f"{info.key}: {e}")
        if time.monotonic() - last >= PROGRESS_INTERVAL_S:
            last = time.monotonic()
            print(f"... {seen} manifests read, {done} rewrapped", file=err)
    return done, seen, problems


def _cmd_rewrap(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        rsm, fmt = open_store(args.config)
    except BucketError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        done, seen, problems = rewrap(rsm, fmt, dry_run=args.dry_run)  # type: ignore[arg-type]
    except BucketError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        rsm.close()
    assert fmt.keys is not None
    verb = "would rewrap" if args.dry_run else "rewrapped"
    print(f"{verb} {done} of {seen} segment manifests to key pair {fmt.keys.active}")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _cmd_verify(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``strata bucket verify``: 0 healthy (or every finding repaired), 1 with findings or when it cannot run."""
    try:
        options = VerifyOptions(sample=args.sample, seed=args.seed, grace_period_ms=args.grace_period_ms,
                                repair=args.repair, skip_prefixes=(*diskless_prefixes(args.config), OFFSETS_PREFIX),
                                parallelism=args.parallelism)
        rsm, fmt = open_store(args.config)
    except BucketError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    load_metadata = None
    if args.bootstrap_server:
        from strata.tools.kafka_cli import command_config_security

        try:
            security = command_config_security(args, BucketError)
        except BucketError as e:
            rsm.close()
            print(f"error: {e}", file=sys.stderr)
            return 1

        def load_metadata(partitions: set[TopicIdPartition]) -> dict[str, RemoteLogSegmentMetadata]:
            try:
                return read_remote_log_metadata(args.bootstrap_server, partitions, security=security)
            except RuntimeError:
                raise
            except Exception as e:  # noqa: BLE001 - unreachable, refused, timed out (WireError, KafkaClientError...)
                raise RuntimeError(f"reading __remote_log_metadata from {args.bootstrap_server}: {e}") from e
    try:
        report = BucketVerifier(rsm, fmt, options, load_metadata).run()  # type: ignore[arg-type]
    except (RemoteStorageError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        rsm.close()
    print_report(report, sys.stdout, as_json=args.json)
    return 1 if report.unrepaired else 0


def _store_and_cluster(args: argparse.Namespace, client_id: str,
                       run: Callable[[Any, Any], RestoreReport]) -> RestoreReport | None:
    """``run(store, admin)`` with the store ``--config`` configures and an admin client of ``--bootstrap-server``;
    None (after one ``error:`` line) when either cannot be reached or the run fails."""
    from strata.tools.admin import KafkaAdmin
    from strata.tools.kafka_cli import command_config_security

    try:
        security = command_config_security(args, BucketError)
        rsm, _fmt = open_store(args.config)
    except BucketError as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    try:
        with KafkaAdmin(args.bootstrap_server, client_id=client_id, security=security) as admin:
            return run(rsm, admin)
    except (RemoteStorageError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - the cluster unreachable or refusing: one line, exit 1
        print(f"error: {args.bootstrap_server}: {e}", file=sys.stderr)
    finally:
        rsm.close()
    return None


def _cmd_restore(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``strata bucket restore``: 0 when every topic (and group) was restored or was already, 1 otherwise."""
    from strata.tools.bucket_restore import restore

    report = _store_and_cluster(args, "strata-bucket-restore", lambda rsm, admin: restore(
        rsm, admin, topics=args.topic, replication_factor=args.replication_factor or -1, dry_run=args.dry_run))
    if report is None:
        return 1
    for problem in report.problems:
        print(f"error: {problem}", file=sys.stderr)
    print(f"{len(report.restored)} topics restored, {len(report.skipped)} restored before, "
          f"{len(report.groups)} groups' offsets committed, {len(report.problems)} problems")
    return 1 if report.problems else 0


def _cmd_unmount(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from strata.tools.admin import KafkaAdmin
    from strata.tools.bucket_restore import unmount
    from strata.tools.kafka_cli import command_config_security

    try:
        security = command_config_security(args, BucketError)
        with KafkaAdmin(args.bootstrap_server, client_id="strata-bucket-unmount", security=security) as admin:
            unmount(admin, args.topic, wait_s=args.timeout_s)
    except Exception as e:  # noqa: BLE001 - refused, unreachable, not uploaded in time: one line, exit 1
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _cmd_mount(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from strata.tools.bucket_restore import mount

    report = _store_and_cluster(args, "strata-bucket-mount",
                                lambda rsm, admin: mount(rsm, admin, args.topic, read_only=args.read_only))
    if report is None:
        return 1
    for problem in report.problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if report.problems or not (report.restored or report.skipped) else 0
