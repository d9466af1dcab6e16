"""ClusterProducerIdManager: a block fetched ahead, and no InitProducerId held while ZooKeeper cannot answer."""

from __future__ import annotations

import asyncio

import pytest

from strata.broker.producer_ids import ClusterProducerIdManager
from strata.errors import ApiError, ErrorCode


class Blocks:
    """``allocate`` for the manager: blocks of 10 from 0, each handed out when ``gate`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = asyncio.Event()
        self.fail: Exception | None = None

    async def allocate(self) -> tuple[int, int]:
        first = self.calls * 10
        self.calls += 1
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return first, 10


def test_an_unreachable_zookeeper_is_answered_as_retriable_at_once() -> None:
    async def scenario() -> None:
        blocks = Blocks()
        ids = ClusterProducerIdManager(blocks.allocate, wait_s=0.05)
        for _ in range(3):  # each request answers within wait_s; one allocation stays in flight
            with pytest.raises(ApiError) as e:
                await asyncio.wait_for(ids.next_id(), 1.0)
            assert e.value.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert blocks.calls == 1
        blocks.gate.set()  # ZooKeeper is back
        await asyncio.sleep(0)
        assert [await ids.next_id() for _ in range(3)] == [0, 1, 2]

    asyncio.run(scenario())


def test_the_next_block_is_fetched_before_the_current_one_runs_out() -> None:
    async def scenario() -> None:
        blocks = Blocks()
        blocks.gate.set()
        ids = ClusterProducerIdManager(blocks.allocate, wait_s=1.0)
        got = [await ids.next_id() for _ in range(9)]
        await asyncio.sleep(0)
        assert got == list(range(9)) and blocks.calls == 2  # the 9th id of 10 started the prefetch
        await asyncio.sleep(0)
        blocks.gate.clear()  # ZooKeeper unreachable from now on: the prefetched block still serves
        got = [await ids.next_id() for _ in range(10)]
        assert got == list(range(9, 19))

    asyncio.run(scenario())


def test_a_failed_allocation_is_retriable_and_tried_again() -> None:
    async def scenario() -> None:
        blocks = Blocks()
        blocks.fail = ConnectionError("session expired")
        blocks.gate.set()
        ids = ClusterProducerIdManager(blocks.allocate, wait_s=1.0)
        with pytest.raises(ApiError) as e:
            await ids.next_id()
        assert e.value.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        blocks.fail = None
        assert await ids.next_id() == 10  # a second allocation, its own block
        assert blocks.calls == 2

    asyncio.run(scenario())
