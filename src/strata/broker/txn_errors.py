"""PRODUCER_FENCED (90) only at the request versions that know it; INVALID_PRODUCER_EPOCH (47) before them.

KIP-588 gave a fenced transactional producer its own error code, and bumped the transaction APIs' versions
so a broker can tell which clients understand it. Older clients do not: they report "unknown error code 90"
where they would fence themselves on INVALID_PRODUCER_EPOCH. Kafka 3.9's ``KafkaApis`` therefore answers 47
instead of 90 to InitProducerId < v4, and to AddPartitionsToTxn, AddOffsetsToTxn and EndTxn < v2 (the
``finalError`` of each handler's response callback). The transaction coordinator keeps answering
PRODUCER_FENCED; the handlers translate its answer here, in one place, for the version they were asked at.

TxnOffsetCommit is not in the table: its answers never carry PRODUCER_FENCED at any version (a fenced
producer's verification is INVALID_PRODUCER_EPOCH already, as Kafka's ``AddPartitionsToTxnManager`` turns it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strata.errors import ErrorCode

if TYPE_CHECKING:
    from strata.broker.wire.dispatch import RequestContext

# api key -> the first version whose clients understand PRODUCER_FENCED
PRODUCER_FENCED_SINCE: dict[int, int] = {
    22: 4,  # InitProducerId
    24: 2,  # AddPartitionsToTxn
    25: 2,  # AddOffsetsToTxn
    26: 2,  # EndTxn
}


def fenced_for_version(api_key: int, version: int, code: int) -> int:
    """``code`` as a client of ``api_key`` at ``version`` understands it: PRODUCER_FENCED becomes
    INVALID_PRODUCER_EPOCH below the version that introduced it; every other code is unchanged."""
    if code == ErrorCode.PRODUCER_FENCED and version < PRODUCER_FENCED_SINCE.get(api_key, 0):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def fenced_for_request(ctx: RequestContext, code: int) -> int:
    """:func:`fenced_for_version` for the request ``ctx`` is answering."""
    return fenced_for_version(ctx.request.api_key, ctx.version, code)
