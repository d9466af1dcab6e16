"""S3 credentials never show: not in the broker's log, DescribeConfigs, ``/metrics``, ``/v1/tiers`` or ``strata tiers``.

A SeaweedFS of its own (module scope) whose only identity is a distinctive access key and secret; a broker
(``strata -vv serve``: DEBUG logging, the most it ever says) tiers segments to it with those keys given as
``rsm.config.aws.access.key.id`` / ``rsm.config.aws.secret.access.key`` and reads them back from the tier.
Then the same with a wrong secret (every upload refused: 403 errors logged and reported as the partition's
last copy error) and with the store unreachable (transport errors): the secret is absent everywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import tests.support.seaweedfs as seaweedfs_module
from confluent_kafka.admin import ConfigResource, ResourceType
from tests.broker.harness import BrokerProcess
from tests.support.seaweedfs import SeaweedFS
from tests.tiered.harness import S3TieredBroker, wait_until
from tests.tiered.test_kafka_scenarios import kv

from strata.tiered.storage.s3 import HIDDEN, scrub
from strata.tools.tiers import metrics_endpoint
from strata.tools.zookeeper import free_port

ACCESS_KEY = "AKIACANARY7Q2WLEAKCHK"
SECRET = "cAnArY-sEcReT-7f3a9c1e5b2d"  # what must never appear anywhere
WRONG_SECRET = "wRoNg-cAnArY-0d9e8f7a6b5c"  # refused by the store: the error paths
SECRETS = (SECRET, WRONG_SECRET)


class CanarySeaweedFS(SeaweedFS):
    """SeaweedFS whose identity is the canary key pair (``weed mini`` takes it from the module's constants)."""

    def _keys(self) -> Any:
        return mock.patch.multiple(seaweedfs_module, ACCESS_KEY=ACCESS_KEY, SECRET_KEY=SECRET)

    def start(self) -> SeaweedFS:
        with self._keys():
            return super().start()

    def boto3_client(self) -> Any:
        with self._keys():
            return super().boto3_client()


class VerboseBroker(BrokerProcess):
    """``python -m strata -vv serve``: DEBUG logging, so the audit covers every line the broker can write."""

    def start(self) -> BrokerProcess:
        popen = subprocess.Popen

        def verbose(args: list[str], **kwargs: Any) -> Any:
            assert args[1:4] == ["-m", "strata", "serve"], args
            return popen([*args[:3], "-vv", *args[3:]], **kwargs)

        with mock.patch.object(subprocess, "Popen", verbose):  # only the broker is started meanwhile
            return super().start()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CanarySeaweedFS]:
    server = CanarySeaweedFS(tmp_path_factory.mktemp("canary-s3"))
    server.start()
    try:
        yield server
    finally:
        server.close()


def _broker(tmp: Path, store: SeaweedFS, secret: str, endpoint: str | None = None) -> S3TieredBroker:
    props = {"rsm.config.aws.access.key.id": ACCESS_KEY, "rsm.config.aws.secret.access.key": secret,
             "rsm.config.s3.api.call.timeout.ms": "500"}
    if endpoint is not None:
        props["rsm.config.s3.endpoint.url"] = endpoint
    b = S3TieredBroker(tmp, store, key_prefix=f"canary-{uuid.uuid4().hex[:8]}/", **props)
    b.broker = VerboseBroker(b.broker.data_dir, b.broker.props)
    return b


@pytest.fixture(scope="module")
def tiering(tmp_path_factory: pytest.TempPathFactory, store: CanarySeaweedFS) -> Iterator[S3TieredBroker]:
    """Segments of ``t`` tiered with the canary keys, the first of them read back from the store."""
    b = _broker(tmp_path_factory.mktemp("canary-broker"), store, SECRET).start()
    try:
        b.create_topic("t", max_batches_per_segment=1)
        b.produce("t", 0, kv(0, 4))
        b.wait_offloaded("t", 0, [0, 1, 2])
        b.wait_earliest_local("t", 0, 3)
        assert [o for o, _, _ in b.consume("t", 0, 0, 4)] == [0, 1, 2, 3]  # 0-2 from S3
        yield b
    finally:
        b.stop()


# -- where to look --------------------------------------------------------------------------------

def _http(b: S3TieredBroker, path: str) -> str:
    host, port = metrics_endpoint(b.bootstrap)
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as r:
        return str(r.read().decode())


def _tiers(b: S3TieredBroker) -> dict[str, Any]:
    return dict(json.loads(_http(b, "/v1/tiers")))


def _describe(b: S3TieredBroker) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.BROKER, "1")
    return dict(b.admin().describe_configs([resource], request_timeout=30)[resource].result(30))


def _strata_tiers(b: S3TieredBroker) -> str:
    done = subprocess.run([sys.executable, "-m", "strata", "tiers", "--bootstrap", b.bootstrap, "--all"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def _assert_hidden(b: S3TieredBroker, *, access_key_reported: bool = False) -> None:
    """No secret in the broker's output, /metrics, /v1/tiers, DescribeConfigs or `strata tiers`; the key id
    not in the documents either (an S3 error may name it in the log: it is not a secret)."""
    configs = _describe(b)
    for name in ("rsm.config.aws.secret.access.key", "rsm.config.aws.access.key.id"):
        entry = configs[name]
        assert entry.is_sensitive, name
        assert entry.value is None, name
        assert all(s.value is None for s in entry.synonyms.values()), name
    described = "\n".join(f"{e.name}={e.value} {[(s.name, s.value) for s in e.synonyms.values()]}"
                          for e in configs.values())
    assert "rsm.config.s3.bucket.name=" in described  # the rest is reported
    documents = {"/metrics": _http(b, "/metrics"), "/v1/tiers": _http(b, "/v1/tiers"),
                 "DescribeConfigs": described, "strata tiers": _strata_tiers(b)}
    assert "RemoteCopy" in documents["/metrics"]
    for where, text in documents.items():
        for secret in SECRETS:
            assert secret not in text, f"the secret key shows in {where}"
        if not access_key_reported:
            assert ACCESS_KEY not in text, f"the access key id shows in {where}"
    log = b.broker.log_path.read_text(errors="replace")
    assert "DEBUG" in log  # the audit covers the debug lines
    for secret in SECRETS:
        assert secret not in log, f"the secret key shows in the broker's log:\n{_around(log, secret)}"


def _around(text: str, needle: str) -> str:
    i = text.find(needle)
    return text[max(0, i - 600):i + 200]


# -- the cases ------------------------------------------------------------------------------------

def test_tiering_with_static_keys_shows_no_credentials(tiering: S3TieredBroker) -> None:
    assert len(tiering.segment_objects("t", 0)) >= 3  # the canary keys did work
    _assert_hidden(tiering)


def test_the_log_file_is_checked_for_what_a_leak_would_look_like(tiering: S3TieredBroker) -> None:
    """The assertions can fail: the broker's log names the store (endpoint, bucket) it uses."""
    log = tiering.broker.log_path.read_text(errors="replace")
    assert tiering.s3.endpoint in log and tiering.s3.bucket in log


def _copy_error(b: S3TieredBroker) -> str | None:
    for p in _tiers(b)["partitions"]:
        if p["topic"] == "t" and p["partition"] == 0 and p["last_copy_error"]:
            return str(p["last_copy_error"])
    return None


@pytest.mark.parametrize("failure", ["wrong-secret", "unreachable"])
def test_failing_store_errors_show_no_credentials(tmp_path: Path, store: CanarySeaweedFS, failure: str) -> None:
    secret, endpoint = (WRONG_SECRET, None) if failure == "wrong-secret" else \
        (SECRET, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    b = _broker(tmp_path, store, secret, endpoint).start()
    try:
        b.create_topic("t", max_batches_per_segment=1)
        b.produce("t", 0, kv(0, 3))
        error = wait_until("a copy error on t-0", lambda: _copy_error(b))
        assert ("403" in error or "denied" in error) if failure == "wrong-secret" else "unreachable" in error, error
        log = b.broker.log_path
        wait_until("the copy failure logged",
                   lambda: "copy to remote storage failed" in log.read_text(errors="replace"))
        assert b.segment_objects("t", 0) == []
        _assert_hidden(b, access_key_reported=True)
    finally:
        b.stop()


def test_scrub_removes_configured_secrets_and_credential_parts() -> None:
    text = ("PUT http://AKIA:" + SECRET + "@host:9000/b/k?X-Amz-Credential=AKIA%2F2024&X-Amz-Signature=abc123 "
            "token " + WRONG_SECRET)
    clean = scrub(text, SECRETS)
    assert all(s not in clean for s in SECRETS), clean
    assert "abc123" not in clean and "AKIA%2F2024" not in clean and "AKIA:" not in clean
    assert clean.startswith(f"PUT http://{HIDDEN}@host:9000/b/k?X-Amz-Credential={HIDDEN}&X-Amz-Signature={HIDDEN}")
    assert scrub("Error performing GET http://127.0.0.1:1/b/k", SECRETS) == "Error performing GET http://127.0.0.1:1/b/k"
