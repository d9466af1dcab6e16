"""``strata bucket``: work on the remote store itself, configured by a broker's properties file (issue 29).

``rewrap``: key rotation without rewriting data. Every v2 segment's manifest holds its data key wrapped by a
key-encryption key; ``rewrap`` unwraps each data key not yet under the active key pair
(``rsm.config.encryption.key.pair.id``) and wraps it again with it, rewriting only the manifest (one small PUT,
atomic in both stores). The data objects are not touched, so a bucket of any size rotates in minutes, and
brokers reading meanwhile are not disturbed (the data key itself does not change). Once every manifest is under
the new key pair, the old one can leave ``encryption.key.pairs``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from strata.config.broker_config import BrokerConfig
from strata.config.defs import parse_properties
from strata.errors import InvalidConfigError
from strata.tiered.api import (
    RSM_ALIASES,
    ObjectStore,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    load_class,
)
from strata.tiered.storage.common import LOG_SUFFIX, MANIFEST_SUFFIX
from strata.tiered.storage.envelope import DecryptionError
from strata.tiered.storage.object_format import CorruptObjectError, ObjectFormat, SegmentManifest

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
    return p


def open_store(config_file: str | Path) -> tuple[RemoteStorageManager, ObjectFormat]:
    """The RSM a broker with these properties would use, configured alike, and its object format."""
    try:
        props = parse_properties(Path(config_file).read_text())
        config = BrokerConfig.from_props(props)
    except OSError as e:
        raise BucketError(f"cannot read {config_file}: {e}") from e
    except (InvalidConfigError, ValueError) as e:
        raise BucketError(f"{config_file}: {e}") from e
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
