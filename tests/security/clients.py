"""Small client-side helpers shared by the security tests."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, Producer

if TYPE_CHECKING:
    from tests.broker.harness import BrokerProcess

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "broker": "broker-secret"}
"""The PLAIN users of the security tests' brokers (:func:`plain_listener_props`)."""


def plain_listener_props(acls: bool = True) -> dict[str, str]:
    """Broker properties for a SASL_PLAINTEXT listener (the tests add it with ``listeners={"SASL_PLAINTEXT":
    "SASL_PLAINTEXT"}``) where the :data:`PASSWORDS` users log in with PLAIN; with ``acls`` the ACL authorizer,
    with the admin and the PLAINTEXT listener's anonymous principal (the tests' door for setup) as super users."""
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")
    props = {"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas}
    if acls:
        props |= {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                  "super.users": "User:admin;User:ANONYMOUS"}
    return props


def plain_client(b: BrokerProcess, user: str, **extra: Any) -> dict[str, Any]:
    """confluent-kafka settings to log in as ``user`` on ``b``'s SASL_PLAINTEXT listener."""
    return {"bootstrap.servers": b.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user], **extra}


def round_trip_confluent(conf: dict[str, Any], topic: str, n: int = 40) -> None:
    """Produce ``n`` records with acks=all and read them back with a new consumer group (committed), all with
    the client settings ``conf``: what a secured client must be able to do."""
    p = Producer({**conf, "acks": "all"})
    for i in range(n):
        p.produce(topic, b"v%d" % i, key=b"%d" % i)
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.commit(asynchronous=False)
    c.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(n))


def poll_kafka_python(consumer: Any, want: int, timeout_s: float = 30.0) -> list[bytes]:
    """Values from a kafka-python consumer until ``want`` arrived (iterating would wait out consumer_timeout_ms)."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [r.value for r in records]
    return got
