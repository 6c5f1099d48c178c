"""Activation sparsity as data and the mechanisms that exploit it on a GPU + NDP-DIMM system.

`activations` generates per-token neuron activations with stated statistics; `neuron_placement` is
the offline hot/cold and per-DIMM placement as an integer program; `activation_predictor` is the
4-bit state-machine predictor with its layer-correlation term; `window_remap` balances cold neurons
across DIMMs window by window. The run loop `pimdsl.loops.hot_cold_offload` composes them.
"""
