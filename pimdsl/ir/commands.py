"""Typed commands: what PIM lowering produces and the DRAM engine, the values executors and the
stream emitters consume."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import PimdslError


@dataclass(frozen=True)
class Command:
    """One typed command of a stream: the DRAM or PIM command, where it goes, and what it is
    for (`kind`, e.g. a MAC-triggering read or a register-file write)."""
    name: str
    channel: int = 0
    pseudo_channel: int = 0
    rank: int = 0
    bank_group: int = 0
    bank: int = 0
    row: int = 0
    column: int = 0
    kind: str = ""
    data: object = field(default=None, compare=False, repr=False)   # a write's payload (values mode)
    estimate: int = 0             # cycles of the work an announcing command heads (its `estimate` arg)
    timing_arg: int = 0           # the argument its declared timing rules depend on (e.g. a GEMV's k), if any


class StreamError(PimdslError):
    pass

# The declared argument by which a command announces how long the work it heads takes.
ESTIMATE_ARG = "estimate"
