"""Small thread-safe caches for facts that a digest fixes, read once per Executor.

A blob named by its digest cannot change, so what is parsed from it (an image's
manifest and config) or read from the snapshots built from it (a user's ids in that
image's /etc/passwd) needs no second round trip. What *can* change is whether those
objects still exist (an image removed and collected); callers that rely on a cached
fact :meth:`Memo.forget` it when containerd says otherwise, and ask again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Enough for every image and user a scheduler runs; the oldest goes first.
DEFAULT_MAX_ENTRIES = 512


class Memo(Generic[K, V]):
    """A bounded, least-recently-used map, safe to share between threads.

    A miss computes outside the lock, so a slow computation (a round trip, a mount)
    never blocks hits for other keys; two threads missing the same key at once both
    compute, and the values are equal by construction (the key is a digest).
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max = max_entries
        self._lock = threading.Lock()
        self._data: OrderedDict[K, V] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        with self._lock:
            if key not in self._data:
                self.misses += 1
                return None
            self.hits += 1
            self._data.move_to_end(key)
            return self._data[key]

    def put(self, key: K, value: V) -> V:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)
        return value

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The cached value, or ``compute()``'s, stored; an exception stores nothing."""
        with self._lock:
            if key in self._data:
                self.hits += 1
                self._data.move_to_end(key)
                return self._data[key]
            self.misses += 1
        return self.put(key, compute())

    def forget(self, key: K) -> None:
        with self._lock:
            self._data.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data
