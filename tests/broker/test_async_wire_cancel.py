"""``strata.client.async_wire.AsyncBrokerConnection`` (the inter-broker client) when a call is cancelled between
its request and the answer, against a real broker.

A consumer's long-polling Fetch stands in for any slow request; the task waiting for it is cancelled (as a
coordinator's marker task is when it gives up its role). The connection must not be reused with that answer
still coming: the next call would read it as its own ("response correlation id 1, expected 2", seen in a
cluster test's log before the fix)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess

from strata.client.async_wire import AsyncBrokerConnection

FETCH, API_VERSIONS, METADATA = 1, 18, 3


def test_a_cancelled_call_leaves_no_answer_for_the_next_one(shared_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})  # kept: its futures die with it
    admin.create_topics([NewTopic("async-wire-cancel", 1, 1)])["async-wire-cancel"].result(30)
    host, port = shared_broker.bootstrap.rsplit(":", 1)

    async def scenario() -> tuple[int, int]:
        conn = AsyncBrokerConnection(host, int(port), client_id="cancel-test", timeout_s=10)
        metadata = await conn.call(METADATA, 12, topics=[{"name": "async-wire-cancel", "topic_id": None}],
                                   allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        topic_id = metadata.topics[0].topic_id
        # a consumer fetch at the log end of an empty partition: answered after max_wait (1.5 s), not before
        poll = asyncio.ensure_future(conn.call(
            FETCH, 13, replica_id=-1, max_wait=timedelta(milliseconds=1500), min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[{"topic_id": topic_id, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]))
        await asyncio.sleep(0.3)
        assert not poll.done()
        poll.cancel()
        await asyncio.gather(poll, return_exceptions=True)
        # the Fetch's answer comes at 1.5 s; this call must not take it for its own
        versions = await conn.call(API_VERSIONS, 3, client_software_name="t", client_software_version="1")
        await asyncio.sleep(1.5)  # and after the Fetch's answer was due, the connection still pairs correctly
        again = await conn.call(API_VERSIONS, 3, client_software_name="t", client_software_version="1")
        conn.close()
        return int(versions.error_code), len(again.api_keys)

    code, keys = asyncio.run(scenario())
    assert code == 0 and keys > 40
