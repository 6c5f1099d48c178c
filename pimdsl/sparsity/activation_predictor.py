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
        self.states = [initial_state(f, bits) for f in prefill_frequency]
        self.parents, self.lam, self.threshold = parents, lam, threshold
        self.hot_threshold, self.step, self.top, self.mode = hot_threshold, step, 2 ** bits - 1, mode
        # the rule and the FSM as tables over every (state, s2) and every state (numpy semantics kept)
        s1 = np.arange(self.top + 1, dtype=np.int16)
        self._rule = s1[:, None] + lam * np.arange(3, dtype=np.uint8)[None, :] > threshold
        self._fired = np.clip(s1 + step, 0, self.top).astype(np.uint8)
        self._idle = np.clip(s1 - 1, 0, self.top).astype(np.uint8)

    def s2(self, k: int, previous: np.ndarray | None) -> np.ndarray:
        p = self.parents[k]
        if p is None or previous is None:
            return np.zeros(len(self.states[k]), dtype=np.int8)
        bits = previous.view(np.uint8)
        return bits[p[0]] + bits[p[1]]

    def predict(self, k: int, previous: np.ndarray | None) -> np.ndarray:
        """Neurons of block k predicted to fire, given the previous block's actual activations."""
        if self.mode == "token":
            return self.states[k].astype(np.int16) > self.hot_threshold
        return self._rule[self.states[k], self.s2(k, previous)]

    def update(self, k: int, actual: np.ndarray) -> None:
        """The FSM after the token: +step where the neuron fired, -1 where it did not."""
        if self.mode == "layer":
            return
        s = self.states[k]
        self.states[k] = np.where(actual, self._fired[s], self._idle[s])

    def predict_then_update(self, k: int, previous: np.ndarray | None, actual: np.ndarray) -> np.ndarray:
        """`predict(k, previous)`, then `update(k, actual)`, in one pass over the block."""
        p = self.parents[k]
        if self.mode != "combined" or p is None or previous is None:
            guess = self.predict(k, previous)
            self.update(k, actual)
            return guess
        return _predict_update(self.states[k], p[0], p[1], previous, actual, self._rule, self._fired, self._idle)

    def hot(self, k: int) -> np.ndarray:
        return self.states[k] > self.hot_threshold


@njit(cache=True)
def _predict_update(states, parent0, parent1, previous, actual, rule, fired, idle):
    out = np.empty(len(states), np.bool_)
    for i in range(len(states)):
        s = states[i]
        out[i] = rule[s, np.int64(previous[parent0[i]]) + np.int64(previous[parent1[i]])]
        states[i] = fired[s] if actual[i] else idle[s]
    return out


bind(globals(), __file__)          # the kernels called from Python, from their ahead-of-time build (aot.py)
