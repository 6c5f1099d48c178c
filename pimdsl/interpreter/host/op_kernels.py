"""One transformer operator as a kernel record: the shapes, FLOPs and DRAM bytes `pimc kernel`
times and the GPU validation compares (the operators of a decoder layer, [VIDUR] Sec. 4).

Every operator takes ``M`` tokens. ``gemm`` is ``M,N,K`` (N outputs, K inputs; the weights are N x K)
and moves ``(N K + M K + M N)`` elements. The element-wise operators take ``M,N`` (N the row width)
and move what they read and write:

| op | reads | writes | FLOPs | split by TP |
|---|---|---|---|---|
| rmsnorm, layernorm | M N + N (the weight) | M N | 4 M N | no (replicated) |
| add | 2 M N | M N | M N | no |
| silu_mul (gated activation; N the expanded width) | 2 M N | M N | 5 M N | yes |
| gelu, silu | M N | M N | 8 M N | yes |
| rotary (N the width of the rotated q and k) | M N | M N | 3 M N | yes |

Tensor parallelism over ``tp`` devices gives one device's share: a GEMM's N (column-parallel; its
K with ``split = "k"``, row-parallel) and the split element-wise ops' N are divided by ``tp``.
"""
from __future__ import annotations

import math

from ...ir.errors import PimdslError

# op -> (kernel kind, read rows, write rows, flops per element, split by TP, reads a weight row)
ELEMENTWISE = {
    "rmsnorm": ("norm", 1, 1, 4, False, True),
    "layernorm": ("norm", 1, 1, 4, False, True),
    "add": ("elementwise", 2, 1, 1, False, False),
    "silu_mul": ("elementwise", 2, 1, 5, True, False),
    "gelu": ("elementwise", 1, 1, 8, True, False),
    "silu": ("elementwise", 1, 1, 8, True, False),
    "rotary": ("elementwise", 1, 1, 3, True, False),
}
OPS = ("gemm", *ELEMENTWISE)


class OpError(PimdslError):
    """An operator or shape `op_kernel` cannot build."""


def op_kernel(op: str, shape: tuple[int, ...], device: str, *, tp: int = 1, dtype: str = "fp16",
              split: str = "n") -> Kernel:
    """The kernel of one device's share of `op` on `shape` under `tp`-way tensor parallelism."""
    from ...ir.workload import DTYPE_BYTES      # here: `pimc kernel`'s parser needs only OPS
    from ...lowering.records import Kernel
    if op not in OPS:
        raise OpError(f"unknown op '{op}'; the ops are {', '.join(OPS)}")
    if dtype not in DTYPE_BYTES:
        raise OpError(f"unknown dtype '{dtype}'; the dtypes are {', '.join(DTYPE_BYTES)}")
    if tp < 1:
        raise OpError(f"--tp must be at least 1, not {tp}")
    want = 3 if op == "gemm" else 2
    if len(shape) != want or min(shape) < 1:
        raise OpError(f"{op} takes --shape {'M,N,K' if want == 3 else 'M,N'} (positive whole numbers), "
                      f"not {','.join(map(str, shape))}")
    b = DTYPE_BYTES[dtype]
    if op == "gemm":
        m, n, k = shape
        if split == "k":
            k = math.ceil(k / tp)
        else:
            n = math.ceil(n / tp)
        return Kernel(op, "gemm" if m > 1 else "gemv", device, dtype, 2.0 * m * n * k,
                      float(b * (n * k + m * k + m * n)), {"m": m, "n": n, "k": k})
    m, n = shape
    kind, reads, writes, flops, split_tp, weight = ELEMENTWISE[op]
    if split_tp:
        n = math.ceil(n / tp)
    return Kernel(op, kind, device, dtype, float(flops * m * n),
                  float(b * ((reads + writes) * m * n + (n if weight else 0))), {"m": m, "n": n})
