"""One registry of request handlers, keyed by API key; ApiVersions is derived from it.

A handler module declares what it serves with ``@handles(ApiKey, min_version, max_version)``.
The version range defaults to everything kio can encode and decode, clipped by the handler's own
bounds, and the registry refuses a second handler for a key. Because the advertised ApiVersions
set comes from the same table that dispatches, the broker can never advertise an API it would
not answer (librdkafka derives features from combinations of versions, so a gap is visible).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strata.protocol.build import make, zero_values
from strata.protocol.frame import Request, known_versions, response_class
from strata.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strata.broker.services import BrokerServices
    from strata.broker.wire.authentication import Session

Handler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    api_key: int
    min_version: int
    max_version: int
    fn: Handler


_HANDLERS: dict[int, HandlerSpec] = {}


def handles(api_key: int, min_version: int | None = None,
            max_version: int | None = None) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if api_key in _HANDLERS:
            raise RuntimeError(f"two handlers for API key {api_key}: {_HANDLERS[api_key].fn} and {fn}")
        lo, hi = known_versions()[api_key]
        lo = lo if min_version is None else max(lo, min_version)
        hi = hi if max_version is None else min(hi, max_version)
        _HANDLERS[api_key] = HandlerSpec(api_key, lo, hi, fn)
        return fn

    return register


def handlers() -> dict[int, HandlerSpec]:
    import strata.broker.handlers  # noqa: F401  (registers every handler module)

    return _HANDLERS


def supported_versions() -> dict[int, tuple[int, int]]:
    return {k: (s.min_version, s.max_version) for k, s in sorted(handlers().items())}


@dataclass(frozen=True, slots=True)
class Spliced:
    """A response whose ``records`` fields hold splice markers for bytes sent from files."""

    body: Any
    splices: list[Any]


class Deferred:
    """A handler's answer that comes later, while the connection goes on reading its next requests.

    A handler returns one after doing everything that must happen in request order (a produce's
    validation and appends, its diskless batches put into the active file); ``answer`` is the rest:
    a coroutine that waits (for a diskless commit, an ISR) and returns the response, or None (acks=0),
    or raises as a handler would (:class:`CloseConnection`, an error answered UNKNOWN_SERVER_ERROR).
    The connection sends it after every earlier response and before every later one, as Kafka's
    protocol requires (:mod:`strata.broker.wire.connection`), and always awaits or closes the coroutine.
    """

    __slots__ = ("answer",)

    def __init__(self, answer: Coroutine[Any, Any, Any]) -> None:
        self.answer = answer


class CloseConnection(Exception):
    """Raised by a handler when Kafka's answer is to close the connection (e.g. a failed acks=0 produce)."""


class RequestContext:
    """What a handler sees: the broker, the request header, the connection's security session (listener,
    principal) and helpers to build its answer."""

    __slots__ = ("broker", "request", "connection_id", "session")

    def __init__(self, broker: BrokerServices, request: Request, connection_id: str,
                 session: Session | None = None) -> None:
        self.broker = broker
        self.request = request
        self.connection_id = connection_id
        self.session = session

    @property
    def principal(self) -> str:
        return self.session.principal if self.session is not None else "User:ANONYMOUS"

    @property
    def listener_name(self) -> str | None:
        return self.session.listener.name if self.session is not None else None

    @property
    def client_host(self) -> str:
        return self.session.client_host if self.session is not None else self.connection_id.rsplit(":", 1)[0]

    # -- authorization (strata.broker.authorization: always yes without an authorizer) -----------------------

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """May this connection's principal do ``operation`` on the resource? Kafka's ``AuthHelper.authorize``."""
        return self.broker.authorization.authorize(self.principal, self.client_host, operation, resource_type, name)

    def authorize_cluster(self, operation: AclOperation) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, "kafka-cluster")

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType`` (e.g. IDEMPOTENT_WRITE for a producer with any WRITE grant)."""
        return self.broker.authorization.authorize_any(self.principal, self.client_host, operation, resource_type)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """The ``*_authorized_operations`` bit field of a resource for this principal."""
        return self.broker.authorization.authorized_operations(self.principal, self.client_host, resource_type,
                                                               name)

    @property
    def version(self) -> int:
        return self.request.api_version

    @property
    def client_id(self) -> str | None:
        return self.request.header.client_id

    @property
    def response_cls(self) -> type:
        cls = response_class(self.request.api_key, self.request.api_version)
        assert cls is not None
        return cls

    def respond(self, **values: Any) -> Any:
        """This request's response class at this version; fields it lacks are dropped."""
        cls = self.response_cls
        return make(cls, **{**zero_values(cls), **values})
