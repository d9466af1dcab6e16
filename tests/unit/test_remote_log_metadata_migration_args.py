"""``strata remote-log-metadata-migration``'s option checks (Kafka's tool's), before any connection."""

from __future__ import annotations

import pytest

from strata.cli import build_parser
from strata.tools.kafka_cli import UsageError
from strata.tools.remote_log_metadata_migration_cmd import check_args


def args(*words: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["remote-log-metadata-migration", *words])


@pytest.mark.parametrize(("words", "retention"), [
    (["--bootstrap-server", "h:1", "--upgrade-to-v1", "--retention-ms", "1209600000"], 1209600000),
    (["--bootstrap-server", "h:1", "--check"], None),
    (["--bootstrap-server", "h:1", "--check", "--upgrade-to-v2"], None),
    (["--bootstrap-server", "h:1", "--check", "--upgrade-to-v2", "--force"], None),
    (["--bootstrap-server", "h:1", "--upgrade-to-v2"], None),
])
def test_accepted(words, retention):
    assert check_args(args(*words)) == retention


@pytest.mark.parametrize(("words", "message"), [
    (["--check"], 'Missing required argument "[bootstrap-server]"'),
    (["--bootstrap-server", "h:1"], "exactly one action"),
    (["--bootstrap-server", "h:1", "--upgrade-to-v1"], 'Missing required argument "[retention-ms]"'),
    (["--bootstrap-server", "h:1", "--upgrade-to-v1", "--retention-ms", "x"], "Cannot parse argument 'x'"),
    (["--bootstrap-server", "h:1", "--upgrade-to-v1", "--retention-ms", "0"], "positive"),
    (["--bootstrap-server", "h:1", "--upgrade-to-v1", "--upgrade-to-v2"], "can't be used with"),
    (["--bootstrap-server", "h:1", "--upgrade-to-v1", "--check", "--retention-ms", "5"], "can't be used with"),
    (["--bootstrap-server", "h:1", "--check", "--force"], "can only be used with"),
    (["--bootstrap-server", "h:1", "--check", "--retention-ms", "5"], "can only be used with"),
])
def test_refused(words, message):
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_args(args(*words))
