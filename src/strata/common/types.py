from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:  # Kafka's directory naming: <topic>-<partition>
        return f"{self.topic}-{self.partition}"
