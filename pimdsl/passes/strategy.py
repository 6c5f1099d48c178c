"""Weight strategies: how many copies of the weights exist, in which layout, and how the host reads them.

PIM needs its operands in a PIM-aware layout in a non-cacheable region; a
host GEMM wants a host-friendly layout in a cacheable one. `mapping.strategy`
picks how a system resolves that (the mapping spec that lists a strategy
cites its source):

  wd       weight duplication: a host-friendly cacheable copy for the host and
           a PIM-aware non-cacheable copy for PIM
  facil_o  an oracle memory attribute: one PIM-aware copy the host reads as if
           it were host-friendly and cacheable
  ddb      DRAM double buffering: one PIM-aware copy; copy threads swizzle the
           next weights into two cacheable buffers while the compute threads
           run the current GEMM
  owr      online weight rearrangement: one PIM-aware copy and one buffer;
           copy, then GEMM, on the compute threads
  c_gemm   one host-friendly cacheable copy, no PIM
  nc_gemm  one PIM-aware non-cacheable copy; the host GEMM reads it
           uncached, so every token rereads the weights

A mapping whose strategy is not one of these keeps the default: host ops read
a host-friendly copy and PIM ops a PIM-aware one (as `wd`).

The platform's copy and uncached-read rates are mapping parameters, each
cited in the spec (`PARAMS`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.workload import System
from ..ir import units as U
from ..ir.errors import CompileError
from ..ir.params import Param


@dataclass(frozen=True)
class Strategy:
    name: str
    pim: bool            # ops the mapping places on PIM stay there
    host_copy: bool      # host ops read their own host-friendly copy (else the PIM-aware one)
    via: str | None      # how host ops reach the PIM-aware copy: oracle, ddb, owr, or None (directly)
    buffers: int = 0     # cacheable SMC buffers, each the size of the largest decoder-layer weight


STRATEGIES = {s.name: s for s in (
    Strategy("wd", pim=True, host_copy=True, via=None),
    Strategy("facil_o", pim=True, host_copy=False, via="oracle"),
    Strategy("ddb", pim=True, host_copy=False, via="ddb", buffers=2),
    Strategy("owr", pim=True, host_copy=False, via="owr", buffers=1),
    Strategy("c_gemm", pim=False, host_copy=True, via=None),
    Strategy("nc_gemm", pim=True, host_copy=False, via=None),
)}
DEFAULT = STRATEGIES["wd"]

# mapping params the copy and uncached-read models need
PARAMS = {"smc_bandwidth_fraction_per_thread": Param(U.NONE, "0..1", "each copy thread's share of peak DRAM bandwidth (ddb, owr)"),
          "smc_noncacheable_slowdown": Param(U.NONE, "> 0", "how much slower copies out of the non-cacheable region run (ddb, owr)"),
          "noncacheable_read_bandwidth": Param(U.BANDWIDTH, "> 0", "the host GEMM's uncached weight read rate (nc_gemm)")}


def strategy_of(system: System) -> Strategy:
    mapping = system.mapping
    return STRATEGIES.get(mapping.strategy, DEFAULT) if mapping else DEFAULT


def param(system: System, name: str) -> float:
    mapping = system.mapping
    if mapping is None or name not in mapping.params:
        raise CompileError(f"strategy '{strategy_of(system).name}' needs mapping parameter '{name}'",
                           mapping.span if mapping else system.span,
                           f"add `{name} = ...;` (with its source) to the mapping's params block")
    value = mapping.params[name]
    # every such parameter is a rate, a fraction or a slowdown that the models divide by
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise CompileError(f"mapping parameter '{name}' must be a positive number, got {value!r}",
                           mapping.param_spans.get(name, mapping.span), "a rate, fraction or slowdown above zero")
    return float(value)


def copy_threads(system: System, host, via: str) -> int:
    """DDB copies on the copy threads; OWR on the compute (GEMM) threads."""
    key = "copy" if via == "ddb" else "gemm"
    return int(host.threads.get(key, host.cores))


def smc_bandwidth(system: System, host, threads: int) -> float:
    """Bytes/s of SMC traffic with `threads` copy threads.

    Each copy thread adds an equal share of the host's peak DRAM bandwidth, up
    to all of it, and copies out of the non-cacheable region run `slowdown`
    times slower: rate = peak * min(1, threads * fraction) / slowdown (the
    mapping's params give both, with their source).
    """
    fraction = param(system, "smc_bandwidth_fraction_per_thread")
    slowdown = param(system, "smc_noncacheable_slowdown")
    return host.memory_bandwidth_bytes_per_s * min(1.0, threads * fraction) / slowdown


def noncacheable_read_bandwidth(system: System) -> float:
    return param(system, "noncacheable_read_bandwidth")
