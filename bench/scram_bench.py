"""SASL/SCRAM server cost: Strata's hashlib/hmac ``ScramSaslServer`` against the ``scramp`` package, and how
scramp's server fits Kafka's wire behaviour.

    .venv/bin/python bench/scram_bench.py [--reps N] [--exchanges N] [--json PATH]

``scramp`` is not a Strata dependency. To include it without touching the venv::

    .venv/bin/pip download scramp asn1crypto --no-deps -d /tmp/scr
    .venv/bin/pip install --no-index --find-links /tmp/scr --target /tmp/scr/lib scramp
    PYTHONPATH=/tmp/scr/lib .venv/bin/python bench/scram_bench.py

1. **Server cost**: µs of server-side work per successful exchange (client-first in, server-first out,
   client-final in, server-final out), credential already in memory (a dict lookup), 4096 iterations. The
   client's messages come from a minimal hmac client whose salted password is computed once (untimed): a real
   client spends a PBKDF2 per exchange, which is shown on its own for scale. Each repetition runs
   ``--exchanges`` exchanges with a fresh server object each; min and median of ``--reps`` repetitions. Both
   servers draw a random server nonce per exchange (Strata ``secrets.token_urlsafe(24)``, scramp
   ``secrets.token_hex()``). A refused exchange (unknown user, refused at client-first) is timed too.
2. **Fit**: what scramp's server does with the inputs where Kafka's behaviour is specified: an authzid equal to
   the user name (Kafka accepts), gs2 flag ``y`` (Kafka refuses), ``tokenauth=true`` (Kafka's delegation-token
   extension), an unknown user, a salt shorter than 12 bytes (AlterUserScramCredentials accepts any salt), and a
   password that SASLprep changes (Kafka derives keys from the raw UTF-8 password).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import platform
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from strata.security.sasl import SaslAuthenticationError  # noqa: E402
from strata.security.sasl.scram import ScramSaslServer  # noqa: E402
from strata.security.scram_credentials import MECHANISMS, ScramCredential, credential_from_password  # noqa: E402

try:
    import scramp
except ImportError:  # pragma: no cover - optional
    scramp = None

PASSWORD = "bench-password"
USER = "bench-user"


class FastClient:
    """A SCRAM client whose PBKDF2 is done once, so that timing the server is not drowned by the client."""

    def __init__(self, mechanism: str, credential: ScramCredential, password: str = PASSWORD, user: str = USER):
        spec = MECHANISMS[mechanism]
        self.hash = spec.hash_name
        salted = hashlib.pbkdf2_hmac(self.hash, password.encode(), credential.salt, credential.iterations)
        self.client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        self.stored_key = hashlib.new(self.hash, self.client_key).digest()
        self.user = user
        self.bare = ""

    def first(self) -> bytes:
        self.bare = f"n={self.user},r={secrets.token_urlsafe(18)}"
        return b"n,," + self.bare.encode()

    def final(self, server_first: bytes) -> bytes:
        nonce = server_first.split(b",", 1)[0][2:].decode()
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(self.stored_key, auth, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(self.client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def strata_exchange(mechanism: str, users: dict[str, ScramCredential]) -> Callable[[FastClient], float]:
    lookup = users.get

    def run(client: FastClient) -> float:
        first = client.first()
        t0 = time.perf_counter()
        server = ScramSaslServer(mechanism, lookup)
        server_first = server.evaluate_response(first)
        t1 = time.perf_counter()
        final = client.final(server_first)
        t2 = time.perf_counter()
        server_final = server.evaluate_response(final)
        t3 = time.perf_counter()
        assert server.is_complete and server_final.startswith(b"v=")
        return (t1 - t0) + (t3 - t2)
    return run


def strata_refused(mechanism: str, users: dict[str, ScramCredential]) -> Callable[[FastClient], float]:
    lookup = users.get

    def run(client: FastClient) -> float:
        first = b"n,,n=nobody,r=" + secrets.token_urlsafe(18).encode()
        t0 = time.perf_counter()
        try:
            ScramSaslServer(mechanism, lookup).evaluate_response(first)
        except SaslAuthenticationError:
            pass
        return time.perf_counter() - t0
    return run


def scramp_exchange(mechanism: str, users: dict[str, ScramCredential]) -> Callable[[FastClient], float]:
    assert scramp is not None
    mech = scramp.ScramMechanism(mechanism)

    def auth_fn(username: str) -> tuple[bytes, bytes, bytes, int] | None:
        c = users.get(username)
        return None if c is None else (c.salt, c.stored_key, c.server_key, c.iterations)

    def run(client: FastClient) -> float:
        first = client.first().decode()
        t0 = time.perf_counter()
        server = mech.make_server(auth_fn)
        server.set_client_first(first)
        server_first = server.get_server_first().encode()
        t1 = time.perf_counter()
        final = client.final(server_first).decode()
        t2 = time.perf_counter()
        server.set_client_final(final)
        server_final = server.get_server_final().encode()
        t3 = time.perf_counter()
        assert server_final.startswith(b"v=")
        return (t1 - t0) + (t3 - t2)
    return run


def scramp_refused(mechanism: str, users: dict[str, ScramCredential]) -> Callable[[FastClient], float]:
    assert scramp is not None
    mech = scramp.ScramMechanism(mechanism)

    def auth_fn(username: str) -> tuple[bytes, bytes, bytes, int] | None:
        c = users.get(username)
        return None if c is None else (c.salt, c.stored_key, c.server_key, c.iterations)

    def run(client: FastClient) -> float:
        first = "n,,n=nobody,r=" + secrets.token_urlsafe(18)
        t0 = time.perf_counter()
        try:
            mech.make_server(auth_fn).set_client_first(first)
        except scramp.ScramException:
            pass
        return time.perf_counter() - t0
    return run


def measure(run: Callable[[FastClient], float], client: FastClient, exchanges: int, reps: int) -> dict[str, float]:
    for _ in range(min(200, exchanges)):  # warm-up
        run(client)
    per_rep = []
    for _ in range(reps):
        total = sum(run(client) for _ in range(exchanges))
        per_rep.append(total / exchanges * 1e6)
    return {"min_us": min(per_rep), "median_us": statistics.median(per_rep)}


def pbkdf2_us(mechanism: str, iterations: int, reps: int) -> float:
    spec = MECHANISMS[mechanism]
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        hashlib.pbkdf2_hmac(spec.hash_name, PASSWORD.encode(), b"0123456789abcdef", iterations)
        times.append(time.perf_counter() - t0)
    return min(times) * 1e6


# -- fit ---------------------------------------------------------------------------------------------------------

def _scramp_outcome(mechanism: str, users: dict[str, ScramCredential], first: str,
                    final_for: Callable[[str], str] | None = None) -> str:
    assert scramp is not None
    mech = scramp.ScramMechanism(mechanism)

    def auth_fn(username: str) -> tuple[bytes, bytes, bytes, int] | None:
        c = users.get(username)
        return None if c is None else (c.salt, c.stored_key, c.server_key, c.iterations)

    server = mech.make_server(auth_fn)
    try:
        server.set_client_first(first)
        server_first = server.get_server_first()
        if final_for is None:
            return f"accepted client-first, answered {server_first[:24]}..."
        server.set_client_final(final_for(server_first))
        return f"authenticated ({server.get_server_final()[:12]}...)"
    except scramp.ScramException as e:
        return f"ScramException: {e}"
    except Exception as e:  # what escapes scramp is part of the finding
        return f"{type(e).__name__}: {e}"


def fit(mechanism: str) -> dict[str, dict[str, str]]:
    from strata.security.sasl.scram import ScramSaslClient

    credential = credential_from_password(mechanism, PASSWORD, iterations=4096)
    users = {USER: credential}
    rows: dict[str, dict[str, str]] = {}

    def strata_outcome(first: str, users_: dict[str, ScramCredential] = users) -> str:
        try:
            out = ScramSaslServer(mechanism, users_.get).evaluate_response(first.encode())
            return f"accepted client-first, answered {out[:24].decode()}..."
        except SaslAuthenticationError as e:
            return f"refused: {e}"

    cases = {
        "authzid equal to the user (Kafka: accepted)": f"n,a={USER},n={USER},r=abc",
        "gs2 flag y (Kafka: refused)": f"y,,n={USER},r=abc",
        "tokenauth=true (Kafka: delegation token)": f"n,,n={USER},r=abc,tokenauth=true",
        "unknown user (Kafka: generic message)": "n,,n=nobody,r=abc",
    }
    for name, first in cases.items():
        rows[name] = {"scramp": _scramp_outcome(mechanism, users, first), "strata": strata_outcome(first)}

    short = {USER: credential_from_password(mechanism, PASSWORD, salt=b"short", iterations=4096)}
    rows["5-byte salt from AlterUserScramCredentials (Kafka: works)"] = {
        "scramp": _scramp_outcome(mechanism, short, f"n,,n={USER},r=abc"),
        "strata": strata_outcome(f"n,,n={USER},r=abc", short)}

    # A credential derived as Kafka does (raw UTF-8 password); scramp's client SASLpreps the password first.
    password = "pass\u00adword\u2168"  # a soft hyphen (mapped to nothing) and ROMAN NUMERAL NINE (NFKC: "IX")
    kafka_credential = credential_from_password(mechanism, password, iterations=4096)
    kafka_users = {USER: kafka_credential}
    assert scramp is not None
    client = scramp.ScramClient([mechanism], USER, password)
    server = ScramSaslServer(mechanism, kafka_users.get)
    try:
        server_first = server.evaluate_response(client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        server.evaluate_response(client.get_client_final().encode())
        scramp_client = "authenticated"
    except SaslAuthenticationError as e:
        scramp_client = f"refused: {e}"
    own = ScramSaslClient(mechanism, USER, password)
    server = ScramSaslServer(mechanism, kafka_users.get)
    own_result = "authenticated"
    try:
        challenge = server.evaluate_response(own.initial_response())
        server.evaluate_response(own.evaluate_challenge(challenge) or b"")
    except SaslAuthenticationError as e:
        own_result = f"refused: {e}"
    rows["password changed by SASLprep, credential made as Kafka does, client side"] = {
        "scramp": scramp_client, "strata": own_result}
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--exchanges", type=int, default=2000)
    ap.add_argument("--json", type=Path, default=HERE / "out" / "scram_bench.json")
    args = ap.parse_args(argv)
    version = None
    if scramp is not None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version
        try:
            version = dist_version("scramp")
        except PackageNotFoundError:
            version = "unknown"
    print(f"python {platform.python_version()}, scramp {version or 'not installed'}")

    results: dict[str, Any] = {"python": platform.python_version(), "scramp": version, "server_us": {},
                               "pbkdf2_us": {}, "fit": {}}
    for mechanism in MECHANISMS:
        credential = credential_from_password(mechanism, PASSWORD, iterations=4096)
        users = {USER: credential}
        client = FastClient(mechanism, credential)
        rows = {f"strata {mechanism}: full exchange": measure(strata_exchange(mechanism, users), client,
                                                              args.exchanges, args.reps),
                f"strata {mechanism}: unknown user, refused": measure(strata_refused(mechanism, users), client,
                                                                      args.exchanges, args.reps)}
        if scramp is not None:
            rows[f"scramp {mechanism}: full exchange"] = measure(scramp_exchange(mechanism, users), client,
                                                                 args.exchanges, args.reps)
            rows[f"scramp {mechanism}: unknown user, refused"] = measure(scramp_refused(mechanism, users), client,
                                                                         args.exchanges, args.reps)
        results["server_us"].update(rows)
        results["pbkdf2_us"][f"{mechanism} 4096 iterations (client side, and credential creation)"] = \
            pbkdf2_us(mechanism, 4096, args.reps * 3)
    print(f"\nserver-side work per exchange, µs (min / median of {args.reps} x {args.exchanges} exchanges):")
    for name, row in results["server_us"].items():
        print(f"  {row['min_us']:8.1f} / {row['median_us']:8.1f} µs  {name}")
    print("\nfor scale, one PBKDF2 (min):")
    for name, us in results["pbkdf2_us"].items():
        print(f"  {us:8.0f} µs  {name}")

    if scramp is not None:
        for mechanism in MECHANISMS:
            results["fit"][mechanism] = fit(mechanism)
        print("\nfit with Kafka's behaviour (SCRAM-SHA-256; SHA-512 alike, in the JSON):")
        for case, outcome in results["fit"]["SCRAM-SHA-256"].items():
            print(f"  {case}\n      scramp: {outcome['scramp']}\n      strata: {outcome['strata']}")

    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
