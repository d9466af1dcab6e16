"""The faults the nemesis schedules, each one started, held for a window and healed.

A fault picks its target from the cluster as it is (most hit the leader of a partition, where a fault
matters), records itself in the history with the brokers it hits and the leaders at its start (for the
availability check), and returns how to undo it. The schedule is drawn from a seeded ``random.Random``: a
failing run is replayed by its seed.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable
from dataclasses import dataclass

from nemesis import net
from nemesis.environment import S3, Environment


@dataclass
class Started:
    kind: str
    target: str
    brokers: list[int]
    description: str
    undo: Callable[[], None]


def _victim(env: Environment, rng: random.Random, leaders: dict[str, int | None]) -> int:
    """Usually a leader (a fault there tests failover), sometimes any broker (a follower's fault)."""
    led = sorted({b for b in leaders.values() if b is not None})
    if led and rng.random() < 0.8:
        return rng.choice(led)
    return rng.choice(sorted(env.broker_names))


def zk_isolate(env: Environment, rng: random.Random, leaders: dict[str, int | None]) -> Started:
    b = _victim(env, rng, leaders)
    name = env.broker_names[b]
    env.lab.partition([name], env.zk_names)
    return Started("zk-isolate", name, [b], f"broker {b} cut off from every ZooKeeper server (clients, peers reach it)",
                   env.lab.heal)


def isolate_from_cluster(env: Environment, rng: random.Random, leaders: dict[str, int | None]) -> Started:
    b = _victim(env, rng, leaders)
    name = env.broker_names[b]
    others = [n for i, n in env.broker_names.items() if i != b]
    env.lab.partition([name], [*env.zk_names, *others])
    return Started("isolate-but-clients", name, [b], f"broker {b} cut off from ZooKeeper and its peers, "
                   "still reachable by clients", env.lab.heal)


def isolate_from_peers(env: Environment, rng: random.Random, leaders: dict[str, int | None]) -> Started:
    b = _victim(env, rng, leaders)
    name = env.broker_names[b]
    env.lab.partition([name], [n for i, n in env.broker_names.items() if i != b])
    return Started("isolate-from-peers", name, [b], f"broker {b} cut off from the other brokers only",
                   env.lab.heal)


def one_way_out(env: Environment, rng: random.Random, leaders: dict[str, int | None]) -> Started:
    b = _victim(env, rng, leaders)
    name = env.broker_names[b]
    for other in [*env.zk_names, *(n for i, n in env.broker_names.items() if i != b)]:
        env.lab.drop(name, other)
    return Started("one-way-out", name, [b], f"what broker {b} sends to ZooKeeper and its peers is lost; "
                   "what they send arrives", env.lab.heal)


def zk_minority(env: Environment, rng: random.Random, leaders: dict[str, int | None]) -> Started:
    b = _victim(env, rng, leaders)
    name = env.broker_names[b]
    zk = rng.choice(env.zk_names)
    minority = [name, zk]
    majority = [*(z for z in env.zk_names if z != zk), *(n for i, n in env.broker_names.items() if i != b)]
    env.lab.partition(minority, majority)
    return Started("zk-minority", f"{name}+{zk}", [b], f"broker {b} with ZooKeeper {zk} split from the majority "
                   "of the ensemble and the other brokers", env.lab.heal)


def loss(env: Environment, rng: random.Random, leaders: dict[str, int | None]) -> Started:
    b = _victim(env, rng, leaders)
    name = env.broker_names[b]
    pct = rng.choice((10, 30))
    env.lab.loss(name, pct)
    return Started("loss", name, [b], f"{pct}% of the packets broker {b} sends are lost", env.lab.heal)


def slow(env: Environment, rng: random.Random, leaders: dict[str, int | None]) -> Started:
    b = _victim(env, rng, leaders)
    name = env.broker_names[b]
    kbit = rng.choice((256, 1024))
    env.lab.slow(name, kbit)
    return Started("slow", name, [b], f"broker {b}'s outgoing bandwidth capped at {kbit} kbit/s", env.lab.heal)


def kill(env: Environment, rng: random.Random, leaders: dict[str, int | None]) -> Started:
    b = _victim(env, rng, leaders)
    process = env.broker_process(b)
    process.kill()
    return Started("kill", env.broker_names[b], [b], f"broker {b} killed (-9), restarted at the window's end",
                   process.start)


def pause(env: Environment, rng: random.Random, leaders: dict[str, int | None]) -> Started:
    b = _victim(env, rng, leaders)
    pid = env.broker_process(b).pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    return Started("pause", env.broker_names[b], [b], f"broker {b} frozen (SIGSTOP), SIGCONT at the window's end",
                   lambda: env.thaw(pid))


def store_unreachable(env: Environment, rng: random.Random, leaders: dict[str, int | None]) -> Started:
    """The object store cut off from every broker: uploads and remote reads fail, produce must not notice."""
    env.lab.isolate(S3, list(env.broker_names.values()))
    return Started("store-unreachable", S3, [], "the S3 store cut off from every broker", env.lab.heal)


FAULTS: dict[str, Callable[[Environment, random.Random, dict[str, int | None]], Started]] = {
    "zk-isolate": zk_isolate,
    "isolate-but-clients": isolate_from_cluster,
    "isolate-from-peers": isolate_from_peers,
    "one-way-out": one_way_out,
    "zk-minority": zk_minority,
    "loss": loss,
    "slow": slow,
    "kill": kill,
    "pause": pause,
    "store-unreachable": store_unreachable,
}


def available_faults(tiered: bool = True) -> list[str]:
    """The fault kinds this machine can inject (random loss needs nftables; the store needs a tiered run)."""
    return [k for k in FAULTS if (k != "loss" or net.nft_available()) and (k != "store-unreachable" or tiered)]
