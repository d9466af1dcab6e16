"""AlterUserScramCredentials: create, replace or delete users' SCRAM credentials (``kafka-configs --alter
--add-config 'SCRAM-SHA-256=[password=...]' --entity-type users``). The request carries the salt and the
salted password, never the password; :mod:`strata.broker.user_credentials` stores them like Kafka.

Authorization (Kafka's ``handleAlterUserScramCredentialsRequest``): ALTER on the cluster, else every user of
the request answers CLUSTER_AUTHORIZATION_FAILED and nothing changes."""

from __future__ import annotations

from typing import Any

from strata.broker.user_credentials import Deletion, Upsertion
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation

ALTER_USER_SCRAM_CREDENTIALS = 51


@handles(ALTER_USER_SCRAM_CREDENTIALS)
async def alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    store = ctx.broker.user_credentials
    users = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return ctx.respond(results=[{"user": u, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                     "error_message": "Cluster authorization failed."} for u in sorted(users)])
    if store is None:
        return ctx.respond(results=[{"user": u, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                     "error_message": "The broker is starting"} for u in users])
    results = await store.alter(
        [Deletion(d.name, int(d.mechanism)) for d in request.deletions],
        [Upsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
         for u in request.upsertions])
    return ctx.respond(results=[{"user": u, "error_code": code, "error_message": msg} for u, code, msg in results])
