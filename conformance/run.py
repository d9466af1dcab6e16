#!/usr/bin/env python3
"""``make conformance``: librdkafka's own test suite (its ``tests/`` directory) against Strata.

Steps, each bounded and logged under the work directory (``.conformance/`` by default, git-ignored):

1. **Tree.** ``LIBRDKAFKA_SRC`` is a librdkafka source tree or a ``.tar.gz`` of one (a release tag of
   confluentinc/librdkafka, or Debian's ``apt-get source librdkafka``). It is copied (or unpacked) into
   the work directory and built there, so the given tree is never touched.
2. **Build.** ``./configure`` (system libraries only: never ``--install-deps``, which downloads),
   ``make libs``, ``make -C tests build``. Skipped when the same source was built before.
3. **Cluster.** librdkafka's test scenarios (``tests/scenarios/*.json``) as trivup would start them:
   one ZooKeeper and three Strata brokers (ids 2-4, as trivup numbers its apps), ``num.partitions=4``,
   ``default.replication.factor=3``, auto-create on for the ``default`` scenario and off for
   ``noautocreate``. Brokers use the embedded defaults plus ``--set`` keys, not
   ``config/server.properties``: that file is the single-node demo (node.id=1, tiered storage, a fixed
   metrics port), which cluster mode refuses and three brokers cannot share.
4. **Tests.** Each test number runs on its own (``TESTS=0011 ./test-runner -L -p1``, what ``run-test.sh``
   does in ``bare`` mode) in its own process group with a time limit, so one hanging test cannot stop the
   rest. ``-L`` leaves out the tests that need no broker (librdkafka's unit and mock-cluster tests: they
   test the client alone). A broker that died during a test is reported and the cluster restarted.
5. **Verdict.** A table (passed / failed / skipped per test with the reason) and a comparison with
   ``conformance/expectations.txt``: the run is red when a test outside that list fails or is skipped,
   when a listed test passes (the list shrinks as features land), or when a listed test ends otherwise
   than its status says.

Every scenario's brokers get trivup's ACL authorizer with ``allow.everyone.if.no.acl.found=true``.
``--security ssl,sasl_plaintext,sasl_ssl`` (or ``all``; ``make conformance-secure``) runs the secured
scenarios instead: certificates made with openssl as trivup's SslApp makes them, one cluster whose brokers
also have SASL_PLAINTEXT, SSL and SASL_SSL listeners (SASL PLAIN and SCRAM users, ``ssl.client.auth=required``
on SSL, ``connections.max.reauth.ms``), and per scenario the ``test.conf`` and ``SSL_*`` environment that
trivup's LibrdkafkaTestApp writes for that client protocol. Its results (and expectations) are named
``<test>@<scenario>``.

Usage: ``python conformance/run.py --src PATH [--tests 0001,0045] [--timeout 300] [--work-dir DIR]
[--security all]``;
``--from-logs`` prints the table and verdict of the last run again from its logs (after editing
expectations.txt, say) without running anything. Exit code 0 = green, 1 = expectation mismatches,
2 = could not build or start the cluster.

It lives in a top-level ``conformance/`` folder, not in ``src/strata/tools`` (those ship with the product)
nor in ``tests/`` (pytest's tree, run by ``make test``): it is a developer tool with its own data file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXPECTATIONS = HERE / "expectations.txt"

KAFKA_VERSION = "3.9.0"     # TEST_KAFKA_VERSION: the Kafka release whose features Strata implements
# librdkafka's share-consumer tests (KIP-932) skip themselves below Kafka 4.2; Strata serves share groups
# (issue 30), so they run as against 4.2 while the rest of the suite keeps the 3.9 feature set it was tuned to
SHARE_TESTS = range(170, 190)
SHARE_KAFKA_VERSION = "4.2.0"
# Tests whose checks of Kafka 4 features Strata serves run as against 4.2 too: 0081's GROUP configs
# (IncrementalAlterConfigs / DescribeConfigs on GROUP resources, issue 30) and a group's five authorized
# operations (DESCRIBE_CONFIGS and ALTER_CONFIGS besides Kafka 3's three); as 3.9 it expects INVALID_REQUEST
KAFKA4_TESTS = {81}
# Tests whose consumer-protocol (KIP-848) runs need the timeouts librdkafka's CI gives them (CI=true: every
# test timeout x3; Semaphore, which runs librdkafka's consumer-protocol suite, sets CI). 0113's
# t_max_poll_interval_exceeded waits for the stalled member's session to expire, and under KIP-848 that is the
# broker's group.consumer.session.timeout.ms (45 s in Kafka and Strata: the test's own 6 s session.timeout.ms
# is a classic-protocol setting the client drops), past the subtest's 30 s unless tripled.
CONSUMER_CI_TESTS = {113}
DEFAULT_TIMEOUT_S = 300     # per test number; the test-runner has its own, shorter, per-test timeouts
# Test numbers that pass but need longer than the default (measured on 2 shared cores).
LONG_TESTS_S = {
    "0113": 1500,  # cooperative rebalance: ~11 minutes of rebalances, sessions and max.poll timeouts
    "0174": 1500,  # share groups: 19 subtests, ~200,000 acks=all records, most flushed one by one (811 s)
}
BROKER_IDS = (2, 3, 4)      # trivup's app ids (ZooKeeper is app 1); 0016 reads BROKER_ADDRESS_2
ZK_CHROOT = "/strata-conformance"
READY_TIMEOUT_S = 60.0
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\(B")
SUMMARY_LINE = re.compile(r"^\|\s*(\S+)\s*\|\s*(DNS|SKIPPED|RUNNING|PASSED|FAILED)\s*\|\s*([\d.]+)s\s*\|\s?(.*)$")
VERDICT_LINE = re.compile(r"=+ Test (\S+) (PASSED|FAILED|SKIPPED) =+")
FAILURE_LINE = re.compile(r'### Test "([^" (]+)[^"]*" failed at ([^:]+):(\d+):[^ ]*\(\) at [^#]*###')
SKIP_LINE = re.compile(r"\[(\S+)\s*/\s*[\d.]+s\] WARN: SKIPPING TEST: (.*)$")
RUNNING_LINE = re.compile(r"=+ Running test (\S+) =+")
STATUSES = ("fail", "skip", "flaky")
CAUSE = re.compile(r"^(issue \d+[a-z]?( item \d+)?|not planned|suspected bug|environment|librdkafka)\b")

# trivup (0.12) gives every broker of every scenario an ACL authorizer that lets everyone do what no ACL
# mentions (server.properties.template and KafkaBrokerApp._add_simple_authorizer): 0081 creates, lists and
# deletes ACLs, 0109/0115/0119 add DENY ACLs with kafka-acls.sh.
TRIVUP_AUTHORIZER = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}

# -- the secured cluster (``--security``) ---------------------------------------------------------------
# trivup with SslApp and sasl_mechanisms gives each broker four listeners, PLAINTEXT (inter-broker and the
# kafka-*.sh tools), SASL_PLAINTEXT, SSL and SASL_SSL; the test client (LibrdkafkaTestApp) picks one with
# security.protocol in test.conf. One secured cluster therefore serves every client protocol: each
# "security scenario" below is a test.conf (and SSL_* environment) against the same brokers.
SASL_USER, SASL_PASSWORD = "testuser", "testpass"  # interactive_broker_version.py's default sasl_users
SSL_KEY_PASS = "12345678"                            # SslApp's ssl_key_pass
REAUTH_MS = 10000   # connections.max.reauth.ms: 0142 needs it non-zero and runs ~17 of these intervals
SECURITY_PROTOCOLS = {  # scenario -> (security.protocol, the default SASL mechanism of its test.conf)
    "ssl": ("SSL", ""),
    "sasl_plaintext": ("SASL_PLAINTEXT", "SCRAM-SHA-512"),  # sasl_test.py's "SASL SCRAM" suite
    "sasl_ssl": ("SASL_SSL", "PLAIN"),                       # sasl_test.py's "SASL_SSL PLAIN" suite
}
# The test numbers the secured scenarios run, and under which client protocols: the security tests where
# they do something (each skips itself elsewhere: 0097 without SSL_* env, 0135 without PLAIN/SCRAM, 0142
# without SASL; 0115 and 0119 always skip when the cluster needs authentication, so they run only in the
# plaintext scenario), and a handful of ordinary ones to show the secured listeners carry normal traffic.
SECURE_TESTS = {
    "0001": "*", "0002": "*", "0003": "*", "0011": "*", "0012": "*",  # (0004_conf needs no broker)
    "0081": "sasl_plaintext,sasl_ssl",      # its authorized-operations parts need SASL PLAIN/SCRAM
    "0097": "ssl,sasl_ssl",
    "0109": "*",
    "0126": "sasl_plaintext",               # skips itself without OAUTHBEARER/OIDC
    "0135": "sasl_plaintext,sasl_ssl",
    "0142": "sasl_plaintext",               # ~3 minutes: 17 intervals of connections.max.reauth.ms
}


def security_of(scenario: str) -> tuple[str, str] | None:
    """(security.protocol, SASL mechanism) of a secured scenario (``sasl_ssl``, ``sasl_ssl:SCRAM-SHA-256``);
    None for librdkafka's own (plaintext) scenarios."""
    name, _, mech = scenario.partition(":")
    if name not in SECURITY_PROTOCOLS:
        return None
    proto, default_mech = SECURITY_PROTOCOLS[name]
    return proto, (mech.upper() or default_mech) if proto.startswith("SASL") else ""


# ``--group-protocol consumer``: the whole suite again with TEST_CONSUMER_GROUP_PROTOCOL=consumer (KIP-848), as
# librdkafka's own CI runs it, in each of librdkafka's scenarios (``consumer`` is the default one,
# ``consumer/noautocreate`` the other); its results (and expectations) are named ``<test>@consumer``.
GROUP_PROTOCOL_RUNS = ("consumer",)


def group_protocol_of(scenario: str) -> str | None:
    head = scenario.split("/", 1)[0]
    return head if head in GROUP_PROTOCOL_RUNS else None


def is_variant(scenario: str) -> bool:
    """A run named ``<test>@<...>``: a secured scenario, or the consumer group protocol."""
    return group_protocol_of(scenario) is not None or security_of(scenario) is not None


def rdk_scenario(scenario: str) -> str:
    """The librdkafka scenario (TEST_SCENARIO) a run is: the secured cluster is the default one, and a
    consumer-protocol run names its scenario after the slash (none: the default one)."""
    if security_of(scenario):
        return "default"
    if group_protocol_of(scenario):
        return scenario.partition("/")[2] or "default"
    return scenario


def file_part(scenario: str) -> str:
    return scenario.replace(":", "-").replace("/", "-")


def log_name(number: str, scenario: str) -> str:
    return f"{number}{'' if scenario == 'default' else '-' + file_part(scenario)}.log"


def keep_broker_logs(cluster: StrataCluster, logs: Path, number: str, scenario: str) -> None:
    """Copy the brokers' logs beside a failed (or killed) test's log, as they are when it ends: the next run
    starts its clusters over them, and a failure seen once in a long run is otherwise left without them. Both
    are also kept in ``<work>/failures/<time>-<test>/``, which no run empties."""
    stem = log_name(number, scenario).removesuffix(".log")
    for b in cluster.brokers:
        if b.log_path.exists():
            shutil.copyfile(b.log_path, logs / f"{stem}.broker-{b.broker_id}.log")
    # ``logs`` is emptied by the next run: a copy of the test's and brokers' logs outlives it, for the failure
    # of a flaky test that the next run does not repeat
    kept = logs.parent / "failures" / f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}"
    kept.mkdir(parents=True, exist_ok=True)
    for path in logs.glob(f"{stem}.*"):
        if path.name == log_name(number, scenario) or path.name.startswith(f"{stem}.broker-"):
            shutil.copyfile(path, kept / path.name)


def log(msg: str) -> None:
    print(msg, flush=True)


# -- the librdkafka tree: copy or unpack, build ------------------------------------------------------------


def source_digest(src: Path) -> str:
    """Identifies the given source (path + size/mtime of the tarball, or of the tree's key files)."""
    h = hashlib.sha256(str(src.resolve()).encode())
    files = [src] if src.is_file() else [src / "src" / "rdkafka.h", src / "tests" / "test.c", src / "configure.self"]
    for f in files:
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:16]


def prepare_tree(src: Path, work: Path) -> Path:
    """The build copy of ``src`` under ``work/librdkafka``; reused when it was made from the same source."""
    tree = work / "librdkafka"
    stamp = work / "librdkafka.source"
    digest = source_digest(src)
    if stamp.exists() and stamp.read_text().strip() == digest and (tree / "tests" / "test.c").exists():
        return tree
    if tree.exists():
        shutil.rmtree(tree)
    if src.is_file():
        log(f"unpacking {src} -> {tree}")
        with tarfile.open(src) as tar:
            tops = {m.name.split("/", 1)[0] for m in tar.getmembers()}
            tar.extractall(work / "unpack", filter="data")
        inner = work / "unpack" / tops.pop() if len(tops) == 1 else work / "unpack"
        inner.rename(tree)
        shutil.rmtree(work / "unpack", ignore_errors=True)
    else:
        log(f"copying {src} -> {tree}")
        shutil.copytree(src, tree, symlinks=True, ignore=shutil.ignore_patterns(".git", "*.o", "*.a", "*.so*"))
    if not (tree / "tests" / "test.c").exists():
        raise SystemExit(f"{src} is not a librdkafka source tree (no tests/test.c)")
    (tree / ".strata-built").unlink(missing_ok=True)
    stamp.write_text(digest + "\n")
    return tree


def build(tree: Path, work: Path, jobs: int) -> Path:
    runner = tree / "tests" / "test-runner"
    done = tree / ".strata-built"
    if done.exists() and runner.exists():
        return runner
    build_log = work / "build.log"
    steps = [["./configure"], ["make", f"-j{jobs}", "libs"], ["make", f"-j{jobs}", "-C", "tests", "build"]]
    t0 = time.monotonic()
    with open(build_log, "wb") as out:
        for cmd in steps:
            log(f"build: {' '.join(cmd)}  (log: {build_log})")
            r = subprocess.run(cmd, cwd=tree, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                out.flush()
                tail = build_log.read_bytes()[-4000:].decode(errors="replace")
                raise SystemExit(f"build step {' '.join(cmd)} failed ({r.returncode}):\n{tail}\n"
                                 "(build deps from Debian: build-essential libssl-dev zlib1g-dev libzstd-dev "
                                 "liblz4-dev libsasl2-dev libcurl4-openssl-dev rapidjson-dev)")
    done.write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
    log(f"build: done in {time.monotonic() - t0:.0f}s")
    return runner


def tree_version(tree: Path) -> str:
    m = re.search(r"#define RD_KAFKA_VERSION\s+0x([0-9a-fA-F]{8})", (tree / "src" / "rdkafka.h").read_text())
    if not m:
        return "unknown"
    v = int(m.group(1), 16)
    return f"{v >> 24}.{(v >> 16) & 0xff}.{(v >> 8) & 0xff}"


# -- the test list, from tests/test.c --------------------------------------------------------------------


@dataclass
class Entry:
    name: str           # e.g. 0045_subscribe_update_topic_remove
    number: str         # 0045
    local: bool         # TEST_F_LOCAL: needs no broker
    manual: bool
    scenario: str       # "default", "noautocreate", "default,ak23"


def parse_tests(test_c: Path) -> list[Entry]:
    text = test_c.read_text(errors="replace")
    start = text.index("struct test tests[] = {")
    end = text.index("{NULL}};", start)
    body = text[start:end]
    entries = []
    parts = re.split(r"\b_TEST\(", body)[1:]
    for part in parts:
        m = re.match(r"\s*(\d{4}_\w+)", part)
        if not m:
            continue
        name = m.group(1)
        own = part  # the entry's text, up to the next _TEST( (a trailing comment or #if is harmless)
        sc = re.search(r'\.scenario\s*=\s*"([^"]*)"', own)
        entries.append(Entry(name, name[:4], "TEST_F_LOCAL" in own, "TEST_F_MANUAL" in own,
                             sc.group(1) if sc else "default"))
    return entries


# -- expectations ------------------------------------------------------------------------------------------


@dataclass
class Expectation:
    status: str
    cause: str
    timeout_s: int | None = None


def read_expectations(path: Path) -> dict[str, Expectation]:
    """``<entry> <fail|skip|flaky> [timeout=S] <cause>``; the cause starts with its category."""
    out: dict[str, Expectation] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip() if raw.lstrip().startswith("#") else raw.strip()
        if not line:
            continue
        parts = line.split(None, 2)
        if len(parts) < 3:
            raise SystemExit(f"{path}:{lineno}: want '<test> <status> <cause>': {raw!r}")
        name, status, rest = parts
        timeout = None
        m = re.match(r"timeout=(\d+)\s+(.*)", rest)
        if m:
            timeout, rest = int(m.group(1)), m.group(2)
        m = re.fullmatch(r"\d{4}_\w+(?:@([\w:-]+))?", name)
        if not m:
            raise SystemExit(f"{path}:{lineno}: not a test name (<test> or <test>@<secured scenario>): {name!r}")
        if m.group(1) and not is_variant(m.group(1)):
            raise SystemExit(f"{path}:{lineno}: {m.group(1)!r} is not a secured scenario "
                             f"({', '.join(SECURITY_PROTOCOLS)}, optionally :<SASL mechanism>) nor "
                             f"{' or '.join(GROUP_PROTOCOL_RUNS)}")
        if status not in STATUSES:
            raise SystemExit(f"{path}:{lineno}: status must be one of {STATUSES}: {status!r}")
        if not CAUSE.match(rest):
            raise SystemExit(f"{path}:{lineno}: the cause must start with 'issue N', 'not planned', "
                             f"'suspected bug', 'environment' or 'librdkafka': {rest!r}")
        if name in out:
            raise SystemExit(f"{path}:{lineno}: {name} listed twice")
        out[name] = Expectation(status, rest.strip(), timeout)
    return out


# -- certificates, as trivup's SslApp makes them ----------------------------------------------------------


class SslFiles:
    """trivup's SslApp with openssl only: two CAs (an unused one first, for the multi-CA PEM), the client
    key ``librdkafka<id>`` in PEM, DER and PKCS#12 (with both CAs), and a broker certificate. trivup puts the
    broker key in a JKS keystore (keytool); Strata takes a PEM keystore instead, whose certificate names
    ``localhost`` and ``127.0.0.1`` (trivup: ``DNS:localhost``; the runner's listeners are ``127.0.0.1``, and
    librdkafka checks the broker's host name by default)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.unused_ca = self._ca("SslApp_unused")
        self.ca = self._ca("SslApp")
        self.all_cas = root / "all_cas.pem"
        self.all_cas.write_bytes(Path(self.unused_ca["pem"]).read_bytes() + Path(self.ca["pem"]).read_bytes())
        self.client = self._client_cert("librdkafka" + hashlib.sha256(str(root).encode()).hexdigest()[:8])
        self.broker_keystore = self._broker_keystore("broker")

    def _run(self, *args: str) -> None:
        r = subprocess.run(["openssl", *args], cwd=self.root, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"openssl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")

    @staticmethod
    def _subj(cn: str) -> str:
        return f"/C=NN/ST=ST/L=L/O=O/CN={cn}"

    def _ca(self, cn: str) -> dict[str, str]:
        ret = {k: str(self.root / f"ca_{cn}.{k}") for k in ("key", "srl", "pem", "der")}
        ret["password"] = SSL_KEY_PASS
        self._run("req", "-new", "-x509", "-keyout", ret["key"], "-out", ret["pem"], "-days", "10000",
                  "-passin", f"pass:{SSL_KEY_PASS}", "-passout", f"pass:{SSL_KEY_PASS}", "-subj", self._subj(cn))
        self._run("x509", "-outform", "der", "-in", ret["pem"], "-out", ret["der"])
        return ret

    def _sign(self, req: str, out: str, extfile: str | None = None) -> None:
        args = ["x509", "-req", "-passin", f"pass:{SSL_KEY_PASS}", "-in", req, "-CA", self.ca["pem"],
                "-CAkey", self.ca["key"], "-CAserial", self.ca["srl"], "-CAcreateserial", "-days", "10000",
                "-out", out]
        self._run(*args, *(["-extfile", extfile] if extfile else []))

    def _client_cert(self, cn: str) -> dict:
        ret = {"priv": {"pem": str(self.root / f"{cn}-priv.pem"), "der": str(self.root / f"{cn}-priv.der")},
               "pub": {"pem": str(self.root / f"{cn}-pub.pem"), "der": str(self.root / f"{cn}-pub.der")},
               "pkcs": str(self.root / f"{cn}.pfx"), "req": str(self.root / f"{cn}.req"),
               "password": SSL_KEY_PASS}
        self._run("genpkey", "-algorithm", "RSA", "-pass", f"pass:{SSL_KEY_PASS}", "-out", ret["priv"]["pem"])
        self._run("req", "-passin", f"pass:{SSL_KEY_PASS}", "-passout", f"pass:{SSL_KEY_PASS}", "-key",
                  ret["priv"]["pem"], "-new", "-out", ret["req"], "-subj", self._subj(cn))
        self._sign(ret["req"], ret["pub"]["pem"])
        self._run("x509", "-outform", "der", "-in", ret["pub"]["pem"], "-out", ret["pub"]["der"])
        self._run("rsa", "-outform", "der", "-passin", f"pass:{SSL_KEY_PASS}", "-in", ret["priv"]["pem"],
                  "-out", ret["priv"]["der"])
        self._run("pkcs12", "-export", "-descert", "-out", ret["pkcs"], "-inkey", ret["priv"]["pem"],
                  "-in", ret["pub"]["pem"], "-certfile", self.unused_ca["pem"], "-certfile", self.ca["pem"],
                  "-passin", f"pass:{SSL_KEY_PASS}", "-passout", f"pass:{SSL_KEY_PASS}")
        return ret

    def _broker_keystore(self, cn: str) -> Path:
        key, req, cert = (str(self.root / f"{cn}.{x}") for x in ("key", "req", "pem"))
        ext = self.root / f"{cn}.exts"
        ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        self._run("genpkey", "-algorithm", "RSA", "-out", key)
        self._run("req", "-key", key, "-new", "-out", req, "-subj", self._subj(cn))
        self._sign(req, cert, str(ext))
        keystore = self.root / f"{cn}-keystore.pem"
        keystore.write_bytes(Path(key).read_bytes() + Path(cert).read_bytes())
        return keystore

    def env(self) -> dict[str, str]:
        """The SSL_* variables LibrdkafkaTestApp sets (0097 reads them)."""
        env = {f"SSL_ca_{k}": v for k, v in self.ca.items()}
        env.update({f"SSL_unused_ca_{k}": v for k, v in self.unused_ca.items()})
        env["SSL_all_cas_pem"] = str(self.all_cas)
        env["SSL_client_auth"] = "required"
        for k, v in self.client.items():
            if isinstance(v, dict):
                env.update({f"SSL_{k}_{k2}": v2 for k2, v2 in v.items()})
            else:
                env[f"SSL_{k}"] = v
        return env

    def client_conf(self) -> list[str]:
        return [f"ssl.ca.location={self.ca['pem']}", f"ssl.certificate.location={self.client['pub']['pem']}",
                f"ssl.key.location={self.client['priv']['pem']}", f"ssl.key.password={SSL_KEY_PASS}"]


# -- the cluster -------------------------------------------------------------------------------------------


@dataclass
class Broker:
    broker_id: int
    port: int           # the PLAINTEXT listener's
    directory: Path
    proc: subprocess.Popen[bytes] | None = None
    ports: dict[str, int] = field(default_factory=dict)  # secured cluster: listener name -> port

    def address(self, protocol: str = "PLAINTEXT") -> str:
        return f"127.0.0.1:{self.port if protocol == 'PLAINTEXT' else self.ports[protocol]}"

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    def tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""


@dataclass
class StrataCluster:
    """One ZooKeeper and three Strata brokers on 127.0.0.1, as librdkafka's scenario files describe; with
    ``ssl`` (the secured cluster), each broker also has SASL_PLAINTEXT, SSL and SASL_SSL listeners."""

    root: Path
    auto_create: bool
    brokers: list[Broker] = field(default_factory=list)
    zk: object = None
    generation: int = 0
    ssl: SslFiles | None = None
    protocol: str = "PLAINTEXT"  # the test client's security.protocol (BROKER_ADDRESS_<id>)

    def start(self) -> StrataCluster:
        from strata.tools.zookeeper import ZooKeeperServer, free_port

        self.generation += 1
        base = self.root / f"cluster-{self.generation}"
        if base.exists():
            shutil.rmtree(base)
        base.mkdir(parents=True)
        self.zk = ZooKeeperServer(base / "zookeeper").start().wait_ready(60)
        connect = f"{self.zk.connect}{ZK_CHROOT}"
        self.brokers = [Broker(i, free_port(), base / f"broker-{i}") for i in BROKER_IDS]
        if self.ssl is not None:
            for b in self.brokers:
                b.ports = {proto: free_port() for proto in ("SASL_PLAINTEXT", "SSL", "SASL_SSL")}
        for b in self.brokers:
            self._spawn(b, connect)
        deadline = time.monotonic() + READY_TIMEOUT_S
        for b in self.brokers:
            while "strata broker ready on" not in b.tail(20000):
                if b.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit(f"broker {b.broker_id} did not start ({b.log_path}):\n{b.tail()}")
                time.sleep(0.1)
        self._wait_registered(deadline)
        if self.ssl is not None:
            self._create_scram_users()
        return self

    def _spawn(self, b: Broker, connect: str) -> None:
        props = {
            "broker.id": b.broker_id,
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port}",
            "log.dirs": b.directory / "logs",
            "zookeeper.connect": connect,
            "zookeeper.session.timeout.ms": 6000,
            "num.partitions": 4,
            "default.replication.factor": 3,
            "offsets.topic.replication.factor": 3,
            "auto.create.topics.enable": str(self.auto_create).lower(),
            "delete.topic.enable": "true",
            "broker.rack": f"RACK{b.broker_id}",  # trivup sets it for Kafka >= 2.4
            # librdkafka's run-share-consumer-tests.sh: the share tests set 1 s acquisition locks per group
            "group.share.min.record.lock.duration.ms": 1000,
            **TRIVUP_AUTHORIZER,
        }
        if self.ssl is not None:
            props.update(self._security_props(b))
        args = [sys.executable, "-m", "strata", "serve", "-v"]  # INFO: elections, ISR changes, groups
        for k, v in props.items():
            args += ["--set", f"{k}={v}"]
        b.directory.mkdir(parents=True, exist_ok=True)
        with open(b.log_path, "ab") as out:
            b.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      cwd=REPO, start_new_session=True)

    def _security_props(self, b: Broker) -> dict[str, object]:
        """KafkaBrokerApp's listeners, SASL and SSL keys with sasl_mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
        and SslApp, in Strata's spelling (PEM keystore instead of JKS, JAAS per listener instead of a file)."""
        plain = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                 f'user_{SASL_USER}="{SASL_PASSWORD}";')
        return {
            "listeners": ",".join([f"PLAINTEXT://127.0.0.1:{b.port}"]
                                  + [f"{proto}://127.0.0.1:{port}" for proto, port in b.ports.items()]),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                              "SASL_SSL:SASL_SSL",
            "security.inter.broker.protocol": "PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": self.ssl.broker_keystore,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": self.ssl.ca["pem"],
            # trivup sets ssl.enabled.protocols=TLSv1.2,TLSv1.1,TLSv1: Strata never accepts the two older ones
            "ssl.enabled.protocols": "TLSv1.2",
            # trivup sets ssl.client.auth=required unprefixed, which Kafka applies to SSL listeners only
            # (ChannelBuilders: SASL_SSL honours only the listener-prefixed key); Strata applies the
            # unprefixed key to SASL_SSL too, so the runner gives it to the SSL listener alone
            "listener.name.ssl.ssl.client.auth": "required",
            "connections.max.reauth.ms": REAUTH_MS,  # not trivup's: 0142 skips without it
        }

    def _create_scram_users(self) -> None:
        """KafkaBrokerApp's post-start kafka-configs.sh --alter --add-config
        'SCRAM-SHA-n=[iterations=4096,password=...]' --entity-type users, as AlterUserScramCredentials."""
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        upserts = [UserScramCredentialUpsertion(SASL_USER, ScramCredentialInfo(m, 4096), SASL_PASSWORD.encode())
                   for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
        try:
            for fut in admin.alter_user_scram_credentials(upserts, request_timeout=30).values():
                fut.result()
        except Exception as exc:  # noqa: BLE001 - any failure means no secured scenario
            self.stop()
            raise SystemExit(f"could not create the SCRAM user {SASL_USER}: {exc!r}") from exc

    def _wait_registered(self, deadline: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            try:
                if len(admin.list_topics(timeout=5).brokers) == len(self.brokers):
                    return
            except Exception:  # noqa: BLE001 - not up yet: ask again
                pass
            time.sleep(0.2)
        self.stop()
        raise SystemExit("the brokers did not all register within "
                         f"{READY_TIMEOUT_S:.0f}s:\n" + "\n".join(b.tail(1500) for b in self.brokers))

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)

    def dead(self) -> list[Broker]:
        return [b for b in self.brokers if b.proc is not None and b.proc.poll() is not None]

    def stop(self) -> None:
        for b in self.brokers:
            if b.proc is not None and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGTERM)
        for b in self.brokers:
            if b.proc is None:
                continue
            try:
                b.proc.wait(30)
            except subprocess.TimeoutExpired:
                b.proc.kill()
                b.proc.wait(10)
        if self.zk is not None:
            self.zk.stop()

    def client_bootstrap(self, protocol: str = "PLAINTEXT") -> str:
        return ",".join(b.address(protocol) for b in self.brokers)

    def env(self) -> dict[str, str]:
        # BROKERS stays PLAINTEXT (trivup: the cluster's own security.protocol), for the kafka-*.sh tools
        env = {"BROKERS": self.bootstrap, "ZK_ADDRESS": f"{self.zk.connect}{ZK_CHROOT}"}
        for b in self.brokers:
            env[f"BROKER_ADDRESS_{b.broker_id}"] = f"{self.protocol}://{b.address(self.protocol)}"
            env[f"BROKER_PID_{b.broker_id}"] = str(b.proc.pid)
        if self.ssl is not None and "SSL" in self.protocol:
            env.update(self.ssl.env())
        return env


# -- running one test number -------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    state: str          # passed | failed | skipped
    reason: str = ""
    duration_s: float = 0.0
    scenario: str = "default"

    @property
    def key(self) -> str:
        """The test's name, with ``@<scenario>`` for a secured scenario (as in expectations.txt)."""
        protocol = group_protocol_of(self.scenario)
        if protocol:
            return f"{self.name}@{protocol}"
        return f"{self.name}@{self.scenario}" if security_of(self.scenario) else self.name


def write_test_conf(conf: Path, cluster: StrataCluster, sec: tuple[str, str] | None) -> None:
    """test.conf (RDKAFKA_TEST_CONF): the bootstrap servers; for a secured scenario what
    LibrdkafkaTestApp writes: security.protocol, the first SASL user of sasl_users, the SSL client key."""
    if sec is None:
        conf.write_text(f"bootstrap.servers={cluster.bootstrap}\n")
        return
    proto, mech = sec
    lines = []
    if mech:
        lines += [f"sasl.mechanisms={mech}", f"sasl.username={SASL_USER}", f"sasl.password={SASL_PASSWORD}"]
    if "SSL" in proto:
        lines += cluster.ssl.client_conf()
    lines += [f"bootstrap.servers={cluster.client_bootstrap(proto)}", f"security.protocol={proto}"]
    conf.write_text("\n".join(lines) + "\n")


def kafka_version_for(number: str) -> str:
    if number.isdigit() and (int(number) in SHARE_TESTS or int(number) in KAFKA4_TESTS):
        return SHARE_KAFKA_VERSION
    return KAFKA_VERSION


def run_number(runner: Path, number: str, scenario: str, cluster: StrataCluster, conf: Path, logs: Path,
               timeout_s: int, kafka_path: str = "") -> tuple[str, float, int | None]:
    """Runs ``TESTS=<number> ./test-runner -L -p1``; returns its output, the duration and its exit code
    (None when it was killed at the time limit)."""
    tests_dir = runner.parent
    env = {**os.environ, **cluster.env(),
           "TESTS": number, "TEST_KAFKA_VERSION": kafka_version_for(number), "TEST_SCENARIO": rdk_scenario(scenario),
           "RDKAFKA_TEST_CONF": str(conf), "TEST_MODE": "bare",
           **({"TEST_CONSUMER_GROUP_PROTOCOL": protocol} if (protocol := group_protocol_of(scenario)) else {}),
           "LD_LIBRARY_PATH": f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}"}
    # KAFKA_PATH: where the tests find bin/kafka-*.sh (kafka-topics.sh, kafka-configs.sh, kafka-acls.sh):
    # this repository by default, whose bin/ has Strata's wrappers
    env["KAFKA_PATH"] = kafka_path or str(REPO)
    env.pop("CI", None)
    if number.isdigit() and group_protocol_of(scenario) == "consumer" and int(number) in CONSUMER_CI_TESTS:
        env["CI"] = "true"
    if number.isdigit() and int(number) in SHARE_TESTS:
        # librdkafka runs its share tests only in its CI (run-share-consumer-tests.sh), where CI=true triples
        # the test timeouts: 0170's "consume any available" steps poll 10 x 2 s by design, whatever the broker
        env["CI"] = "true"
    log_path = logs / log_name(number, scenario)
    t0 = time.monotonic()
    rc: int | None = None
    with open(log_path, "wb") as out:
        # stdout is a file, so fully buffered: line-buffer it, or a kill loses the summary table
        stdbuf = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
        proc = subprocess.Popen([*stdbuf, str(runner), "-L", "-p1"], cwd=tests_dir, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    log_path.with_suffix(".rc").write_text(f"killed={timeout_s}\n" if rc is None else f"{rc}\n")
    return log_path.read_bytes().decode(errors="replace"), time.monotonic() - t0, rc


def parse_output(text: str, entries: list[Entry], scenario: str, rc: int | None, timeout_s: int,
                 duration_s: float) -> list[Result]:
    """One result per entry of the number, from the summary table the test-runner prints at its end (or,
    when it was killed or crashed, from its per-test verdict lines). ``rc`` is None after a kill."""
    clean = ANSI.sub("", text)
    lines = clean.splitlines()
    summary: dict[str, tuple[str, float, str]] = {}
    verdicts: dict[str, str] = {}
    failures: dict[str, str] = {}
    skips: dict[str, str] = {}
    running: list[str] = []
    for i, line in enumerate(lines):
        if m := SUMMARY_LINE.match(line):
            summary[m.group(1)] = (m.group(2), float(m.group(3)), m.group(4).strip())
        elif m := VERDICT_LINE.search(line):
            verdicts[m.group(1)] = m.group(2)
        elif m := FAILURE_LINE.search(line):
            msg = lines[i + 1].strip() if i + 1 < len(lines) else ""
            failures.setdefault(m.group(1), f"{m.group(2)}:{m.group(3)}: {msg}")
        elif m := SKIP_LINE.search(line):
            skips.setdefault(m.group(1).strip(), m.group(2).strip())
        elif m := RUNNING_LINE.search(line):
            running.append(m.group(1))
    last = running[-1] if running else None
    results = []
    for e in entries:
        state, dur, extra = summary.get(e.name, ("", 0.0, ""))
        state = state or verdicts.get(e.name, "")
        if not state and (e.name in skips or rdk_scenario(scenario) not in e.scenario.split(",")):
            state = "SKIPPED"  # skipped before it started (no summary when the test-runner was killed)
        fail = failures.get(e.name, "")
        if state == "PASSED":
            results.append(Result(e.name, "passed", "", dur, scenario))
        elif state == "SKIPPED":
            reason = skips.get(e.name) or extra
            if not reason and rdk_scenario(scenario) not in e.scenario.split(","):
                reason = f"requires test scenario {e.scenario}"
            results.append(Result(e.name, "skipped", _one_line(reason), dur, scenario))
        elif state == "FAILED":
            timeout = "timed out" in (fail + extra)
            results.append(Result(e.name, "failed", _one_line(fail or extra or "failed")
                                  + (" (the test-runner's own timeout)" if timeout and "timed out" not in fail else ""),
                                  dur, scenario))
        elif rc is None and e.name == last:
            why = f"hung: killed after {timeout_s}s" + (f"; first failure: {fail}" if fail else "")
            results.append(Result(e.name, "failed", _one_line(why), duration_s, scenario))
        elif state == "DNS" or (rc is None and e.name not in running):
            why = f"not run: {last} ended the test-runner" if last else "not run"
            results.append(Result(e.name, "failed", _one_line(why), 0.0, scenario))
        else:
            tail = " | ".join(x.strip() for x in lines[-3:] if x.strip())
            why = fail or f"the test-runner exited with {rc} without a verdict [{tail}]"
            results.append(Result(e.name, "failed", _one_line(why), 0.0, scenario))
    return results


def _one_line(s: str, limit: int = 160) -> str:
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


# -- the table and the verdict -----------------------------------------------------------------------------


LOCAL_SKIP = "Filtered due to negative test flags"


def classify(results: dict[str, Result], entries: list[Entry], exp: dict[str, Expectation]
             ) -> tuple[list[str], list[tuple[Result, str]]]:
    """Mismatches between the results and the expectations (and the note each row of the table gets)."""
    problems: list[str] = []
    rows: list[tuple[Result, str]] = []
    by_name = {e.name: e for e in entries}
    for name, r in results.items():
        e = exp.get(name)
        local = by_name[r.name].local and r.state == "skipped" and LOCAL_SKIP in r.reason
        note = ""
        if e is None:
            if r.state == "failed":
                problems.append(f"{name}: FAILED and not in expectations.txt: {r.reason}")
                note = "UNEXPECTED"
            elif r.state == "skipped" and not local:
                problems.append(f"{name}: skipped and not in expectations.txt: {r.reason}")
                note = "UNEXPECTED"
        else:
            note = f"expected {e.status}"
            ok = ((e.status == "fail" and r.state == "failed") or (e.status == "skip" and r.state == "skipped")
                  or (e.status == "flaky" and r.state in ("passed", "failed")))
            if not ok:
                if r.state == "passed":
                    problems.append(f"{name}: PASSES now: remove it from expectations.txt ({e.cause})")
                    note = "NOW PASSES"
                else:
                    problems.append(f"{name}: {r.state} but expectations.txt says {e.status}: {r.reason}")
                    note = "UNEXPECTED"
        rows.append((r, note))
    absent = [name for name in exp if name.split("@")[0] not in by_name]
    if absent:  # another librdkafka version (the list is measured against the one named in its header)
        log(f"note: {len(absent)} tests of expectations.txt are not in this librdkafka tree: {', '.join(absent)}")
    return problems, rows


def print_table(rows: list[tuple[Result, str]], exp: dict[str, Expectation], local: set[str]) -> None:
    w = max(len(r.key) for r, _ in rows)
    log("")
    log(f"{'TEST':<{w}}  {'RESULT':<7}  {'TIME':>7}  REASON")
    for r, note in rows:
        reason = r.reason
        if r.state != "passed" and r.key in exp:
            reason = f"{reason}  <- {exp[r.key].cause}" if reason else exp[r.key].cause
        if r.state == "skipped" and LOCAL_SKIP in r.reason and r.name in local:
            reason = "needs no broker (librdkafka unit/mock test; run by -l, not against Strata)"
        if r.scenario != "default" and not security_of(r.scenario):
            reason = f"[scenario {r.scenario}] {reason}"
        flag = f"  [{note}]" if note and not note.startswith("expected") else ""
        log(f"{r.key:<{w}}  {r.state.upper():<7}  {r.duration_s:6.1f}s  {reason}{flag}")


def totals(results: dict[str, Result]) -> dict[str, int]:
    t = {"passed": 0, "failed": 0, "skipped": 0}
    for r in results.values():
        t[r.state] += 1
    return t


def skip_breakdown(results: dict[str, Result], entries: list[Entry]) -> dict[str, int]:
    by_name = {e.name: e for e in entries}
    out: dict[str, int] = {}
    for r in results.values():
        if r.state != "skipped":
            continue
        if LOCAL_SKIP in r.reason and by_name[r.name].local:
            key = "need no broker (librdkafka's unit and mock-cluster tests)"
        elif LOCAL_SKIP in r.reason:
            key = "librdkafka's known issues (TEST_F_KNOWN_ISSUE)"
        elif "not applicable for broker version" in r.reason:
            key = "need a newer Kafka (share groups, KIP-932)"
        elif re.search(r"SASL|SSL", r.reason):
            key = "need SASL/SSL"
        elif "scenario" in r.reason:
            key = "need another scenario"
        else:
            key = r.reason
        out[key] = out.get(key, 0) + 1
    return out


# -- main --------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=os.environ.get("LIBRDKAFKA_SRC", ""),
                    help="librdkafka source tree or .tar.gz (default: $LIBRDKAFKA_SRC)")
    ap.add_argument("--work-dir", default=os.environ.get("CONFORMANCE_DIR", str(REPO / ".conformance")))
    ap.add_argument("--tests", default=os.environ.get("CONFORMANCE_TESTS", ""),
                    help="comma-separated test numbers (default: all)")
    ap.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S, help="seconds per test number")
    ap.add_argument("--jobs", type=int, default=2, help="make -j for the build")
    ap.add_argument("--expectations", default=str(EXPECTATIONS))
    ap.add_argument("--no-scenarios", action="store_true", help="only the default scenario")
    ap.add_argument("--group-protocol", default=os.environ.get("CONFORMANCE_GROUP_PROTOCOL", "classic,consumer"),
                    help="the group protocols to run the suite with: classic (librdkafka's scenarios), consumer "
                         "(again with TEST_CONSUMER_GROUP_PROTOCOL=consumer, KIP-848, as librdkafka's CI does; "
                         "results named <test>@consumer); default both")
    ap.add_argument("--security", default=os.environ.get("CONFORMANCE_SECURITY", ""),
                    help="run the secured scenarios instead of librdkafka's plaintext ones: a comma-separated "
                         f"list of {', '.join(SECURITY_PROTOCOLS)} (a SASL one may name its mechanism, "
                         "sasl_ssl:SCRAM-SHA-256) or 'all'; one secured cluster (certificates, SASL users, "
                         "ACL authorizer) serves them all. Without --tests: the security tests and a few "
                         "ordinary ones (SECURE_TESTS)")
    ap.add_argument("--kafka-path", default=os.environ.get("CONFORMANCE_KAFKA_PATH", ""),
                    help="KAFKA_PATH for the tests that run bin/kafka-*.sh (default: this repository, "
                         "whose bin/ holds Strata's kafka-*.sh wrappers)")
    ap.add_argument("--from-logs", action="store_true",
                    help="no tests: re-read the logs of the last run and print its table and verdict again")
    args = ap.parse_args()

    if not args.src:
        log("LIBRDKAFKA_SRC is not set: give a librdkafka source tree or tarball, e.g.\n"
            "  git clone --depth 1 -b v2.15.0 https://github.com/confluentinc/librdkafka\n"
            "  apt-get source librdkafka\n"
            "  make conformance LIBRDKAFKA_SRC=/path/to/librdkafka")
        return 2
    src = Path(args.src).expanduser().resolve()
    if not src.exists():
        log(f"LIBRDKAFKA_SRC={src} does not exist")
        return 2
    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    exp = read_expectations(Path(args.expectations))

    tree = prepare_tree(src, work)
    runner = build(tree, work, args.jobs)
    entries = [e for e in parse_tests(tree / "tests" / "test.c") if not e.name.startswith("8")]
    wanted = {t.strip().zfill(4) for t in args.tests.split(",") if t.strip()}
    numbers = sorted({e.number for e in entries if not wanted or e.number in wanted})
    by_number: dict[str, list[Entry]] = {}
    for e in entries:
        by_number.setdefault(e.number, []).append(e)
    logs = work / "logs"
    if not args.from_logs:
        if logs.exists():
            shutil.rmtree(logs)
        logs.mkdir()

    security = [x.strip() for x in args.security.split(",") if x.strip()]
    if security == ["all"]:
        security = list(SECURITY_PROTOCOLS)
    for sc in security:
        if not security_of(sc):
            log(f"--security: unknown secured scenario {sc!r} (want {', '.join(SECURITY_PROTOCOLS)} or all)")
            return 2
    protocols = [x.strip() for x in args.group_protocol.split(",") if x.strip()]
    if not protocols or any(p not in ("classic", *GROUP_PROTOCOL_RUNS) for p in protocols):
        log(f"--group-protocol: {args.group_protocol!r} is not a list of classic, {', '.join(GROUP_PROTOCOL_RUNS)}")
        return 2
    classic = "classic" in protocols
    plan: list[tuple[str, list[str]]] = [] if security or not classic else [("default", numbers)]
    for sc in security:
        if wanted:
            plan.append((sc, numbers))
        else:
            plan.append((sc, [n for n in sorted(SECURE_TESTS) if n in by_number
                              and (SECURE_TESTS[n] == "*" or sc.split(":")[0] in SECURE_TESTS[n].split(","))]))
    other = sorted({sc for e in entries for sc in e.scenario.split(",")} - {"default", "ak23"})
    if args.no_scenarios or security:
        other = []
    for sc in other if classic else ():  # ak23: Kafka 2.3's scenario, for 0103 only; it also runs in "default"
        nums = [n for n in numbers if any(sc in e.scenario.split(",") for e in by_number[n])]
        if nums:
            plan.append((sc, nums))
    for p in protocols if not security else ():
        if p in GROUP_PROTOCOL_RUNS:
            # the share-consumer tests do not read group.protocol (a ShareConsumer speaks KIP-932 either way):
            # run once, in the classic pass, unless asked for by number
            plan.append((p, [n for n in numbers if wanted or not (n.isdigit() and int(n) in SHARE_TESTS)]))
            for sc in other:
                nums = [n for n in numbers if any(sc in e.scenario.split(",") for e in by_number[n])]
                if nums:
                    plan.append((f"{p}/{sc}", nums))

    results: dict[str, Result] = {}
    crashes: list[str] = []
    secure_cluster: StrataCluster | None = None
    t_start = time.monotonic()
    total_runs = sum(len(n) for _, n in plan)
    done = 0

    def record(number: str, scenario: str, text: str, dur: float, rc: int | None, timeout_s: int) -> None:
        try:
            rs = parse_output(text, by_number[number], scenario, rc, timeout_s, dur)
        except Exception as exc:  # noqa: BLE001 - one unparsable log must not lose the run
            rs = [Result(e.name, "failed", f"runner could not read the output: {exc!r}", dur, scenario)
                  for e in by_number[number]]
        for r in rs:
            prev = results.get(r.key)
            # a later scenario only fills in the entries an earlier one could not run
            if prev is None or (prev.state == "skipped" and "scenario" in prev.reason
                                and not (r.state == "skipped" and "scenario" in r.reason)):
                results[r.key] = r
        main_fail = re.search(r'### Test "<MAIN>" failed at [^\n]*###\n([^\n]*)', ANSI.sub("", text))
        counts = " ".join(f"{s[0]}{sum(r.state == s for r in rs)}" for s in ("passed", "failed", "skipped"))
        log(f"[{done:3}/{total_runs}] {number} {scenario:<8} {dur:6.1f}s  {counts}"
            f"{'  KILLED at the time limit' if rc is None else ''}"
            f"{f'  (after the tests: {main_fail.group(1).strip()})' if main_fail else ''}"
            + "".join(f"\n            {r.name}: {r.state} {r.reason}" for r in rs if r.state == "failed"))

    for scenario, nums in plan:
        if args.from_logs:  # re-read an earlier run's logs: no cluster, no tests
            for number in nums:
                done += 1
                log_path = logs / log_name(number, scenario)
                if not log_path.exists():
                    continue
                text = log_path.read_bytes().decode(errors="replace")
                rc_path = log_path.with_suffix(".rc")
                rc_text = rc_path.read_text().strip() if rc_path.exists() else "0"
                timeout_s = int(rc_text.split("=")[1]) if rc_text.startswith("killed=") else args.timeout
                record(number, scenario, text, 0.0, None if rc_text.startswith("killed") else int(rc_text),
                       timeout_s)
            continue
        sec = security_of(scenario)
        if sec is None or secure_cluster is None or not secure_cluster.brokers:
            ssl_files = SslFiles(work / "ssl") if sec else None
            cluster = StrataCluster(work / ("cluster-secure" if sec else f"cluster-{file_part(scenario)}"),
                                    auto_create=rdk_scenario(scenario) != "noautocreate", ssl=ssl_files)
        else:
            cluster = secure_cluster  # every secured scenario is a client of the same secured cluster
        cluster.protocol = sec[0] if sec else "PLAINTEXT"
        log(f"\n== scenario {scenario}: ZooKeeper + brokers {BROKER_IDS}, num.partitions=4, "
            f"auto-create {'on' if cluster.auto_create else 'off'}"
            + (f", client security.protocol={sec[0]}{' sasl.mechanism=' + sec[1] if sec[1] else ''}" if sec else "")
            + f": {len(nums)} test numbers")
        last_secure = sec is not None and not any(security_of(sc) for sc, _ in plan[plan.index((scenario, nums)) + 1:])
        conf = work / f"test-{file_part(scenario)}.conf"
        try:
            if not cluster.brokers:
                cluster.start()
            if sec:
                secure_cluster = cluster
            write_test_conf(conf, cluster, sec)
            for number in nums:
                done += 1
                timeout_s = max([LONG_TESTS_S.get(number, args.timeout)] +
                                [x.timeout_s for n, x in exp.items() if n[:4] == number and x.timeout_s])
                text, dur, rc = run_number(runner, number, scenario, cluster, conf, logs, timeout_s,
                                           args.kafka_path)
                record(number, scenario, text, dur, rc, timeout_s)
                if rc != 0:
                    keep_broker_logs(cluster, logs, number, scenario)
                (work / "results.partial.json").write_text(json.dumps([r.__dict__ for r in results.values()]))
                dead = cluster.dead()
                if dead:
                    ids = ", ".join(str(b.broker_id) for b in dead)
                    crashes.append(f"{number}: broker(s) {ids} exited during the test; logs: "
                                   + ", ".join(str(b.log_path) for b in dead))
                    log(f"            broker(s) {ids} died: restarting the cluster\n"
                        + "\n".join(b.tail(1500) for b in dead))
                    cluster.stop()
                    cluster.start()
                    write_test_conf(conf, cluster, sec)
        except SystemExit as e:  # the cluster would not start: report what ran
            log(str(e))
            crashes.append(f"scenario {scenario}: the cluster did not start; the rest of its tests did not run")
            cluster.stop()
            cluster.brokers = []
        finally:
            if sec is None or last_secure:
                cluster.stop()

    problems, rows = classify(results, entries, exp)
    order = {e.name: i for i, e in enumerate(entries)}
    scenarios = [sc for sc, _ in plan]
    rows.sort(key=lambda rn: (order[rn[0].name], scenarios.index(rn[0].scenario) if rn[0].scenario in scenarios
                              else 0))
    print_table(rows, exp, {e.name for e in entries if e.local})
    t = totals(results)
    elapsed = "replayed from the logs" if args.from_logs else f"{(time.monotonic() - t_start) / 60:.0f} min"
    log(f"\nTOTAL {len(results)} tests: {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped "
        f"({elapsed}; librdkafka {tree_version(tree)} from {src.name}, TEST_KAFKA_VERSION={KAFKA_VERSION})")
    for k, v in sorted(skip_breakdown(results, entries).items(), key=lambda kv: -kv[1]):
        log(f"  skipped: {v:3}  {k}")
    (work / "results.json").write_text(json.dumps(
        {"totals": t, "results": [r.__dict__ for r, _ in rows], "problems": problems, "crashes": crashes},
        indent=1))
    if crashes:
        log("\nBROKER CRASHES:\n  " + "\n  ".join(crashes))
        problems += [f"broker crash during {c}" for c in crashes]
    if problems:
        log("\nRED: results that expectations.txt does not account for:\n  " + "\n  ".join(problems))
        log(f"(per-test logs: {logs})")
        return 1
    log(f"\nGREEN: every failure and skip is in expectations.txt with its cause (logs: {logs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
