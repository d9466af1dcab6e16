"""Broker produce and consume throughput over TLS and SASL_SSL, against PLAINTEXT, in the same run.

    .venv/bin/python bench/security_bench.py [--quick] [--reps N] [--mib N] [--json PATH]
    .venv/bin/python bench/security_bench.py --profile [--quick] [--mib N]

One broker process with three listeners (PLAINTEXT, SSL, SASL_SSL; ``sasl.enabled.mechanisms=
SCRAM-SHA-512,PLAIN``) and the PEM keystore of the security tests' PKI
(``tests.security.certs.make_pki``: a CA and an EC P-256 server certificate for localhost / 127.0.0.1,
made with the ``openssl`` CLI). A SCRAM-SHA-512 user is created through the PLAINTEXT listener with
AlterUserScramCredentials. For each of PLAINTEXT, SSL and SASL_SSL/SCRAM-SHA-512, confluent-kafka
produces the same records as ``bench/broker_bench.py`` (1 KiB records, linger.ms=5, acks=1,
uncompressed, one partition; first ``produce()`` to ``flush()``) and consumes them back (assign offset 0
until every record arrived), with the client settings ``security.protocol``, ``ssl.ca.location`` and the
SASL ones added: the numbers compare with ``bench/run.py --only broker``. One difference: the client's
connection to the partition leader (TCP, TLS handshake, SASL exchange) is opened before the timer starts
(broker_bench times it, ~1 ms over PLAINTEXT, but ~10-15 ms and a client-side PBKDF2 over
SASL_SSL/SCRAM); the consumer's connection time is reported on its own.

Protocols interleave within every repetition, the starting one rotating from rep to rep, so drift
(other load, page cache, broker heap) touches all three alike; each repetition starts a fresh broker
on an empty data directory after deleting the last one's files (as broker_bench does: its segment
writes then recycle page-cache pages). Reported per protocol and direction: MB/s of record payload
(10^6 bytes/s) and the broker's CPU seconds per GiB of payload over the timed region, each beside its
ratio to PLAINTEXT as the median of the per-repetition ratios (min-max), and the CPU seconds per GiB of
this process (the client, librdkafka's threads included).

``--profile`` instead runs the broker under cProfile, switched on only around one SSL produce, one SSL
consume, and for comparison one SASL_SSL produce and one PLAINTEXT produce and consume (SIGUSR2 toggles
the profiler in the broker; startup is not in the profiles), writes
``bench/out/security_profile-*.pstats`` and prints the functions with the most own time.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import os
import pstats
import re
import shutil
import signal
import socket
import ssl
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (HERE, ROOT / "src", ROOT):  # ROOT: the security tests' PKI (tests.security.certs)
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from tests.security.certs import make_pki  # noqa: E402

import report as bench_report  # noqa: E402
from broker_bench import READY, RUN_TIMEOUT_S, BenchConfig, Server, _own_cpu_seconds  # noqa: E402
from report import MiB, Result, summarize  # noqa: E402

OUT = HERE / "out"
GiB = 1024 * MiB
USER = "bench-scram"
PASSWORD = "bench-scram-secret"
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="bench-secret";'
LISTENERS = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
# The ready line lists every listener with its bound port: "... (listeners PLAINTEXT://127.0.0.1:41234
# (PLAINTEXT), SSL://127.0.0.1:41235 (SSL), SASL_SSL://127.0.0.1:41236 (SASL_SSL))".
LISTENER_PORT = re.compile(r"(\w+)://[\d.]+:(\d+) \((\w+)\)")
PROFILE_ACK = re.compile(r"bench profiler (on|saved) (\d+)")


@dataclass(frozen=True)
class Protocol:
    name: str  # row label
    listener: str
    client: dict[str, str]  # client settings beside bootstrap.servers

    @property
    def key(self) -> str:
        return self.name.split("/")[0].lower()


def protocols(ca: Path) -> list[Protocol]:
    tls = {"ssl.ca.location": str(ca)}
    return [
        Protocol("PLAINTEXT", "PLAINTEXT", {}),
        Protocol("SSL", "SSL", {"security.protocol": "SSL", **tls}),
        Protocol("SASL_SSL/SCRAM-SHA-512", "SASL_SSL",
                 {"security.protocol": "SASL_SSL", **tls, "sasl.mechanisms": "SCRAM-SHA-512",
                  "sasl.username": USER, "sasl.password": PASSWORD}),
    ]


# -- certificates ----------------------------------------------------------------------------


def make_certs(d: Path) -> tuple[Path, Path]:
    """The security tests' PKI under ``d``: returns (CA certificate, PEM keystore = key + certificate + CA of
    the server certificate, CN=localhost, SAN DNS:localhost, IP:127.0.0.1, EC P-256)."""
    pki = make_pki(d)
    return pki.ca_cert, pki.server.pem


# -- the broker ------------------------------------------------------------------------------


class Broker:
    """One broker process with the three listeners; ``ports`` by listener name."""

    def __init__(self, work: Path, keystore: Path, tag: str, profile_prefix: Path | None = None) -> None:
        data = work / "broker"
        data.mkdir(parents=True, exist_ok=True)
        args = [sys.executable]
        args += [__file__, "--profiled-serve", str(profile_prefix)] if profile_prefix else ["-m", "strata"]
        settings = {
            "log.dirs": str(data / "logs"),
            "listeners": LISTENERS,
            "log.segment.bytes": "268435456",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
        }
        args += ["serve"] + [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
        self.log_path = work / f"broker-{tag}.log"
        self.server = Server(args, self.log_path, READY)
        self.ports: dict[str, int] = {}
        deadline = time.monotonic() + 5
        while len(self.ports) < 3:
            line = next((ln for ln in self.log_path.read_text(errors="replace").splitlines()
                         if "strata broker ready on" in ln), "")
            self.ports = {m.group(1): int(m.group(2)) for m in LISTENER_PORT.finditer(line)}
            if len(self.ports) < 3:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"no listener ports in the ready line: {line!r}")
                time.sleep(0.02)

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def create_scram_user(self) -> None:
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        admin = AdminClient({"bootstrap.servers": self.bootstrap("PLAINTEXT"), "log_level": 3})
        upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              PASSWORD.encode())
        for fut in admin.alter_user_scram_credentials([upsert]).values():
            fut.result(30)

    def toggle_profiler(self) -> None:
        """SIGUSR2 to a ``--profiled-serve`` broker, then wait for its acknowledgement line."""
        before = len(PROFILE_ACK.findall(self.log_path.read_text(errors="replace")))
        self.server.proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while len(PROFILE_ACK.findall(self.log_path.read_text(errors="replace"))) <= before:
            if time.monotonic() > deadline:
                raise RuntimeError("the profiled broker did not acknowledge SIGUSR2")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.stop()


def profiled_serve(prefix: str, argv: list[str]) -> int:
    """(In the child) ``strata <argv>`` with a cProfile profiler that SIGUSR2 switches on, and off again
    (saving ``<prefix>-<n>.pstats``): only the work between the two signals is in a profile."""
    state = {"profiler": None, "n": 0}

    def toggle(*_: object) -> None:
        prof = state["profiler"]
        if prof is None:
            prof = state["profiler"] = cProfile.Profile()
            prof.enable()
            print(f"bench profiler on {state['n']}", flush=True)
        else:
            prof.disable()
            prof.dump_stats(f"{prefix}-{state['n']}.pstats")
            print(f"bench profiler saved {state['n']}", flush=True)
            state["profiler"] = None
            state["n"] += 1

    signal.signal(signal.SIGUSR2, toggle)
    from strata.cli import main as strata_main

    return strata_main(argv)


# -- runs (broker_bench's run_produce / run_consume, with client settings) -------------------------


@dataclass
class Window:
    """The timed region of one run: wall seconds and the CPU the broker and this process spent in it."""

    server: Server | None = None
    elapsed_s: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    _t: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def _cpu(self) -> tuple[float, float]:
        return (self.server.cpu_seconds() if self.server else 0.0), _own_cpu_seconds()

    def start(self) -> None:
        self._t = (time.perf_counter(), *self._cpu())

    def stop(self) -> float:
        now, server, client = time.perf_counter(), *self._cpu()
        self.elapsed_s, self.server_cpu_s, self.client_cpu_s = (now - self._t[0], server - self._t[1],
                                                                client - self._t[2])
        return self.elapsed_s


def run_produce(bootstrap: str, topic: str, cfg: BenchConfig, client: dict[str, str],
                window: Window | None = None) -> float:
    from confluent_kafka import Producer

    window = window or Window()
    value = os.urandom(cfg.record_bytes)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": cfg.linger_ms, "acks": cfg.acks,
                  "compression.type": "none", "enable.idempotence": False, "log_level": 3,
                  "queue.buffering.max.kbytes": 1024 * 1024, **client})
    p.list_topics(topic, timeout=10)  # auto-creates the topic: metadata is not part of the timing
    # Nor is the connection to the partition leader (TCP, TLS handshake, SASL exchange: ~10 ms and a PBKDF2
    # for SASL_SSL/SCRAM): one record to a sibling topic on the same (only) broker opens it first.
    p.produce(f"{topic}-connect", b"x")
    if p.flush(30):
        raise RuntimeError("the connection record was not delivered")
    produce = p.produce
    poll = p.poll
    window.start()
    for _ in range(cfg.records):
        while True:
            try:
                produce(topic, value, partition=0)
                break
            except BufferError:
                poll(0.001)
    left = p.flush(RUN_TIMEOUT_S)
    elapsed = window.stop()
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return elapsed


def run_consume(bootstrap: str, topic: str, cfg: BenchConfig, client: dict[str, str],
                window: Window | None = None, connect_s: list[float] | None = None) -> float:
    from confluent_kafka import Consumer, TopicPartition

    window = window or Window()
    # fetch.queue.backoff.ms: see broker_bench.run_consume (librdkafka's 1 s prefetch pause).
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                  "log_level": 3, "fetch.queue.backoff.ms": 10, **client})
    try:
        c.list_topics(topic, timeout=10)
        # Untimed like the metadata: the connection to the leader (TCP, TLS, SASL), opened by one ListOffsets
        # whose time goes to connect_s.
        opened = time.perf_counter()
        c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        if connect_s is not None:
            connect_s.append(time.perf_counter() - opened)
        window.start()
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while got < cfg.records:
            msgs = c.consume(min(10_000, cfg.records - got), 1.0)
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(str(m.error()))
            got += len(msgs)
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumed {got} of {cfg.records} records in {RUN_TIMEOUT_S}s")
        return window.stop()
    finally:
        c.close()


# -- the benchmark ---------------------------------------------------------------------------


def run(work: Path, cfg: BenchConfig, log: Callable[[str], None] = print) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ca, keystore = make_certs(work / "certs")
    protos = protocols(ca)
    nbytes = cfg.payload_bytes
    base = protos[0].name
    produce = {p.name: Result(f"produce: {p.name}", "baseline" if p.name == base else "subject", nbytes=nbytes,
                              baseline=None if p.name == base else f"produce: {base}", informational=True)
               for p in protos}
    consume = {p.name: Result(f"consume: {p.name}", "baseline" if p.name == base else "subject", nbytes=nbytes,
                              baseline=None if p.name == base else f"consume: {base}", informational=True)
               for p in protos}
    connect_s: dict[str, list[float]] = {p.name: [] for p in protos}  # the consumer's leader connection
    brokers: list[Broker] = []

    def fresh_broker(tag: str) -> Broker:
        """A broker on an empty data dir, the last one's files deleted first (see broker_bench)."""
        if brokers:
            brokers.pop().stop()
        shutil.rmtree(work / "broker", ignore_errors=True)
        brokers.append(Broker(work, keystore, tag))
        brokers[0].create_scram_user()
        return brokers[0]

    def timed(fn: Callable[[Window], float], result: Result, server: Server) -> None:
        os.sync()  # no writeback of an earlier run's data during a timed one
        window = Window(server)
        fn(window)
        result.samples_s.append(window.elapsed_s)
        result.server_cpu_s.append(window.server_cpu_s)
        result.client_cpu_s.append(window.client_cpu_s)

    tls_probe = ""
    try:
        log(f"security bench: {cfg.records} records of {cfg.record_bytes} B = {nbytes / MiB:.0f} MiB per run, "
            f"{cfg.reps} reps x {len(protos)} protocols, {os.cpu_count()} CPUs")
        broker = fresh_broker("warmup")
        tls_probe = negotiated_tls(broker.ports["SSL"], ca)
        log(f"  {tls_probe}")
        for p in protos:  # warm-up (untimed): first-touch pages, first-time code paths, every protocol
            run_produce(broker.bootstrap(p.listener), f"warmup-{p.key}", cfg, p.client)
            run_consume(broker.bootstrap(p.listener), f"warmup-{p.key}", cfg, p.client)
        for rep in range(cfg.reps):
            broker = fresh_broker(f"rep{rep}")
            order = protos[rep % len(protos):] + protos[:rep % len(protos)]
            for p in order:
                bootstrap, topic = broker.bootstrap(p.listener), f"bench-{p.key}"
                timed(partial(run_produce, bootstrap, topic, cfg, p.client), produce[p.name], broker.server)
                timed(partial(run_consume, bootstrap, topic, cfg, p.client, connect_s=connect_s[p.name]),
                      consume[p.name], broker.server)
            log(f"  rep {rep + 1} ({', '.join(p.name for p in order)}): " + "; ".join(
                f"{p.name} produce {produce[p.name].rates[-1]:.0f} / consume {consume[p.name].rates[-1]:.0f} MB/s"
                for p in protos))
    finally:
        for b in brokers:
            b.stop()
        shutil.rmtree(work, ignore_errors=True)
    results = [*produce.values(), *consume.values()]
    rows = summarize(results, 0.0)
    gib = nbytes / GiB
    for row in rows:
        row["broker_cpu_s_per_gib"] = [s / gib for s in row["server_cpu_s"]]
        row["client_cpu_s_per_gib"] = [s / gib for s in row["client_cpu_s"]]
        row["median_broker_cpu_s_per_gib"] = statistics.median(row["broker_cpu_s_per_gib"])
        row["median_client_cpu_s_per_gib"] = statistics.median(row["client_cpu_s_per_gib"])
        if "paired_ratios" in row:
            row["median_paired_ratio"] = statistics.median(row["paired_ratios"])
    by_name = {r["name"]: r for r in rows}
    for direction in (produce, consume):
        base_row = by_name[direction[base].name]
        for p in protos[1:]:  # the broker's CPU per GiB against PLAINTEXT's in the same repetition
            row = by_name[direction[p.name].name]
            row["broker_cpu_ratios"] = [s / b for s, b in zip(row["broker_cpu_s_per_gib"],
                                                              base_row["broker_cpu_s_per_gib"], strict=True)]
            row["median_broker_cpu_ratio"] = statistics.median(row["broker_cpu_ratios"])
    for p in protos:
        row = next(r for r in rows if r["name"] == consume[p.name].name)
        row["leader_connect_s"] = connect_s[p.name]
        row["median_leader_connect_ms"] = 1e3 * statistics.median(connect_s[p.name])
    from strata.security.ssl_factory import kernel_tls_status

    env = environment()
    env["tls_negotiated"] = tls_probe
    return {"config": asdict(cfg), "environment": env, "kernel_tls": kernel_tls_status(), "results": rows}


def negotiated_tls(port: int, ca: Path) -> str:
    """What a Python (OpenSSL default settings) client gets on the SSL listener: version and cipher."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        name, version, bits = s.cipher()
        return f"TLS on the SSL listener (Python client, OpenSSL defaults): {version} {name} ({bits} bit)"


def environment() -> dict:
    import confluent_kafka

    cpu_flags = ""
    try:
        flags = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")).split()
        cpu_flags = " ".join(f for f in ("aes", "vaes", "pclmulqdq", "vpclmulqdq", "avx2", "avx512f") if f in flags)
    except (OSError, StopIteration):
        pass
    return bench_report.environment(confluent_kafka=confluent_kafka.version()[0],
                                    librdkafka=confluent_kafka.libversion()[0], openssl=ssl.OPENSSL_VERSION,
                                    cpu_crypto_flags=cpu_flags,
                                    loadavg_at_start=" ".join(f"{x:.2f}" for x in os.getloadavg()))


def format_table(rows: list[dict]) -> str:
    header = (f"{'name':<34} {'MB/s median (min-max)':>22} {'vs PLAINTEXT (min-max)':>23} "
              f"{'broker CPU s/GiB':>17} {'CPU vs PLAINTEXT (min-max)':>27} {'client CPU s/GiB':>17}")
    lines = [header, "-" * len(header)]
    for row in rows:
        rate = f"{row['median_mb_per_s']:.0f} ({row['min_mb_per_s']:.0f}-{row['max_mb_per_s']:.0f})"
        if "paired_ratios" in row:
            pairs = row["paired_ratios"]
            ratio = f"{row['median_paired_ratio']:.2f} ({min(pairs):.2f}-{max(pairs):.2f})"
        else:
            ratio = "baseline"
        if "broker_cpu_ratios" in row:
            cpu = row["broker_cpu_ratios"]
            cpu_ratio = f"{row['median_broker_cpu_ratio']:.2f} ({min(cpu):.2f}-{max(cpu):.2f})"
        else:
            cpu_ratio = "baseline"
        lines.append(f"{row['name']:<34} {rate:>22} {ratio:>23} {row['median_broker_cpu_s_per_gib']:>17.2f} "
                     f"{cpu_ratio:>27} {row['median_client_cpu_s_per_gib']:>17.2f}")
    return "\n".join(lines)


NOTES = """\
notes: one broker process, three listeners; each rep a fresh broker on an empty data dir, protocols
       in rotating order. MB/s counts record payload (10^6 B/s); vs PLAINTEXT = median of the
       per-rep ratios (PLAINTEXT time / protocol time), min-max in brackets. CPU s/GiB = median CPU
       seconds per GiB of payload, in the timed region, of the broker process and of this process
       (confluent-kafka, librdkafka's threads included); CPU vs PLAINTEXT = median of the per-rep
       ratios of the broker's (protocol CPU / PLAINTEXT CPU: above 1 costs more). Connections to the
       leader are opened before the timer starts. Over PLAINTEXT the broker sends fetched records
       with sendfile; over TLS it reads them into a buffer and encrypts in user space (see kernel
       TLS)."""


def show(report: dict) -> None:
    print()
    print(format_table(report["results"]))
    print()
    print(NOTES)
    connect = ", ".join(f"{row['name'].removeprefix('consume: ')} {row['median_leader_connect_ms']:.1f}"
                        for row in report["results"] if "median_leader_connect_ms" in row)
    print(f"consumer's connection to the leader (TCP, TLS, SASL, one ListOffsets), median ms: {connect}")
    print(report["environment"].get("tls_negotiated", ""))
    print(report["kernel_tls"])


# -- profile ---------------------------------------------------------------------------------


def profile(work: Path, cfg: BenchConfig, out_prefix: Path, top: int = 20, log: Callable[[str], None] = print) -> str:
    """One SSL produce and consume, one SASL_SSL produce, one PLAINTEXT produce and consume, each in its
    own profile (the broker's main thread: the event loop)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    ca, keystore = make_certs(work / "certs")
    protos = {p.name: p for p in protocols(ca)}
    runs = [("ssl-produce", "SSL", run_produce), ("ssl-consume", "SSL", run_consume),
            ("sasl_ssl-produce", "SASL_SSL/SCRAM-SHA-512", run_produce),
            ("plaintext-produce", "PLAINTEXT", run_produce), ("plaintext-consume", "PLAINTEXT", run_consume)]
    raw_prefix = work / "profile"
    broker = Broker(work, keystore, "profiled", profile_prefix=raw_prefix)
    saved: list[tuple[str, Path, float]] = []
    try:
        broker.create_scram_user()
        for name, proto_name, fn in runs:
            p = protos[proto_name]
            bootstrap, topic = broker.bootstrap(p.listener), f"profiled-{p.key}"
            if fn is run_produce:  # the topic exists (auto-created) before the profiler starts
                from confluent_kafka.admin import AdminClient

                AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT"), "log_level": 3}).list_topics(
                    topic, timeout=10)
            broker.toggle_profiler()
            elapsed = fn(bootstrap, topic, cfg, p.client)
            broker.toggle_profiler()
            target = Path(f"{out_prefix}-{name}.pstats")
            shutil.move(f"{raw_prefix}-{len(saved)}.pstats", target)
            saved.append((name, target, elapsed))
            log(f"profiled {name}: {cfg.payload_bytes / elapsed / 1e6:.0f} MB/s (cProfile slows the broker)")
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    text = io.StringIO()
    mib = cfg.payload_bytes / MiB
    for name, path, elapsed in saved:
        stats = pstats.Stats(str(path), stream=text)
        calls = {fn[2]: row[1] for fn, row in stats.stats.items()}  # type: ignore[attr-defined]
        io_calls = ", ".join(f"{calls[k] / mib:.0f} {label} per MiB" for k, label in (
            ("<method 'read' of '_ssl._SSLSocket' objects>", "SSL reads (one TLS record each)"),
            ("<method 'write' of '_ssl._SSLSocket' objects>", "SSL writes"),
            ("<method 'recv_into' of '_socket.socket' objects>", "recv_into"),
            ("<built-in method posix.sendfile>", "sendfile")) if calls.get(k))
        print(f"\n=== {name}: {elapsed:.2f} s timed, {stats.total_tt:.2f} s in the broker's main thread over the "
              f"profile window (client setup included); {io_calls}; {path}", file=text)
        stats.sort_stats("tottime").print_stats(top if name.startswith("ssl-") else top // 2)
    return text.getvalue()


# -- entry point -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB per run, 3 reps")
    parser.add_argument("--reps", type=int, help="repetitions (each runs every protocol)")
    parser.add_argument("--mib", type=int, help="payload MiB produced and consumed per run")
    parser.add_argument("--dir", type=Path, default=OUT / "work" / "security", help="scratch directory")
    parser.add_argument("--json", type=Path, default=OUT / "security_bench.json", help="where to write results")
    parser.add_argument("--profile", action="store_true",
                        help="profile the broker (cProfile) over one SSL produce and consume instead")
    args = parser.parse_args(argv)
    cfg = BenchConfig.quick() if args.quick else BenchConfig()
    overrides: dict[str, int] = {}
    if args.reps is not None:
        overrides["reps"] = args.reps
    if args.mib is not None:
        overrides["total_bytes"] = args.mib * MiB
    cfg = dataclasses.replace(cfg, **overrides)
    if args.profile:
        print(profile(args.dir, cfg, OUT / "security_profile"))
        return 0
    return bench_report.run_and_save(lambda: run(args.dir, cfg), show, quick=args.quick, json_path=args.json)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--profiled-serve":
        sys.exit(profiled_serve(sys.argv[2], sys.argv[3:]))
    sys.exit(main())
