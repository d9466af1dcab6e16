"""What the Kafka-style commands share: Kafka's usage errors, ``--command-config``, connecting.

Kafka's tools check their flags after parsing (exactly one action, options that do not go
together) and print the message, then the usage, and exit 1; :class:`UsageError` is that.
``--zookeeper`` is refused with a pointer to ``--bootstrap-server``: Strata's tools, like Kafka's
since 3.0, talk to brokers over the Kafka protocol only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from strata.client.cluster import KafkaClientError
from strata.client.wire import WireError
from strata.tools.admin import AdminError, KafkaAdmin, connect

DEFAULT_TIMEOUT_S = 30.0


class UsageError(Exception):
    """Kafka's ``CommandLineUtils.printUsageAndExit``: the message, the usage, exit code 1."""


def usage_exit(parser: argparse.ArgumentParser, message: str) -> int:
    print(message, file=sys.stderr)
    parser.print_usage(sys.stderr)
    return 1


def spec(name: str) -> str:
    """How jopt-simple names an option in Kafka's messages: ``[topic]``."""
    return f"[{name}]"


def has(args: argparse.Namespace, name: str) -> bool:
    """Whether ``--name`` was given (store_true flags are False, valued options None, when absent)."""
    value = getattr(args, name.replace("-", "_"))
    return value is not None and value is not False


def invalid_with(args: argparse.Namespace, used: str, others: Iterable[str]) -> None:
    """Kafka's ``checkInvalidArgs``: ``used`` cannot be combined with any of ``others``."""
    if has(args, used):
        for other in others:
            if has(args, other):
                raise UsageError(f'Option "{spec(used)}" can\'t be used with option "{spec(other)}"')


def require(args: argparse.Namespace, *names: str) -> None:
    """Kafka's ``checkRequiredArgs``."""
    for name in names:
        if not has(args, name):
            raise UsageError(f'Missing required argument "{spec(name)}"')


def load_properties(path: str) -> dict[str, str]:
    """A Java properties file (``key=value`` or ``key: value``, ``#``/``!`` comments)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    props = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key, value = (line, "") if sep < 0 else (line[:sep].strip(), line[sep + 1:].strip())
        props[key] = value
    return props


def refuse_zookeeper(args: argparse.Namespace, command: str) -> bool:
    """Print why ``--zookeeper`` cannot work and return True when it was given (the command exits 1)."""
    if args.zookeeper is None:
        return False
    print(f"{command}: --zookeeper is not supported: Strata's tools talk to the brokers over the Kafka protocol "
          "only (as Kafka's own tools do since 3.0). Use --bootstrap-server HOST:PORT instead.", file=sys.stderr)
    return True


def open_admin(args: argparse.Namespace) -> KafkaAdmin:
    """Connect as ``--bootstrap-server`` and ``--command-config`` say; UsageError for what cannot work."""
    props = load_properties(args.command_config) if args.command_config else {}
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol != "PLAINTEXT":
        raise UsageError(f"security.protocol={protocol} in {args.command_config} is not supported: only PLAINTEXT")
    timeout_s = DEFAULT_TIMEOUT_S
    for key in ("default.api.timeout.ms", "request.timeout.ms"):
        if key in props:
            try:
                timeout_s = max(1.0, int(props[key]) / 1000)
            except ValueError:
                raise UsageError(f"Invalid value {props[key]} for configuration {key}") from None
    admin = connect(args.bootstrap_server, timeout_s)
    if "client.id" in props:
        admin.client_id = props["client.id"]
    return admin


def error_class(e: Exception) -> str:
    """The Java exception name Kafka would print for ``e``."""
    if isinstance(e, AdminError):
        return f"org.apache.kafka.common.errors.{e.exception}"
    if isinstance(e, (WireError, KafkaClientError)):
        return "org.apache.kafka.common.KafkaException"
    return "java.lang.IllegalArgumentException"


def optional(value: Any) -> str:
    """Java's ``Optional.toString()``, which some of Kafka's messages print verbatim."""
    return "Optional.empty" if value is None else f"Optional[{value}]"
