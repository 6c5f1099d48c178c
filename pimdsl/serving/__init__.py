"""Serving: the requests of a workload, iteration-level scheduling over a paged KV cache, and the
channel assignment and sub-batch algorithms ([NEUPIMS] Sec. 6) of the iteration serving loop
(`loops/iteration_serving/`). Pure bookkeeping: the
timing of an iteration comes from the interpreter, passed in as latency functions."""
from .channel_assignment import (ChannelAssignment, channel_loads, greedy_min_load, mha_latency,
                                 mha_tile_counts, partition_sub_batches, round_robin)
from .requests import Request, load_requests_csv, requests_for, synthetic_requests
from .scheduler import BatchEntry, Iteration, IterationScheduler, PagedKVCache

__all__ = [
    "Request", "load_requests_csv", "synthetic_requests", "requests_for",
    "PagedKVCache", "IterationScheduler", "Iteration", "BatchEntry",
    "mha_tile_counts", "mha_latency", "channel_loads", "greedy_min_load", "round_robin",
    "ChannelAssignment", "partition_sub_batches",
]
