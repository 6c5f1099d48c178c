"""What a run loop returns (`pimdsl/loops/__init__.py`): its report (`pimc run --json`), the
intervals of its timeline and, for the step loop, each pass's time. A record every loop shares, so
it sits at the bottom with the other records, not in one loop's package."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunResult:
    report: dict
    intervals: list = field(default_factory=list)     # emit.timeline.Interval, whole run
    pass_times_s: dict = field(default_factory=dict)
