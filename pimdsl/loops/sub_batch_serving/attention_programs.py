"""Decode attention priced by a memory's declared PIM programs, timed by the DRAM engine.

A serving loop that runs decode attention on a PIM memory asks here what one head of a request
with `kv` cached tokens costs on one channel: the unit's `attn_score` then `attn_context` programs
(lowering/pim_program), timed by the engine on the spec's part and rules with blocking refresh.
Timing every context length of a long run exactly would cost seconds, so the price is calibrated
per shape (memory, head_dim, program parameters) and cached: a head of `kv` tokens costs
`kv // P` steady-state periods of P tokens (measured over many periods, refresh included) plus a
tail of `kv mod P` tokens, timed once per granule of tokens and scaled by the share refresh
takes of the steady state (a tail is too short to meet a refresh of its own). P is a token count
after which the programs' rows repeat (their rows hold whole multiples of it).
"""
from __future__ import annotations

from dataclasses import dataclass
import weakref

import numpy as np

from ...interpreter.dram.compiled_timer import make_timer
from ...interpreter.dram.stream_timer import time_stream
from ...ir.hardware import Memory
from ...ir.pim_program import evaluate
from ...lowering.pim_program import environment, expand

GRANULE = 16            # tail tokens are timed in steps of this many (a chunk of 16 scores)
PERIODS = 32            # periods of P tokens the steady state is measured over


def shape(kv: int, head_dim: int, heads: int = 1) -> dict:
    return {"kv": int(kv), "heads": int(heads), "head_dim": int(head_dim), "requests": 1}


def head_cycles(memory: Memory, kv: int, head_dim: int, refresh: str = "blocking", params=None,
                heads: int = 1) -> int:
    """Cycles of `heads` heads' score and context programs on channel 0, timed alone from cycle 0:
    the context's rows after the score's. `params` sets program parameters (both programs' lets)."""
    return _timed(memory, kv, head_dim, refresh, params, heads)[0].end


def _timed(memory: Memory, kv: int, head_dim: int, refresh: str, params, heads: int):
    """(the StreamTimer, the timer) of head_cycles' programs."""
    pim, sh = memory.pim, shape(kv, head_dim, heads)
    score, context = pim.program("attn_score"), pim.program("attn_context")
    p = params or {}
    timer = make_timer(memory, pim.commands, pim.rules, pim.windows, refresh=refresh)
    st = time_stream(timer, expand(memory, score, sh, 0, params=_own(score, p)))
    first = int(evaluate(score.rows, environment(memory, score, sh, params=_own(score, p))))
    st.run(expand(memory, context, sh, 0, first_row=first, params=_own(context, p)))
    return st, timer


def command_sample(memory: Memory, head_dim: int, params=None, heads: int = 1, dtype_bytes: int = 2) -> dict:
    """The commands `heads` heads of PERIODS periods of tokens issue on channel 0, their seconds (with
    blocking refresh) and the K and V bytes they read: the sample whose command energy a run counts
    per second busy or per byte read (interpreter/run_energy.py `pim_command_samples`)."""
    kv = period_tokens(memory, head_dim) * PERIODS
    st, timer = _timed(memory, kv, head_dim, "blocking", params, heads)
    counts = {f"{kind or 'cmd'}.{name}": n for (name, kind), n in sorted(st.counts.items(), key=str)}
    return {"command_counts": counts, "seconds": st.end * memory.part.tck_s, "refreshes": timer.refreshes,
            "bytes": 2 * kv * heads * head_dim * dtype_bytes}


def _own(program, params: dict) -> dict:
    names = {let.name for let in program.lets}
    return {k: v for k, v in params.items() if k in names}


def period_tokens(memory: Memory, head_dim: int) -> int:
    """Tokens one row of the context program holds (its `per_row`, which the bundled attention
    programs declare): the rows of both programs repeat after a multiple of it."""
    env = environment(memory, memory.pim.program("attn_context"), shape(1, head_dim))
    if "per_row" not in env:
        raise ValueError(f"program attn_context of '{memory.pim.name}' declares no `per_row` (tokens per row)")
    return int(env["per_row"])


@dataclass(frozen=True)
class Calibration:
    """Cycles of `heads` heads of one request on one channel as a function of its context length."""
    period_tokens: int
    period_cycles: float            # steady state, refresh included
    tails: np.ndarray               # cycles of ceil(r / GRANULE) granules of tail, index 0 = none
    tck_s: float
    heads: int = 1

    def cycles(self, kv) -> np.ndarray:
        kv = np.asarray(kv, dtype=np.int64)
        full, rest = np.divmod(kv, self.period_tokens)
        return full * self.period_cycles + self.tails[-(-rest // GRANULE)]

    def head_seconds(self, kv) -> np.ndarray:
        """Seconds per head (the calibrated heads share the channel's rows)."""
        return self.cycles(kv) * (self.tck_s / self.heads)


_CACHE: dict[int, tuple[weakref.ref, dict]] = {}


def calibrate(memory: Memory, head_dim: int, period: int | None = None, params=None, heads: int = 1) -> Calibration:
    """The calibrated price of `heads` heads (cached per memory, head_dim, period, parameters and
    heads); `period` defaults to the context program's tokens per row."""
    entry = _CACHE.get(id(memory))
    if entry is None or entry[0]() is not memory:
        entry = _CACHE[id(memory)] = (weakref.ref(memory), {})
    P = period or period_tokens(memory, head_dim)
    key = (head_dim, P, heads, tuple(sorted((params or {}).items())))
    if key not in entry[1]:
        timed = lambda kv, refresh="blocking": head_cycles(memory, kv, head_dim, refresh, params, heads)
        steady = (timed(P * (PERIODS + 1)) - timed(P)) / PERIODS
        bare = (timed(P * (PERIODS + 1), "none") - timed(P, "none")) / PERIODS
        share = steady / bare if bare else 1.0
        tails = [0.0] + [timed(min(P, g * GRANULE), "none") * share for g in range(1, -(-P // GRANULE) + 1)]
        entry[1][key] = Calibration(P, steady, np.array(tails), memory.part.tck_s, heads)
    return entry[1][key]
