"""What the Kafka-style commands share: Kafka's usage errors, ``--command-config``, connecting.

``--command-config`` is the admin client's properties file: ``client.id``, the timeouts, and on a
secured listener the Kafka client's security keys (``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.truststore.*``, ``ssl.keystore.*``...; librdkafka's ``sasl.username`` or
``ssl.ca.location`` are read too: :func:`strata.client.security.client_security`). ``strata tiers`` and
``strata transactions`` take the same file.

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
from strata.client.security import ClientSecurity, client_security, is_security_key
from strata.client.wire import SecurityError, WireError
from strata.errors import InvalidConfigError
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
    """A Java properties file (``key=value`` or ``key: value``, ``#``/``!`` comments, a line ending in ``\\``
    continued on the next, as Kafka's ``sasl.jaas.config`` examples are written)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    props = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an odd number of backslashes: the value goes on on the next line
            pending = line[:-1]
            continue
        pending = ""
        key, value = _entry(line)
        props[key] = value
    if pending:  # the file ends in a continued line
        key, value = _entry(pending)
        props[key] = value
    return props


def _entry(line: str) -> tuple[str, str]:
    sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
    return (line, "") if sep < 0 else (line[:sep].strip(), line[sep + 1:].strip())


def refuse_zookeeper(args: argparse.Namespace, command: str) -> bool:
    """Print why ``--zookeeper`` cannot work and return True when it was given (the command exits 1)."""
    if args.zookeeper is None:
        return False
    print(f"{command}: --zookeeper is not supported: Strata's tools talk to the brokers over the Kafka protocol "
          "only (as Kafka's own tools do since 3.0). Use --bootstrap-server HOST:PORT instead.", file=sys.stderr)
    return True


def command_security(props: dict[str, str], path: str | None) -> ClientSecurity | None:
    """How to connect as the ``--command-config`` properties say (None: plaintext); UsageError naming the
    key that is wrong (never a password)."""
    if not any(is_security_key(k) for k in props):
        return None
    try:
        return client_security(props)
    except InvalidConfigError as e:
        raise UsageError(f"{e} (in {path})") from None


def security_from_file(path: str | None) -> ClientSecurity | None:
    """The security settings of a ``--command-config`` file (None without one, or for plaintext)."""
    if not path:
        return None
    return command_security(load_properties(path), path)


def command_config_security(args: argparse.Namespace, error: type[Exception]) -> ClientSecurity | None:
    """``security_from_file`` of ``args.command_config`` for the strata commands (tiers, transactions),
    whose failures are ``error`` (one line, exit 1)."""
    try:
        return security_from_file(getattr(args, "command_config", None))
    except UsageError as e:
        raise error(str(e)) from None


def unreachable(e: WireError) -> str:
    """``broker unreachable: ...``, or a TLS/SASL refusal as it is (the broker was reached: it said no)."""
    return str(e) if isinstance(e, SecurityError) else f"broker unreachable: {e}"


def command_timeout(props: dict[str, str], default: float = DEFAULT_TIMEOUT_S) -> float:
    timeout_s = default
    for key in ("default.api.timeout.ms", "request.timeout.ms"):
        if key in props:
            try:
                timeout_s = max(1.0, int(props[key]) / 1000)
            except ValueError:
                raise UsageError(f"Invalid value {props[key]} for configuration {key}") from None
    return timeout_s


def open_admin(args: argparse.Namespace) -> KafkaAdmin:
    """Connect as ``--bootstrap-server`` and ``--command-config`` say; UsageError for what cannot work."""
    props = load_properties(args.command_config) if args.command_config else {}
    security = command_security(props, args.command_config)
    admin = connect(args.bootstrap_server, command_timeout(props), security)
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
