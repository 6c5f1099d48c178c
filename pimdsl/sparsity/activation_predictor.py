"""The lightweight activation predictor of [HERMES_NDP] Sec. IV-C-1 (Fig. 7).

Token-wise part: a `bits`-bit state per neuron (0..15), initialised after prefill from the neuron's
prefill activation frequency in 16 stages (> 90% -> 15, < 2% -> 0; the stages between are equal
steps, our reading), then per token -1 when the neuron did not fire and +`step` (s = 4) when it did.
Layer-wise part: s2 = how many of the neuron's two most correlated neurons of the previous block
fired for this token (the neuron correlation table). A neuron is predicted active iff
s1 + lambda * s2 > T (lambda = 6, T = 15).

Modes (the ablations of [HERMES_NDP] Sec. V-C): `combined` is the rule above; `token` uses the
state alone, s1 > T_h (s1 <= 15 = T can never pass the combined rule alone, so the hot threshold is
our reading of a token-only rule); `layer` keeps the prefill states frozen (no token updates) and
keeps the combined rule. A neuron's *hotness* for online adjustment (Sec. IV-C-2) is its state s1.
"""
from __future__ import annotations

import numpy as np
from ..aot import bind
from ..jit_cache import njit

MODES = ("combined", "token", "layer")


def initial_state(frequency: np.ndarray, bits: int = 4) -> np.ndarray:
    top = 2 ** bits - 1
    inner = 1 + np.floor((frequency - 0.02) / ((0.90 - 0.02) / (top - 1))).astype(int)
    state = np.clip(inner, 1, top - 1)
    state[frequency < 0.02] = 0
    state[frequency > 0.90] = top
    return state.astype(np.uint8)


def state_table_bytes(layers: int, neurons_per_layer: float, bits: int = 4) -> float:
    """Bytes of the neuron state table ([HERMES_NDP] Sec. IV-C-1: 232 KB for LLaMA-7B)."""
    return layers * neurons_per_layer * bits / 8


class Predictor:
    def __init__(self, prefill_frequency: list[np.ndarray], parents: list, lam: float = 6, threshold: float = 15,
                 hot_threshold: float = 10, step: int = 4, bits: int = 4, mode: str = "combined"):
        if mode not in MODES:
            raise ValueError(f"predictor mode '{mode}' is not one of {', '.join(MODES)}")
        # every block's states in one array (`table`), `states[k]` block k's view of it
        self.table = initial_state(np.concatenate(prefill_frequency), bits)
        self.states = np.split(self.table, np.cumsum([len(f) for f in prefill_frequency])[:-1])
        self.parents, self.lam, self.threshold = parents, lam, threshold
        self.hot_threshold, self.step, self.top, self.mode = hot_threshold, step, 2 ** bits - 1, mode
        # the mode's rule over every (state, s2) and its FSM over every state, as tables (numpy semantics
        # kept): the token-only rule ignores s2, the layer-only mode's FSM keeps every state
        s1 = np.arange(self.top + 1, dtype=np.int16)
        if mode == "token":
            self.rule = np.repeat((s1 > hot_threshold)[:, None], 3, axis=1)
        else:
            self.rule = s1[:, None] + lam * np.arange(3, dtype=np.uint8)[None, :] > threshold
        frozen = mode == "layer"
        self.fired = s1.astype(np.uint8) if frozen else np.clip(s1 + step, 0, self.top).astype(np.uint8)
        self.idle = s1.astype(np.uint8) if frozen else np.clip(s1 - 1, 0, self.top).astype(np.uint8)

    def s2(self, k: int, previous: np.ndarray | None) -> np.ndarray:
        p = self.parents[k]
        if p is None or previous is None:
            return np.zeros(len(self.states[k]), dtype=np.int8)
        bits = previous.view(np.uint8)
        return bits[p[0]] + bits[p[1]]

    def predict(self, k: int, previous: np.ndarray | None) -> np.ndarray:
        """Neurons of block k predicted to fire, given the previous block's actual activations."""
        return self.rule[self.states[k], self.s2(k, previous)]

    def update(self, k: int, actual: np.ndarray) -> None:
        """The FSM after the token: +step where the neuron fired, -1 where it did not."""
        s = self.states[k]
        s[...] = np.where(actual, self.fired[s], self.idle[s])

    def predict_then_update(self, k: int, previous: np.ndarray | None, actual: np.ndarray) -> np.ndarray:
        """`predict(k, previous)`, then `update(k, actual)`, in one pass over the block."""
        out = np.empty(len(actual), np.bool_)
        _predict_update(self.states[k], self.s2(k, previous).astype(np.uint8), actual, self.rule, self.fired, self.idle,
                        out, np.zeros(len(actual), np.bool_), np.zeros((2, 256), np.int64))
        return out

    def hot(self, k: int) -> np.ndarray:
        return self.states[k] > self.hot_threshold


@njit(cache=True)
def _predict_update(states, s2, actual, rule, fired, idle, out, group, counts):
    """`out` = the rule over (state, s2), then each state's FSM step; `counts` = the new states' histogram
    per group (`group`, a bool per neuron: the online adjustment's on-GPU neurons and the others), in two
    interleaved tables so that runs of one state do not wait on one counter."""
    g8 = group.view(np.uint8)
    h = np.zeros((2, 2, counts.shape[1]), np.int64)
    n = len(states)
    for i in range(n):
        s = states[i]
        out[i] = rule[s, s2[i]]
        t = fired[s] if actual[i] else idle[s]
        states[i] = t
        h[i & 1, g8[i], t] += 1
    counts[:] = h[0] + h[1]


bind(globals(), __file__)          # the kernels called from Python, from their ahead-of-time build (aot.py)
