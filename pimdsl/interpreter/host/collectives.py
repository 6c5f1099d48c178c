"""Collectives over a link: all-reduce (ring or tree) and send/recv between devices.

A link's `collective { algorithm; step_latency; bus_bandwidth; }` says how its collectives run
(fitted on measured all-reduce curves, [VIDUR] profiling data; `validation/run_gpu.py --fit`).
For an all-reduce of ``S`` bytes (each worker's tensor) over ``n`` workers:

* ring ([NCCL] ring all-reduce: a reduce-scatter then an all-gather, ``2 (n - 1)`` steps each
  moving ``S / n`` bytes per worker):
  ``seconds = 2 (n - 1) (step_latency + S / (n * bus_bandwidth))``;
* tree (a reduce up and a broadcast down a binary tree, pipelined, so the bytes cost as in the
  ring and the latency grows with the depth):
  ``seconds = 2 ceil(log2 n) step_latency + 2 (n - 1) / n * S / bus_bandwidth``.

Without a `collective` block the ring runs at the link's own latency and bandwidth per step.
Send/recv is one transfer: ``latency + S / bandwidth`` (host/models.transfer_time).
"""
from __future__ import annotations

import math

from ...ir.hardware import Link
from .models import ModelError, transfer_time


def all_reduce_time(link: Link, nbytes: float, workers: int) -> float:
    """Seconds for `workers` devices to all-reduce `nbytes` each over `link`."""
    if workers < 1:
        raise ModelError(f"an all-reduce over link '{link.name}' needs at least 1 worker, not {workers}")
    if workers == 1 or nbytes == 0:
        return 0.0
    if nbytes < 0:
        raise ModelError(f"an all-reduce over link '{link.name}' of negative size ({nbytes:g} bytes)")
    coll = link.collective
    if coll is None:
        return 2 * (workers - 1) * transfer_time(link, nbytes / workers, instances=1)
    if coll.algorithm == "tree":
        return (2 * math.ceil(math.log2(workers)) * coll.step_latency_s
                + 2 * (workers - 1) / workers * nbytes / coll.bus_bandwidth_bytes_per_s)
    return 2 * (workers - 1) * (coll.step_latency_s + nbytes / (workers * coll.bus_bandwidth_bytes_per_s))


def send_recv_time(link: Link, nbytes: float) -> float:
    """Seconds to send `nbytes` from one device to another over one instance of `link`."""
    return transfer_time(link, nbytes, instances=1)
