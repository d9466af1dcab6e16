"""IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on single keys of a topic's overrides.

APPEND/SUBTRACT apply to LIST keys only (``cleanup.policy``), starting from the override or the
key's default; DELETE of a key that is not overridden is a no-op, as in Kafka. The result is
validated as a whole (INVALID_CONFIG naming the key) before it is persisted and applied to the
live logs; ``validate_only`` stops after validation. Shared logic (authorization included: ALTER_CONFIGS on
the topic, or on the cluster for BROKER and BROKER_LOGGER resources): :mod:`.alter_configs`.
"""

from __future__ import annotations

from typing import Any

from strata.broker.handlers.alter_configs import alter
from strata.broker.wire.dispatch import RequestContext, handles

INCREMENTAL_ALTER_CONFIGS = 44


@handles(INCREMENTAL_ALTER_CONFIGS)
async def incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await alter(ctx, request, incremental=True)
