"""The cleaner's key -> latest offset map (Kafka's ``SkimpyOffsetMap``), bounded in bytes.

Kafka hashes each key to 16 bytes (MD5) in a preallocated array of 24-byte slots and fills it to
``log.cleaner.io.buffer.load.factor``; a hash collision there can wrongly drop a record. This map
keeps the key itself (a Python dict: exact, no collisions) and charges each entry what it really
costs in memory (the key's bytes plus the dict slot and the offset object, ~100 bytes), so
``log.cleaner.dedupe.buffer.size`` bounds the memory a cleaner thread uses, as in Kafka. When the
map is full the cleaning covers the dirty offsets mapped so far and the next one continues from there.
"""

from __future__ import annotations

from collections.abc import Callable

ENTRY_OVERHEAD = 100  # bytes per entry beyond the key: dict slot, int object, bytes object header


class OffsetMap:
    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        if memory_bytes * load_factor < ENTRY_OVERHEAD + 1:
            raise ValueError(f"a dedupe buffer of {memory_bytes} bytes cannot hold a single key; raise "
                             "log.cleaner.dedupe.buffer.size or lower log.cleaner.threads")
        self.memory_bytes = memory_bytes
        self.budget = int(memory_bytes * load_factor)
        self._map: dict[bytes, int] = {}
        self.used = 0
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    def clear(self) -> None:
        self._map.clear()
        self.used = 0
        self.latest_offset = -1

    @property
    def is_full(self) -> bool:
        return self.used >= self.budget

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as the latest of ``key``; False (nothing stored) when the key would not fit."""
        previous = self._map.get(key)
        if previous is None:
            cost = len(key) + ENTRY_OVERHEAD
            if self.used + cost > self.budget:
                return False
            self.used += cost
        self._map[key] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset
        return True

    def put_all(self, entries: list[tuple[bytes, int]]) -> bool:
        """:meth:`put` of each (key, offset) in order; False at the first that does not fit (the ones
        before it are stored). One loop with local names: the cleaner maps every record of the dirty
        section through here."""
        d = self._map
        used, budget = self.used, self.budget
        stored = True
        last = -1
        for key, offset in entries:
            if key not in d:
                cost = len(key) + ENTRY_OVERHEAD
                if used + cost > budget:
                    stored = False
                    break
                used += cost
            d[key] = offset
            last = offset
        self.used = used
        if last > self.latest_offset:
            self.latest_offset = last
        return stored

    @property
    def lookup(self) -> Callable[[bytes, int], int]:
        """``lookup(key, -1)``: the latest offset of ``key`` or -1 (the dict's own ``get``, for hot loops)."""
        return self._map.get

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1."""
        return self._map.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        if offset > self.latest_offset:
            self.latest_offset = offset

    @property
    def utilization(self) -> float:
        return self.used / self.memory_bytes if self.memory_bytes else 0.0
