"""Intervals: one busy span of one resource, what every timed run reports and the timeline draws."""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Interval:
    """`resource` is busy with `name` from `start_s` to `end_s` (seconds)."""
    resource: str
    name: str
    start_s: float
    end_s: float
    category: str = ""
    args: dict = field(default_factory=dict)   # shown in the viewer's detail pane; JSON values

    def __post_init__(self):
        if not (math.isfinite(self.start_s) and math.isfinite(self.end_s)):
            raise ValueError(f"interval '{self.name}' on '{self.resource}' has a non-finite time "
                             f"({self.start_s}, {self.end_s})")
        if self.end_s < self.start_s:
            raise ValueError(f"interval '{self.name}' on '{self.resource}' ends ({self.end_s:g} s) "
                             f"before it starts ({self.start_s:g} s)")
