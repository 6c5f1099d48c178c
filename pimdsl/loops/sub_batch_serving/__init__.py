"""The sub-batch serving loop: GPUs hold the weights, a processing-in-memory host memory the KV cache.

Selected by a mapping with `loop = sub_batch_serving;`. Iteration-level serving of the workload's
requests (all arriving at 0 s) on `dp` replicas of `tp` GPUs ([L3] Table 3), priced per layer by
`dimm_pim_costs`. Strategies (`mapping.strategy`, [L3] Sec. 6.1 and Fig. 10a):

  l3             decode MHA on the bank PUs of the DIMM-PIM; two sub-batches whose prefill (GPU) overlaps
                 the other's decode MHA, chunked prefill sized so T_GPU reaches the other's T_PIM
                 (Sec. 5.2-5.3); ranksets and asynchronous prefill-KV offload (Sec. 5.1)
  l3_interleave  Fig. 10a middle bar: the interleaving scheduler without Sec. 5.1 (prefill KV crosses
                 PCIe on the critical path and a write blocks the whole memory)
  l3_naive       Fig. 10a first bar: neither; prefill-first iterations, GPU then PIM in series
  gpu_only       KV in HBM beside the weights, decode MHA on the GPUs, prefill-first
  hbm_pim        KV in HBM, decode MHA on HBM-PIM; prefill-first, two decode sub-batches overlapping
                 FC and PIM (NeuPIMs/AttAcc-like, [L3] Sec. 6.1)
  r_pim          KV in host memory, decode MHA on rank-level PUs, single batch, prefill-first,
                 communication free (Hermes-like, [L3] Sec. 6.1)
  cpu_offload    KV in host memory, decode MHA on the host CPUs at their memory bandwidth, with the
                 two-sub-batch overlap of GPU and CPU (NEO-like; NEO's load-aware policy is not modelled)

A request reserves the KV of its whole life (input + output tokens) when its prefill starts, and a
request that cannot fit alone in its replica's KV memory is reported as out of memory and not run.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ...ir.run_result import RunResult
from ...frontend.diagnostics import did_you_mean
from ...ir.workload import System
from ...ir.errors import CompileError
from ...serving.metrics import request_latencies
from ...serving.requests import requests_for
from ...unread import leading_links
from ...ir.params import NAME, WHOLE, Param
from . import attention_programs as ap
from . import dimm_pim_costs as dc
from .latency_predictors import Profiles
from .sub_batch_split import chunk, split, split_by_class


@dataclass(frozen=True)
class Mode:
    attention: str                # dimm_bank, rank_pu, gpu, hbm_pim, cpu
    kv_home: str                  # host or hbm
    interleave: bool              # Sec. 5.2-5.3 scheduler (else prefill-first iterations)
    overlap: bool                 # Sec. 5.1 ranksets + asynchronous prefill KV
    decode_sub_batches: bool      # prefill-first with two decode sub-batches (HBM-PIM)
    comm: bool                    # decode vectors and KV cross PCIe at a cost


MODES = {
    "l3": Mode("dimm_bank", "host", True, True, False, True),
    "l3_interleave": Mode("dimm_bank", "host", True, False, False, True),
    "l3_naive": Mode("dimm_bank", "host", False, False, False, True),
    "gpu_only": Mode("gpu", "hbm", False, False, False, False),
    "hbm_pim": Mode("hbm_pim", "hbm", False, False, True, False),
    "r_pim": Mode("rank_pu", "host", False, False, False, False),
    "cpu_offload": Mode("cpu", "host", True, False, False, True),
}
STRATEGIES = tuple(MODES)
PARAMS = {
    "tp": Param(WHOLE, ">= 1", "tensor parallelism: GPUs per replica ([L3] Table 3)"),
    "dp": Param(WHOLE, ">= 1", "data parallelism: replicas, each with 1/dp of the host memory's channels"),
    "chunk_multiple": Param(WHOLE, ">= 1", "prefill chunks are a multiple of this many tokens ([L3] Sec. 5.3 step 4)"),
    "hbm_pim_memory": Param(NAME, meaning="memory of the hbm_pim baseline (one per GPU): decode MHA by its unit's attention programs"),
    "host_cpu": Param(NAME, meaning="the CPU that runs decode MHA in the cpu_offload strategy"),
    "sub_batch_split": Param(NAME, meaning="token_sum ([L3] Sec. 5.3 step 2 as written) or per_rankset (the same inside each rankset)"),
    "predictor": Param(NAME, meaning="oracle (the scheduler asks the cost model) or learned (the online predictors of Sec. 5.3)"),
    "prefilled": Param(WHOLE, "0..1", "1: requests arrive with their prompts already in the KV cache, decode-only batches ([L3] Fig. 11)"),
}
PREDICTORS = ("oracle", "learned")
SPLITS = ("per_rankset", "token_sum")
OP_CLASSES: tuple[str, ...] = ()


def links_read(system) -> int:
    """The links this loop times: the GPUs' PCIe to the PIM memory and their NVLink, by kind."""
    return leading_links(system, ("pcie", "nvlink"))



def _fail(message, span, hint=None):
    raise CompileError(message, span, hint)


def _device(system, kind, name=None):
    for p in system.processors:
        if p.kind == kind and (name is None or p.name == name):
            return p
    return None


def setup(system: System):
    m = system.mapping
    if m.strategy not in MODES:
        _fail(f"strategy '{m.strategy}' is not one of the sub-batch serving strategies", m.span,
              did_you_mean(m.strategy, STRATEGIES, "strategies") or "choose " + ", ".join(STRATEGIES))
    for name in m.params:
        if name not in PARAMS:
            _fail(f"the sub-batch serving loop has no param '{name}'", m.param_spans.get(name, m.span),
                  did_you_mean(name, tuple(PARAMS), "params") or "params: " + ", ".join(PARAMS))
    gpu = _device(system, "gpu")
    mem = next((x for x in system.memories if x.pim is not None), None)
    if gpu is None or mem is None:
        _fail(f"system '{system.name}' needs a gpu and a memory with a PIM unit", system.span)
    tp, dp = int(m.params.get("tp", 1)), int(m.params.get("dp", 1))
    if tp * dp > gpu.count:
        _fail(f"tp {tp} x dp {dp} needs {tp * dp} GPUs; '{gpu.name}' has {gpu.count}", m.param_spans.get("tp", m.span),
              f"lower tp or dp, or declare `gpu {gpu.name}[{tp * dp}]`")
    if mem.organization.channels * mem.count % dp:
        _fail(f"dp {dp} does not divide the {mem.organization.channels} channels of '{mem.name}'", m.span)
    links = {l.kind: l for l in system.links}
    if "pcie" not in links:
        _fail(f"system '{system.name}' has no pcie link between the GPUs and the host memory", system.span)
    host = m.params.get("host_cpu")
    cpu = _device(system, "cpu", host)
    if host is not None and cpu is None:
        _fail(f"host_cpu '{host}' is not a cpu of system '{system.name}'", m.param_spans.get("host_cpu", m.span))
    region = sum(r.size_bytes for r in mem.regions if "kv_cache" in r.holds) or mem.capacity_bytes * mem.count
    weights = system.model.weight_bytes
    if weights > tp * gpu.memory_bytes:
        _fail(f"model '{system.model.name}' ({weights / 1e9:.0f} GB) does not fit {tp} x {gpu.memory_bytes / 1e9:.0f} GB",
              m.span, "raise tp")
    mode = MODES[m.strategy]
    hbm_pim = _hbm_pim_memory(system) if mode.attention == "hbm_pim" else None
    hw = dc.hardware(gpu, cpu, mem, links.get("nvlink"), links["pcie"], tp, dp, region, weights,
                     hbm_pim, system.model.head_dim)
    if mode.attention == "cpu" and cpu is None:
        _fail("strategy cpu_offload needs a cpu (set params.host_cpu)", m.span)
    if system.workload.kv_admission != "reserve":
        _fail(f"kv_admission = {system.workload.kv_admission} is not modelled by the sub-batch serving loop",
              system.workload.span, "a request reserves its whole life's KV at admission: remove it or write reserve")
    try:
        requests = requests_for(system.workload)
    except ValueError as e:   # RequestsError too
        _fail(str(e), system.workload.span)
    how = m.params.get("sub_batch_split", "per_rankset")
    if how not in SPLITS:
        _fail(f"sub_batch_split '{how}' is not one of {', '.join(SPLITS)}", m.param_spans.get("sub_batch_split", m.span))
    predictor = m.params.get("predictor", "oracle")
    if predictor not in PREDICTORS:
        _fail(f"predictor '{predictor}' is not one of {', '.join(PREDICTORS)}", m.param_spans.get("predictor", m.span))
    if m.params.get("prefilled", 0) not in (0, 1):
        _fail(f"prefilled must be 0 or 1, not {m.params['prefilled']!r}", m.param_spans.get("prefilled", m.span))
    multiple = m.params.get("chunk_multiple", 16)
    if not (isinstance(multiple, (int, float)) and multiple >= 1 and float(multiple).is_integer()):
        _fail(f"chunk_multiple must be a whole number of tokens >= 1, not {multiple!r}",
              m.param_spans.get("chunk_multiple", m.span))
    return mode, dc.Costs(hw, dc.Shape.of(system.model)), dp, int(multiple), (how, predictor), requests


def _hbm_pim_memory(system):
    """The memory `hbm_pim_memory` names: one of the system's, with attention programs."""
    m = system.mapping
    name = m.params.get("hbm_pim_memory")
    if name is None:
        _fail("strategy hbm_pim needs params.hbm_pim_memory (a memory with an HBM-PIM unit)", m.span)
    memory = next((x for x in system.memories if x.name == name), None)
    if memory is None:
        _fail(f"hbm_pim_memory '{name}' is not a memory of system '{system.name}'",
              m.param_spans.get("hbm_pim_memory", m.span),
              did_you_mean(str(name), tuple(x.name for x in system.memories), "memories"))
    missing = [c for c in ("attn_score", "attn_context") if memory.pim is None or memory.pim.program(c) is None]
    if missing:
        _fail(f"hbm_pim_memory '{name}' has no PIM program for {', '.join(missing)}",
              m.param_spans.get("hbm_pim_memory", m.span), "give its unit `program attn_score` and `program attn_context`")
    return memory


class Replica:
    """One replica's serving state and clock."""

    def __init__(self, name, system, mode: Mode, costs: dc.Costs, requests, multiple: int, how: str,
                 profiles: Profiles, timeline: bool):
        self.name, self.mode, self.c, self.multiple, self.prof = name, mode, costs, multiple, profiles
        self.how, self.learned = how[0], how[1] == "learned"
        self.layers = system.model.layers
        self.prefilled = system.mapping.params.get("prefilled", 0) == 1
        hw = costs.hw
        self.R = hw.ranksets if mode.attention == "dimm_bank" else 1
        cap = hw.kv_capacity_host if mode.kv_home == "host" else hw.kv_capacity_hbm
        self.cap_tokens = cap / (costs.shape.kv_token_bytes * self.layers)
        self.oom = [r for r in requests if r.input_len + r.output_len > self.cap_tokens]
        self.waiting = deque([r.id, r.input_len, r.output_len, 0, -1] for r in requests
                             if r.input_len + r.output_len <= self.cap_tokens)   # id, in, out, done, class
        self.used = 0.0
        self.class_tokens = np.zeros(self.R)
        self.ctx = np.zeros(0, int); self.left = np.zeros(0, int); self.cls = np.zeros(0, int)
        self.ids = np.zeros(0, int); self.reserved = np.zeros(0, int)
        self.clock = 0.0
        self.first_token, self.finish = {}, {}
        self.busy = {"gpu": 0.0, "attention": 0.0, "pcie": 0.0}
        self.pcie_bytes = 0.0
        self.kv_read = self.kv_written = 0.0   # tokens of one layer's K and V read by attention / written, summed
        self.imbalance = [0.0, 0.0]   # sum over phases of R x the busiest rankset's tokens, and of all tokens
        self.max_batch, self.batch_time = 0, 0.0
        self.intervals = [] if timeline else None

    # -- memory and requests ------------------------------------------------------------------
    def _admit(self, w) -> bool:
        if w[4] >= 0:
            return True
        need = w[1] + w[2]
        if self.used + need > self.cap_tokens:
            return False
        self.used += need
        w[4] = int(np.argmin(self.class_tokens))   # [L3] Sec. 5.1: balance the ranksets
        self.class_tokens[w[4]] += need
        return True

    def _start_decode(self, w):
        rid, inp, out = w[0], w[1], w[2]
        self.first_token[rid] = self.clock
        if out <= 1:
            self._release(w[4], inp + out)
            self.finish[rid] = self.clock
            return
        self.ctx = np.append(self.ctx, inp + 1); self.left = np.append(self.left, out - 1)
        self.cls = np.append(self.cls, w[4]); self.ids = np.append(self.ids, rid)
        self.reserved = np.append(self.reserved, inp + out)

    def _release(self, cls, tokens):
        self.used -= tokens
        self.class_tokens[cls] -= tokens

    def _advance(self, steps: int):
        """Every running request gains `steps` tokens; the finished leave."""
        n = len(self.ctx)       # decode attention read every cached token, each step one more; each wrote its own
        self.kv_read += steps * float(self.ctx.sum()) + n * steps * (steps - 1) / 2
        self.kv_written += steps * n
        self.ctx += steps; self.left -= steps
        done = self.left <= 0
        for i in np.flatnonzero(done):
            self.finish[int(self.ids[i])] = self.clock
            self._release(int(self.cls[i]), int(self.reserved[i]))
        keep = ~done
        self.ctx, self.left, self.cls = self.ctx[keep], self.left[keep], self.cls[keep]
        self.ids, self.reserved = self.ids[keep], self.reserved[keep]

    # -- prices ---------------------------------------------------------------------------------
    def _loads(self, members):
        loads = np.zeros(self.R); counts = np.zeros(self.R)
        np.add.at(loads, self.cls[members] % self.R, self.ctx[members])
        np.add.at(counts, self.cls[members] % self.R, 1)
        return loads, counts

    def _attention(self, members, steps, prefill_writes, record=True):
        """Decode MHA of `members` for `steps` successive iterations (array of seconds per layer),
        with `prefill_writes` (tokens per rankset class) landing meanwhile."""
        c, mode = self.c, self.mode
        n = len(members)
        j = np.arange(steps)[:, None]
        loads, counts = self._loads(members)
        tokens = loads[None, :] + j * counts[None, :]
        if n == 0 and not prefill_writes.any():
            return np.zeros(steps)
        if mode.attention == "dimm_bank":
            if mode.overlap and record:   # what the per-layer rankset placement costs against perfect balance
                self.imbalance[0] += float(tokens.max(1).sum()) * self.R
                self.imbalance[1] += float(tokens.sum())
            blocks = c.write_block(prefill_writes + counts)[None, :]
            t = c.rankset_pim(tokens, np.broadcast_to(blocks, tokens.shape), mode.overlap)
        elif mode.attention == "rank_pu":
            t = c.kv_bytes(tokens.sum(1)) / c.hw.rank_pu_bw
        elif mode.attention == "hbm_pim":
            t = c.hbm_pim_attention(self.ctx[members][None, :] + j)
        elif mode.attention == "cpu":
            t = c.kv_bytes(tokens.sum(1) + prefill_writes.sum() + n) / c.hw.cpu_bw
        else:
            t = c.decode_attention_gpu(tokens.sum(1))
        if mode.comm and n:
            t = t + c.decode_vectors(n)
        return t

    def _gpu(self, chunks, decode_n):
        """GPU seconds per layer: prefill MHA of `chunks` [(tokens, prefix)], FC of every token,
        and the prefill KV offload (synchronous without Sec. 5.1, else hidden under FC)."""
        c = self.c
        tok = sum(ch for ch, _ in chunks)
        mha = float(sum(c.prefill_attention(ch, pre) for ch, pre in chunks)) if chunks else 0.0
        fc = float(c.fc(tok + decode_n)) if tok + decode_n else 0.0
        kv = float(c.pcie(c.kv_bytes(tok))) if self.mode.kv_home == "host" and self.mode.comm else 0.0
        if chunks:
            self.prof.record("prefill_mha", (tok, sum(p for _, p in chunks)), mha)
        if tok + decode_n:
            self.prof.record("fc", (tok, decode_n), fc)
        return mha + fc + (max(0.0, kv - fc) if self.mode.overlap else kv), kv

    # -- iterations -----------------------------------------------------------------------------
    def _spend(self, per_layer: np.ndarray, gpu_s, att_s, pcie_s, label, tokens_out: int):
        total = float(per_layer.sum()) * self.layers + float(self.c.lm_head(tokens_out)) if per_layer.size else 0.0
        start = self.clock
        self.clock += total
        self.busy["gpu"] += gpu_s * self.layers; self.busy["attention"] += att_s * self.layers
        self.busy["pcie"] += pcie_s * self.layers
        self.batch_time += len(self.ctx) * total
        self.max_batch = max(self.max_batch, len(self.ctx))
        if self.intervals is not None and total > 0:
            from ...ir.intervals import Interval
            self.intervals.append(Interval(f"{self.name}.gpu", label, start, start + min(total, gpu_s * self.layers), "compute"))
            if att_s:
                self.intervals.append(Interval(f"{self.name}.{self.mode.attention}", label, start,
                                               start + min(total, att_s * self.layers), "pim"))

    def _prefill_pick(self, budget_s, decode_n, chunk_free):
        """Prefill chunks for one sub-batch: whole requests while T_GPU < budget, the crossing one
        chunked (if this batch has not chunked yet) to a multiple of 16 ([L3] Sec. 5.3 steps 3-4)."""
        picked, chunked = [], False
        while self.waiting:
            w = self.waiting[0]
            if not self._admit(w):
                break
            rest = w[1] - w[3]
            base = [(ch, pre) for ch, pre, _ in picked]
            if picked and self._gpu_candidates(base[:-1], [base[-1][0]], base[-1][1], decode_n)[0] >= budget_s:
                break
            trial = self._gpu_candidates(base, [rest], w[3], decode_n)[0]
            if trial > budget_s and chunk_free:
                size = chunk(rest, budget_s, lambda s: self._gpu_candidates(base, s, w[3], decode_n), self.multiple)
                chunked = size < rest
                picked.append((size, w[3], w))
                self.waiting.popleft()
                break
            picked.append((rest, w[3], w))
            self.waiting.popleft()
            if trial > budget_s:
                break
        return picked, chunked

    def _budget(self, members) -> float:
        """The PIM time a sub-batch's decode MHA will take: predicted, or the cost model's."""
        if self.learned and self.prof.ready("decode_mha"):
            return float(self.prof.predict("decode_mha", [self._pim_features(members, [])])[0])
        return float(self._attention(members, 1, np.zeros(self.R), record=False)[0])

    def _gpu_candidates(self, base, sizes, prefix, decode_n):
        """GPU time of `base` chunks plus one more of each size in `sizes`: predicted, or the cost model's."""
        if not (self.learned and self.prof.ready("prefill_mha", "fc")):
            return np.array([self._gpu_quiet_list(base + [(int(x), prefix)], decode_n) for x in sizes])
        c, tok = self.c, sum(ch for ch, _ in base) + np.asarray(sizes, float)
        mha = self.prof.predict("prefill_mha", [(x, prefix) for x in sizes])
        if base:
            mha = mha + self.prof.predict("prefill_mha", base).sum()
        fc = self.prof.predict("fc", [(t, decode_n) for t in tok])
        if not (self.mode.kv_home == "host" and self.mode.comm):
            return mha + fc
        kv = c.pcie(c.kv_bytes(tok))
        return mha + fc + (np.maximum(0.0, kv - fc) if self.mode.overlap else kv)

    def _gpu_quiet_list(self, chunks, decode_n):
        c = self.c
        tok = sum(ch for ch, _ in chunks)
        fc = float(c.fc(tok + decode_n))
        t = float(sum(c.prefill_attention(ch, pre) for ch, pre in chunks)) + fc
        kv = float(c.pcie(c.kv_bytes(tok))) if self.mode.kv_home == "host" and self.mode.comm else 0.0
        return t + (max(0.0, kv - fc) if self.mode.overlap else kv)

    def _finish_chunks(self, picked):
        for size, pre, w in picked:
            w[3] += size
            self.kv_written += size
            if w[3] < w[1]:
                self.waiting.appendleft(w)      # the chunked request goes back to the head of the queue
            else:
                self._start_decode(w)

    def _writes(self, picked):
        out = np.zeros(self.R)
        for size, _, w in picked:
            out[w[4] % self.R] += size
        return out

    def step_interleaved(self):
        sides = self._split()
        d0, d1 = (np.array(s, int) for s in sides)
        pim0, pim1 = self._budget(d0), self._budget(d1)
        p1, chunked = self._prefill_pick(pim0, len(d1), True)
        p0, _ = self._prefill_pick(pim1, len(d0), not chunked)
        if not p0 and not p1:
            return self._decode_stretch_interleaved(d0, d1)
        pim0 = float(self._attention(d0, 1, self._writes(p1))[0])
        pim1 = float(self._attention(d1, 1, self._writes(p0))[0])
        g1, kv1 = self._gpu([(s, p) for s, p, _ in p1], len(d1))
        g0, kv0 = self._gpu([(s, p) for s, p, _ in p0], len(d0))
        self.prof.record("decode_mha", self._pim_features(d0, p1), pim0)
        self.prof.record("decode_mha", self._pim_features(d1, p0), pim1)
        layer = max(g1, pim0) + max(g0, pim1)
        self._spend(np.array([layer]), g0 + g1, pim0 + pim1, kv0 + kv1 + float(self.c.decode_vectors(len(self.ctx))),
                    "interleaved", len(self.ctx))
        self.pcie_bytes += self.layers * float(self._pcie_bytes(len(self.ctx), p0 + p1))
        self._advance(1)
        self._finish_chunks(p1 + p0)

    def _split(self):
        if not len(self.ctx):
            return [], []
        if self.how == "per_rankset" and self.R > 1:
            return split_by_class(list(self.ctx), list(self.cls % self.R))
        return split(list(self.ctx))

    def _pim_features(self, members, other_prefill):
        return (float(self.ctx[members].sum()) if len(members) else 0.0, len(members),
                float(sum(s for s, *_ in other_prefill)))

    def _pcie_bytes(self, decode_n, picked):
        s = self.c.shape
        if not self.mode.comm:
            return 0.0
        vec = decode_n * (2 * s.hidden + s.kv_token_bytes // s.dtype_bytes) * s.dtype_bytes
        kv = float(self.c.kv_bytes(sum(x for x, *_ in picked))) if self.mode.kv_home == "host" else 0.0
        return vec + kv

    def _steps_until_event(self):
        return max(1, int(self.left.min())) if len(self.left) else 0

    def _decode_stretch_interleaved(self, d0, d1):
        k = self._steps_until_event()
        if k == 0:
            return False
        none = np.zeros(self.R)
        a0, a1 = self._attention(d0, k, none), self._attention(d1, k, none)
        g1, _ = self._gpu([], len(d1)); g0, _ = self._gpu([], len(d0))
        per = np.maximum(g1, a0) + np.maximum(g0, a1)
        gpu, att = k * (g0 + g1), float(a0.sum() + a1.sum())
        # With no prefill to hide, two sub-batches read the weights twice per iteration; one batch, GPU
        # then PIM, is faster when the PIM part is short (ours: the scheduler keeps the faster).
        everyone = np.arange(len(self.ctx))
        a, (g, _) = self._attention(everyone, k, none, record=False), self._gpu([], len(self.ctx))
        if (g + a).sum() < per.sum():
            per, gpu, att = g + a, k * g, float(a.sum())
        self.prof.record("decode_mha", self._pim_features(d0, []), float(a0[0]))
        self._spend(per, gpu, att, k * float(self.c.decode_vectors(len(self.ctx))),
                    f"decode x{k}", len(self.ctx) * k)
        self.pcie_bytes += self.layers * k * self._pcie_bytes(len(self.ctx), [])
        self._advance(k)
        return True

    def step_prefill_first(self):
        picked = []
        while self.waiting and self._admit(self.waiting[0]):
            w = self.waiting.popleft()
            picked.append((w[1] - w[3], w[3], w))
        if picked:
            chunks = [(s, p) for s, p, _ in picked]
            g, kv = self._gpu(chunks, 0)
            att = 0.0
            if self.mode.attention == "dimm_bank":   # the prompt's KV is written with the rest of the memory idle
                att = float(self.c.write_block(self._writes(picked)).sum())
            self._spend(np.array([g + att]), g, att, kv, "prefill", len(picked))
            self.pcie_bytes += self.layers * float(self._pcie_bytes(0, picked))
            self._finish_chunks(picked)
            return True
        k = self._steps_until_event()
        if k == 0:
            return False
        everyone = np.arange(len(self.ctx))
        if self.mode.decode_sub_batches:
            d0, d1 = (np.array(s, int) for s in self._split())
            a0, a1 = self._attention(d0, k, np.zeros(self.R)), self._attention(d1, k, np.zeros(self.R))
            g1, _ = self._gpu([], len(d1)); g0, _ = self._gpu([], len(d0))
            per, att, gpu = np.maximum(g1, a0) + np.maximum(g0, a1), float(a0.sum() + a1.sum()), k * (g0 + g1)
        else:
            a = self._attention(everyone, k, np.zeros(self.R))
            g, _ = self._gpu([], len(self.ctx))
            per, att, gpu = g + a, float(a.sum()), k * g
        vec = k * float(self.c.decode_vectors(len(self.ctx))) if self.mode.comm else 0.0
        self._spend(per, gpu, att, vec, f"decode x{k}", len(self.ctx) * k)
        self.pcie_bytes += self.layers * k * self._pcie_bytes(len(self.ctx), [])
        self._advance(k)
        return True

    def run(self):
        step = self.step_interleaved if self.mode.interleave else self.step_prefill_first
        while self.prefilled and self.waiting and self._admit(self.waiting[0]):
            self._start_decode(self.waiting.popleft())       # its prompt's KV is there already
        while self.waiting or len(self.ctx):
            if step() is False:
                break
        if self.waiting:
            raise RuntimeError(f"{self.name}: {len(self.waiting)} requests could never be admitted")


def run(system: System, timeline: bool = False, **_) -> RunResult:
    mode, costs, dp, multiple, how, requests = setup(system)
    profiles = Profiles(seed=system.workload.seed)
    replicas = [Replica(f"replica{r}", system, mode, costs, requests[r::dp], multiple, how, profiles, timeline)
                for r in range(dp)]
    for rep in replicas:
        rep.run()
    out = report(system, mode, costs, requests, replicas, profiles)
    return RunResult(out | memory_work(system, mode, costs, replicas),
                      [i for rep in replicas for i in (rep.intervals or [])])


def memory_work(system, mode, costs, replicas) -> dict:
    """What the run did to its memories, for its energy (interpreter/run_energy.py): the KV bytes the
    host memory's bank PUs read, with its attention programs' command sample (their energy per byte:
    the all-bank commands the bank PUs stream in lockstep), or its rank PUs read (streamed row by
    row over the rank bus); the KV the GPUs write into it and the host CPU reads from it; and the
    HBM-PIM programs' command sample (their power while busy)."""
    mem = next(x for x in system.memories if x.pim is not None)
    kv = costs.shape.kv_token_bytes * system.model.layers
    read, written = (sum(getattr(r, k) for r in replicas) * kv for k in ("kv_read", "kv_written"))
    host = mode.kv_home == "host"
    out = {"dram_traffic_bytes": {mem.name: {"read": read if mode.attention == "cpu" else 0.0,
                                             "write": written if host else 0.0}}}
    if mode.attention in ("dimm_bank", "rank_pu"):
        out |= {"pim_traffic_bytes": {mem.name: read}, "utilization_of": {mode.attention: mem.name}}
    if mode.attention == "dimm_bank":
        sample = ap.command_sample(mem, costs.shape.head_dim, dtype_bytes=costs.shape.dtype_bytes)
        out["pim_command_samples"] = {mem.name: sample}
    elif mode.attention == "hbm_pim":
        hbm = _hbm_pim_memory(system)
        sample = ap.command_sample(hbm, costs.shape.head_dim, dc.HBM_PIM_PARAMS, dc.HBM_PIM_HEADS,
                                   costs.shape.dtype_bytes)
        out |= {"pim_command_samples": {hbm.name: sample}, "utilization_of": {"hbm_pim": hbm.name}}
    return out


def report(system, mode, costs, requests, replicas, profiles) -> dict:
    end = max(r.clock for r in replicas) or 1e-30
    by_id = {r.id: r for r in requests}
    first = {k: v for rep in replicas for k, v in rep.first_token.items()}
    finish = {k: v for rep in replicas for k, v in rep.finish.items()}
    served = [by_id[i] for i in finish]
    out_tokens = sum(r.output_len for r in served)
    tbt = [(finish[r.id] - first[r.id]) / (r.output_len - 1) for r in served if r.output_len > 1]
    hw, shape = costs.hw, costs.shape
    oom = sum(len(rep.oom) for rep in replicas)
    kv_peak = max(rep.cap_tokens for rep in replicas) * shape.kv_token_bytes * system.model.layers
    busy = {k: sum(rep.busy[k] for rep in replicas) / (len(replicas) * end) for k in ("gpu", "attention", "pcie")}
    return {
        "system": system.name, "model": system.model.name, "strategy": system.mapping.strategy,
        "loop": "sub_batch_serving", "requests": len(requests), "served": len(served),
        "oom_requests": oom, "output_tokens": out_tokens,
        # every request arrives at 0 s: its first token's and its last token's time are its latencies
        **request_latencies([first[r.id] for r in served], tbt, [finish[r.id] for r in served]),
        "tokens_per_s": out_tokens / end,
        "makespan_s": end,
        "batch_max": max(rep.max_batch for rep in replicas),
        "batch_mean": sum(rep.batch_time for rep in replicas) / (len(replicas) * end),
        "memory_bytes": {"weights": system.model.weight_bytes * len(replicas), "kv_cache_capacity": kv_peak * len(replicas),
                         "total": system.model.weight_bytes * len(replicas) + kv_peak * len(replicas)},
        "utilization": ({"gpu": busy["gpu"] + busy["attention"]} if mode.attention == "gpu" else
                        {"gpu": busy["gpu"], mode.attention: busy["attention"]}) | {"pcie": busy["pcie"]},
        "breakdown_s": {"gpu_busy": busy["gpu"] * end, "attention_busy": busy["attention"] * end,
                        "pcie_busy": busy["pcie"] * end},
        "pcie_bytes": sum(rep.pcie_bytes for rep in replicas),
        "attention_bandwidth_bytes_per_s": {"dimm_bank": hw.rankset_bw * hw.ranksets, "rank_pu": hw.rank_pu_bw,
                                            "gpu": hw.hbm_bw * hw.tp, "cpu": hw.cpu_bw}[mode.attention]
                                           if mode.attention != "hbm_pim" else costs.hbm_pim_bandwidth(),
        "ranksets": hw.ranksets, "tp": hw.tp, "dp": len(replicas),
        "rankset_imbalance": (sum(r.imbalance[0] for r in replicas) / sum(r.imbalance[1] for r in replicas)
                              if sum(r.imbalance[1] for r in replicas) else None),
        "predictor_errors": profiles.errors(),
    }


def estimate(system: System):
    """Work of a run, in scheduling decisions: a few per request, one per prefill chunk and one per
    generated token (each decode iteration advances every running request by one)."""
    from ...budget import Estimate
    wl = system.workload
    mean_in = wl.mean_input_len or wl.input_len
    mean_out = wl.mean_output_len or wl.output_len
    multiple = system.mapping.params.get("chunk_multiple", 16)
    work = wl.requests * (4 + mean_in / (multiple if isinstance(multiple, (int, float)) and multiple > 0 else 16)
                          + mean_out)
    return Estimate(work, wl.requests * 512, f"{wl.requests} request(s) of about {mean_in:.0f} prompt and "
                    f"{mean_out:.0f} output tokens", largest="workload.requests")


def decode_iteration_s(system: System, contexts) -> float:
    """Seconds of one decode-only iteration of one replica whose running requests have `contexts`
    tokens, spread round robin over the rankset classes (Fig. 11's time between tokens)."""
    mode, costs, _, multiple, how, _ = setup(system)
    rep = Replica("probe", system, mode, costs, [], multiple, how, Profiles(), False)
    n = len(contexts)
    rep.ctx, rep.left = np.array(contexts, int), np.ones(n, int)
    rep.cls, rep.ids, rep.reserved = np.arange(n) % rep.R, np.arange(n), np.zeros(n, int)
    (rep.step_interleaved if mode.interleave else rep.step_prefill_first)()
    return rep.clock
