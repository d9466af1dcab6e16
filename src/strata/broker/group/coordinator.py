"""Placeholder replaced by the group coordinator (work in progress in this commit series)."""

from __future__ import annotations

from typing import Any


class GroupCoordinator:
    def __init__(self, broker: Any) -> None:
        self.broker = broker

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
