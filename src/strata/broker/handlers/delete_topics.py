"""DeleteTopics: by name (v1-v5 ``topic_names``, v6 ``topics[].name``) or by id (v6 ``topics[].topic_id``).

Kafka's rules, from ``ControllerApis.deleteTopics``: with ``delete.topic.enable=false`` every topic
fails, with INVALID_REQUEST before v3 (the code did not exist) and TOPIC_DELETION_DISABLED after;
a name or id given twice fails as a duplicate; an entry with both a name and an id, or neither, is
invalid; unknown names are UNKNOWN_TOPIC_OR_PARTITION and unknown ids UNKNOWN_TOPIC_ID.

Internal topics (``__consumer_offsets`` ...) are refused: deleting one would silently drop every
group's committed offsets, and nothing a client wants needs it.

Authorization (Kafka 3.9's ``KafkaApis.handleDeleteTopicsRequest``): DELETE on each topic, before its
existence and the internal-topic rule, so a name the principal may not delete is TOPIC_AUTHORIZATION_FAILED
whether it exists or not. A topic given by id is resolved first (an unknown id stays UNKNOWN_TOPIC_ID: ids
are not secret); when the principal may not DESCRIBE it either, its name is left out of the answer.

Deleting renames each partition directory to ``*-delete`` at once and removes it later
(``LogManager.delete_logs``); the registry change is what a restart trusts.

Event loop: the checkpoints (which list every partition of the broker) are rewritten once for the
whole request, not per partition, and between two topics (and before that rewrite) the handler
gives the loop ``TOPIC_GAP_S``, so a request naming 100 topics is many short slices (one topic:
the registry rewrite, the renames) between other clients' requests, not one stall. A bare
``sleep(0)`` is not enough: a request that needs several loop iterations (an acks=all produce
waits on a future) would wait for one slice per iteration.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

from strata.broker.topics import INTERNAL_TOPICS, TopicInfo
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ApiError, ErrorCode, KafkaError
from strata.security.acl import AclOperation, ResourceType

DELETE_TOPICS = 20
TOPIC_GAP_S = 0.001
ZERO_UUID = uuid.UUID(int=0)


def _entry(name: str | None, topic_id: uuid.UUID | None, code: int, message: str | None) -> dict[str, Any]:
    return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": message}


@handles(DELETE_TOPICS)
async def delete_topics(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    # (name, id) as given; v6 carries both fields per entry, older versions names only.
    given: list[tuple[str | None, uuid.UUID | None]] = [(n, None) for n in getattr(request, "topic_names", ())]
    given += [(t.name, t.topic_id if t.topic_id != ZERO_UUID else None) for t in getattr(request, "topics", ())]

    if not broker.config.delete_topic_enable:
        code = ErrorCode.INVALID_REQUEST if ctx.version < 3 else ErrorCode.TOPIC_DELETION_DISABLED
        return ctx.respond(throttle_time=0, responses=[_entry(n, i, code, "Topic deletion is disabled.")
                                                       for n, i in given])

    responses = []
    names = Counter(n for n, i in given if n is not None and i is None)
    ids = Counter(i for n, i in given if n is None and i is not None)
    wanted: list[tuple[str | None, uuid.UUID | None]] = []
    for name, topic_id in given:
        if name is None and topic_id is None:
            responses.append(_entry(None, ZERO_UUID, ErrorCode.INVALID_REQUEST,
                                    "Neither topic name nor id were specified."))
        elif name is not None and topic_id is not None:
            responses.append(_entry(name, topic_id, ErrorCode.INVALID_REQUEST,
                                    "You may not specify both topic name and topic id."))
        elif (name is not None and names[name] > 1) or (topic_id is not None and ids[topic_id] > 1):
            continue
        else:
            wanted.append((name, topic_id))
    responses += [_entry(n, None, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                  for n in sorted(n for n, c in names.items() if c > 1)]
    responses += [_entry(None, i, ErrorCode.INVALID_REQUEST, "Duplicate topic id.")
                  for i in sorted((i for i, c in ids.items() if c > 1), key=str)]

    checking = broker.authorization.enabled
    deleted = False
    loop = asyncio.get_running_loop()
    pending: list[tuple[TopicInfo, asyncio.Task[None]]] = []
    timeout_s = max(0.0, request.timeout.total_seconds()) if hasattr(request, "timeout") else 30.0
    with broker.logs.deferred_checkpoint():
        for i, (name, topic_id) in enumerate(wanted):
            if i:
                await asyncio.sleep(TOPIC_GAP_S)  # other connections' requests run in between topics
            info: TopicInfo | None = broker.topics.get(name) if name is not None else broker.topics.by_id(topic_id)
            if checking and (name is not None or info is not None):
                topic_name = name if name is not None else info.name
                if name is None and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic_name):
                    responses.append(_entry(None, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
                    continue
                if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, topic_name):
                    responses.append(_entry(topic_name, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
                    continue
            try:
                if name in INTERNAL_TOPICS:
                    raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete internal topic {name}")
                if info is None:
                    if name is not None:
                        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
                    raise ApiError(ErrorCode.UNKNOWN_TOPIC_ID, f"No topic with id {topic_id}.")
                if info.is_internal:
                    raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete internal topic {info.name}")
            except KafkaError as e:
                responses.append(_entry(name, topic_id, e.error_code, str(e)))
                continue
            # Started one after the other, awaited together: in a cluster each deletion waits until every
            # replica has dropped the topic (a round trip through ZooKeeper and the controller), and Kafka
            # deletes a request's topics in parallel, so 100 topics take one round trip, not 100.
            pending.append((info, loop.create_task(broker.admin.delete_topic(info.name, timeout_s))))
        for info, task in pending:
            try:
                await task
            except KafkaError as e:
                responses.append(_entry(info.name, info.topic_id, e.error_code, str(e)))
                continue
            responses.append(_entry(info.name, info.topic_id, ErrorCode.NONE, None))
            deleted = True
        if deleted:
            await asyncio.sleep(TOPIC_GAP_S)  # the checkpoint rewrite as the block ends: a slice of its own
    return ctx.respond(throttle_time=0, responses=responses)
