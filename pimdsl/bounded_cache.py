"""A process's caches keyed by object identity, bounded: a long sweep loads a spec per point, and
caches that keep each point's objects alive (so that an id stays its own) would otherwise grow
with every point."""
from __future__ import annotations

from collections import OrderedDict


class BoundedCache(OrderedDict):
    """A dict that forgets its oldest entries once it holds more than `limit`: a forgotten entry is
    a miss that is computed again, and its object may be freed."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        if len(self) > self.limit:
            self.popitem(last=False)
