"""Swizzled memory copy (PIM-SHERPA Sec. 4.2): PIM-aware weights back to the host layout, bit for bit.

Weights placed PIM-aware with `place_weights` come back from `swizzled_copy` equal to the
original, for any shape (padded ones too); a prefill GEMM on the copy equals one on the original
exactly; a wrong mapping is caught; the copy's traffic is Sec. 3.3's three transactions.
"""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.values.banks import NUMPY_DTYPES
from pimdsl.interpreter.values.mode_protocol import channel_banks, place_weights
from pimdsl.interpreter.values.smc import pim_aware_address, pim_aware_bytes, smc_traffic_bytes, swizzled_copy
from pimdsl.lowering.mode_protocol_gemv import GemvLayout
from pimdsl.ir.addresses import decode_address

from .conftest import ROOT

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
MiB = 2**20


PHONE = str(ROOT / "specs" / "systems" / "pim_sherpa_llama3_2_1b.pim")


@pytest.fixture(scope="module")
def phone():
    spec, diags = load_spec(PHONE)
    assert spec is not None, diags.render_all()
    return spec.systems["pim_sherpa_llama3_2_1b"].memories[0]


@pytest.fixture(scope="module")
def memories(phone):
    """The phone, and the phone with twice the ranks (half the rows) so that ranks are told apart too."""
    org = phone.organization
    spec, diags = load_spec(PHONE, [f"{phone.part.name}.organization.ranks={2 * org.ranks}",
                                    f"{phone.part.name}.organization.rows={org.rows // 2}"])
    assert spec is not None, diags.render_all()
    return phone, spec.systems["pim_sherpa_llama3_2_1b"].memories[0]


def random_weights(phone, rng, out, in_dim):
    return rng.standard_normal((out, in_dim)).astype(NUMPY_DTYPES[phone.pim.dtype])


def placed(phone, w, first_row=0):
    layout = GemvLayout.of(phone, *w.shape, first_row=first_row)
    banks = channel_banks(phone)
    place_weights(phone, layout, banks, w)
    return layout, banks


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint16), b.view(np.uint16))


@SETTINGS
@given(out=st.integers(1, 300), in_dim=st.integers(1, 300), first_row=st.integers(0, 500),
       seed=st.integers(0, 2**16))
def test_round_trip_is_bit_exact(memories, out, in_dim, first_row, seed):
    for memory in memories:
        w = random_weights(memory, np.random.default_rng(seed), out, in_dim)
        layout, banks = placed(memory, w, first_row)
        back = swizzled_copy(memory, layout, banks)
        assert back.dtype == w.dtype
        assert same_bits(back, w)


@pytest.mark.parametrize("out, in_dim", [(512, 2048),      # Llama 3.2 1B K/V
                                         (2048, 2048),     # Q/O
                                         (320, 2048),      # 5 or 3 outputs per block of 8 output registers
                                         (130, 100)])      # neither blocks nor lanes divide
def test_round_trip_on_llama_and_padded_layers(phone, out, in_dim):
    w = random_weights(phone, np.random.default_rng(out), out, in_dim)
    layout, banks = placed(phone, w)
    assert same_bits(swizzled_copy(phone, layout, banks), w)


def test_copy_reads_where_figure_6_says(phone):
    """A 2048 x 8192 layer: output out_per_block + 1 is local output 1 (tile 0) of block 1, i.e.
    bank 1 of channel 0, rank 0; input 130 is input tile 1 (8 bursts x 16 = 128 inputs each),
    burst 0, lane 2. So the weight is in row first_row + 0 * n_in + 1, burst column 0 * 8 + 1."""
    layout = GemvLayout.of(phone, 2048, 8192, first_row=5)
    n = layout.out_per_block + 1
    banks = channel_banks(phone)
    banks[(0, 0)].row(1, 6)[1, 2] = 7
    w = swizzled_copy(phone, layout, banks)
    assert w[n, 130] == 7 and np.count_nonzero(w.astype(np.float32)) == 1
    address = int(pim_aware_address(phone, layout, n, 130))
    fields = decode_address(phone, address)
    assert {k: fields[k] for k in ("channel", "rank", "bank_group", "bank", "row", "column")} == \
        {"channel": 0, "rank": 0, "bank_group": 0, "bank": 1, "row": 6, "column": 1}
    assert address % phone.organization.access_bytes == 2 * 2          # lane 2, 2 B per BF16


@SETTINGS
@given(out=st.integers(1, 3000), in_dim=st.integers(1, 3000), first_row=st.integers(0, 1000),
       seed=st.integers(0, 2**16))
def test_pim_aware_address_decodes_to_the_layout_place(memories, out, in_dim, first_row, seed):
    rng = np.random.default_rng(seed)
    n, m = rng.integers(0, out, 64), rng.integers(0, in_dim, 64)
    for memory in memories:
        layout = GemvLayout.of(memory, out, in_dim, first_row=first_row)
        fields = decode_address(memory, pim_aware_address(memory, layout, n, m))
        block, row, col, _, _, _ = layout.weight_place(n, m)
        channel, rank, bank = layout.block_of(memory, block)
        assert np.array_equal(fields["channel"], channel) and np.array_equal(fields["rank"], rank)
        assert np.array_equal(fields["bank_group"] * memory.organization.banks_per_group + fields["bank"], bank)
        assert np.array_equal(fields["row"], row) and np.array_equal(fields["column"], col)


@pytest.mark.parametrize("m", [1, 7, 32])
def test_prefill_gemm_on_copied_weights_equals_gemm_on_originals(phone, m):
    rng = np.random.default_rng(m)
    w = random_weights(phone, rng, 512, 2048)
    x = random_weights(phone, rng, m, 2048)
    layout, banks = placed(phone, w)
    copied = swizzled_copy(phone, layout, banks)
    y_copy = x.astype(np.float32) @ copied.astype(np.float32).T
    y_orig = x.astype(np.float32) @ w.astype(np.float32).T
    assert np.array_equal(y_copy, y_orig)


def test_wrong_mapping_fails_the_round_trip(phone):
    w = random_weights(phone, np.random.default_rng(3), 512, 2048)
    layout, banks = placed(phone, w)
    assert same_bits(swizzled_copy(phone, layout, banks), w)
    a, b = banks[(0, 0)].rows, banks[(1, 0)].rows            # channel 0 and channel 1 swapped
    for key in list(a):
        a[key], b[key] = b[key], a[key]
    assert not same_bits(swizzled_copy(phone, layout, banks), w)


def test_a_full_ffn_layer_is_a_permutation_of_the_banks(phone):
    """2048 x 8192 fills its 128 row indices exactly, so the copy is a permutation of the banks.
    (Its speed is measured by benchmarks/smc_speed.py, not here.)"""
    rng = np.random.default_rng(0)
    layout = GemvLayout.of(phone, 2048, 8192)
    banks = channel_banks(phone)
    for b in banks.values():
        for bank in range(phone.organization.banks_per_rank):
            for row in range(layout.weight_rows):
                b.row(bank, row)[:] = rng.standard_normal((b.bursts, b.lanes))
    back = swizzled_copy(phone, layout, banks)
    held = np.concatenate([r.reshape(-1) for b in banks.values() for r in b.rows.values()])
    assert np.array_equal(np.sort(back.reshape(-1).view(np.uint16)), np.sort(held.view(np.uint16)))


def test_traffic_is_three_transactions(phone):
    # Llama 3.2 1B FF layer, 2048 x 8192 BF16: 32 MiB host-friendly; PIM-aware every block's rows are
    # full (a multiple of 8 outputs per block), so 32 MiB of weight rows too -> 32 + 2 x 32 = 96 MiB.
    layout = GemvLayout.of(phone, 2048, 8192)
    dest = 2048 * 8192 * 2
    assert dest == 32 * MiB and pim_aware_bytes(phone, layout) == 32 * MiB
    assert smc_traffic_bytes(pim_aware_bytes(phone, layout), dest) == 96 * MiB
    # 4 outputs per block (as K/V, 512 x 2048, on 128 blocks) fill half of the 8 output registers' bursts:
    # 16 row indices of 2 KiB in every block = twice the weights, read whole: 2 + 2 x 1 = 4 x the weights.
    blocks = GemvLayout.of(phone, 1, 1).blocks
    half = GemvLayout.of(phone, 4 * blocks, 2048)
    dest = 4 * blocks * 2048 * 2
    assert half.weight_rows == 16 and pim_aware_bytes(phone, half) == 16 * blocks * 2 * 1024 == 2 * dest
    assert smc_traffic_bytes(pim_aware_bytes(phone, half), dest) == 4 * dest
