"""``MemoryObjectStore``: an :class:`~strata.tiered.api.ObjectStore` in a dict, for one module's unit tests.

Never a broker's store: it forgets everything on exit. Thread-safe, as the real stores are, and it counts
its calls so tests can assert how many PUTs and GETs a code path made.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence

from strata.tiered.api import ObjectInfo, RemoteResourceNotFoundError


class MemoryObjectStore:
    def __init__(self) -> None:
        self._objects: dict[str, tuple[bytes, int]] = {}
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()

    def put_object(self, key: str, data: bytes | bytearray | memoryview) -> None:
        with self._lock:
            self.calls["put"] += 1
            self._objects[key] = (bytes(data), int(time.time() * 1000))

    def get_object_range(self, key: str, start: int, end: int) -> bytes:
        with self._lock:
            self.calls["get"] += 1
            found = self._objects.get(key)
        if found is None:
            raise RemoteResourceNotFoundError(f"no object {key}")
        return found[0][start:end]

    def delete_objects(self, keys: Sequence[str]) -> None:
        with self._lock:
            self.calls["delete"] += 1
            for key in keys:
                self._objects.pop(key, None)

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        with self._lock:
            self.calls["list"] += 1
            found = [ObjectInfo(k, len(v), t) for k, (v, t) in self._objects.items() if k.startswith(prefix)]
        return iter(found)

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._objects)
