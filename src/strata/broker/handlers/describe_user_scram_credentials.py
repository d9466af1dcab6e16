"""DescribeUserScramCredentials: which SCRAM mechanisms (and iteration counts) each user has, never the keys.

A null or an empty ``users`` array both describe every user with a credential (Kafka's ``describingAllUsers``;
librdkafka sends the empty array): :meth:`strata.broker.user_credentials.UserCredentials.describe`, which answers
from the same credentials on a single node (the local file) and in a cluster (ZooKeeper's ``/config/users``).

Authorization (Kafka's ``handleDescribeUserScramCredentialsRequest``): DESCRIBE on the cluster, else
CLUSTER_AUTHORIZATION_FAILED at the top level and for each named user.
"""

from __future__ import annotations

from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation

DESCRIBE_USER_SCRAM_CREDENTIALS = 50


@handles(DESCRIBE_USER_SCRAM_CREDENTIALS)
async def describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    store = ctx.broker.user_credentials
    users = None if request.users is None else [u.name for u in request.users]
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
        return ctx.respond(error_code=code, error_message=message, results=[
            {"user": u, "error_code": code, "error_message": message, "credential_infos": []} for u in users or ()])
    if store is None:
        return ctx.respond(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="The broker is starting",
                           results=[])
    return ctx.respond(error_code=ErrorCode.NONE, error_message=None, results=store.describe(users))
