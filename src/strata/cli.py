"""The ``strata`` command: ``dump-log``, ``demo`` and ``version``.

Exit codes: 0 when everything dumped is consistent, 1 when any inconsistency or invalid batch was
found (or the demo failed), 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from strata import __version__
from strata.tools.tiers import add_tiers_parser

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
DEFAULT_DEMO_DIR = Path("data") / "demo"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of bytes")
    return value


def build_parser() -> argparse.ArgumentParser:
    verbose = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's -v adds to the top-level count instead of resetting it.
    verbose.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                         help="log more (-v INFO, -vv DEBUG); the default is WARNING")

    parser = argparse.ArgumentParser(prog="strata", description="Strata: a Kafka-compatible broker.")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more (-v INFO, -vv DEBUG); the default is WARNING")
    parser.add_argument("--version", action="version", version=f"strata {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    dump = commands.add_parser(
        "dump-log", parents=[verbose], help="dump and verify log segments, indexes and checkpoints",
        description="Dump the files of a partition directory like Kafka's kafka-dump-log, verifying each "
                    "index against its log. Exit code 1 when anything is inconsistent.",
    )
    dump.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                      help="a .log, .index, .timeindex, .txnindex, .snapshot or checkpoint file, or a directory")
    dump.add_argument("--files", default=None, metavar="FILE1,FILE2",
                      help="comma-separated files (kafka-dump-log's spelling)")
    dump.add_argument("--print-data-log", "--records", dest="print_data", action="store_true",
                      help="one line per record, with key and payload")
    dump.add_argument("--deep-iteration", dest="deep", action="store_true",
                      help="one line per record, without key and payload")
    dump.add_argument("--index-sanity-check", action="store_true",
                      help="run the broker's startup sanity check on indexes (entries are verified, not listed)")
    dump.add_argument("--verify-index-only", action="store_true",
                      help="verify index entries without listing them")
    dump.add_argument("--max-bytes", type=_positive_int, default=None, metavar="N",
                      help="dump only the batches within the first N bytes of each .log")
    dump.add_argument("--json", action="store_true", help="machine-readable output: a JSON list, one object a file")
    dump.set_defaults(func=_cmd_dump_log, command_parser=dump)

    demo = commands.add_parser(
        "demo", parents=[verbose], help="write a sample partition log and dump it",
        description="Write a sample partition log (all codecs, several segments, idempotent and "
                    "transactional producers, an aborted transaction) under DIR, then dump it.",
    )
    demo.add_argument("--dir", type=Path, default=DEFAULT_DEMO_DIR,
                      help=f"where to write it (default ./{DEFAULT_DEMO_DIR}); emptied first")
    demo.set_defaults(func=_cmd_demo, command_parser=demo)

    serve = commands.add_parser(
        "serve", parents=[verbose], help="run the broker",
        description="Run the Kafka-compatible broker. Configuration uses Kafka's server.properties keys; "
                    "--set overrides the file. Unknown keys or invalid values stop startup with the key named.",
    )
    serve.add_argument("--config", type=Path, default=None, metavar="FILE", help="a server.properties file")
    serve.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override one config key (repeatable)")
    serve.set_defaults(func=_cmd_serve, command_parser=serve)

    add_tiers_parser(commands, parents=[verbose])
    version = commands.add_parser("version", parents=[verbose], help="print the version")
    version.set_defaults(func=_cmd_version, command_parser=version)
    return parser


def configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)
    logging.getLogger().setLevel(level)


def _cmd_dump_log(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from strata.log.dump import DumpOptions, EventKind, collect_json, dump_paths, format_event

    paths: list[Path] = list(args.paths)
    if args.files:
        paths.extend(Path(p.strip()) for p in args.files.split(",") if p.strip())
    if not paths:
        parser.error("dump-log needs at least one PATH (or --files)")
    options = DumpOptions(deep=args.deep, print_data=args.print_data, index_sanity_check=args.index_sanity_check,
                          verify_index_only=args.verify_index_only, max_bytes=args.max_bytes)
    events = dump_paths(paths, options)
    if args.json:
        files = collect_json(events)
        json.dump(files, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 1 if any(not f["valid"] for f in files) else 0
    failed = False
    for event in events:
        failed = failed or event.kind is EventKind.PROBLEM
        text = format_event(event)
        if text is not None:
            print(text)
    return 1 if failed else 0


def _cmd_demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from strata.demo import DemoError, run_demo

    try:
        return run_demo(args.dir, out=sys.stdout)
    except DemoError as e:
        print(f"strata demo: {e}", file=sys.stderr)
        return 1


def _cmd_serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from strata.config.broker_config import BrokerConfig
    from strata.errors import InvalidConfigError, KafkaStorageError

    overrides = {}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    try:
        config = BrokerConfig.load(args.config, overrides)
    except InvalidConfigError as e:
        print(f"strata serve: invalid configuration: {e}", file=sys.stderr)
        return 2
    from strata.broker.server import serve

    logging.getLogger("strata.lifecycle").setLevel(logging.INFO)
    try:
        serve(config)
    except InvalidConfigError as e:  # found once plugins load (a class that does not exist, bad rsm.config.*)
        print(f"strata serve: invalid configuration: {e}", file=sys.stderr)
        return 2
    except (KafkaStorageError, OSError) as e:
        print(f"strata serve: {e}", file=sys.stderr)
        return 1
    return 0


def _cmd_version(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    print(f"strata {__version__}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        configure_logging(args.verbose)
        return int(args.func(args, args.command_parser))
    except SystemExit as e:  # argparse: usage errors (2), --help and --version (0)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except BrokenPipeError:  # `strata dump-log ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
