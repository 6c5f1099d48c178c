"""Per-request latency statistics of the request-serving loops (`pimc run --json`).

A request's TTFT runs from its arrival to its first token, its TPOT is the mean time between its
later tokens, (finish - first token) / (output tokens - 1), and its end-to-end latency runs from
arrival to its last token. Each is reported as the mean over the served requests (`ttft_s`,
`tpot_s`, `end_to_end_s`, numbers, so sweeps and scripts read them as before) with the median and
the 99th percentile beside it (`ttft_p50_s`, `ttft_p99_s`, ...). The run's length and throughput
have names of their own in each loop (`makespan_s`, `tokens_per_s`).
"""
from __future__ import annotations

import numpy as np


def request_latencies(ttft, tpot, end_to_end) -> dict:
    """{`ttft_s`, `ttft_p50_s`, `ttft_p99_s`, `tpot_s`, ..., `end_to_end_p99_s`} over the requests
    (a request of one output token has no TPOT; no request: zeros)."""
    out = {}
    for name, values in (("ttft", ttft), ("tpot", tpot), ("end_to_end", end_to_end)):
        v = np.asarray(list(values), dtype=float)
        out[f"{name}_s"] = float(v.mean()) if v.size else 0.0
        for p in (50, 99):
            out[f"{name}_p{p}_s"] = float(np.percentile(v, p)) if v.size else 0.0
    return out
