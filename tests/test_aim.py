"""GDDR6-AiM in the bundled library (specs/pim/aim.pim, specs/hardware/aimx_card.pim,
specs/systems/aim_llama2_7b.pim): values through the declared GEMV program equal numpy in the
unit's stated order, cycles equal counts worked by hand from the rules, the decode step's AiM time
equals the sum of those counts plus refresh, and the covered activation is absorbed.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from pimdsl.cli.main import main
from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.dram.command_stream import CommandTimer
from pimdsl.interpreter.dram.stream_timer import StreamTimer
from pimdsl.interpreter.values.banks import NUMPY_DTYPES
from pimdsl.interpreter.values.programs import ProgramExecutor, adder_tree_dot, run
from pimdsl.lowering.pim_program import expand

from .conftest import ROOT

SYSTEM = ROOT / "specs" / "systems" / "aim_llama2_7b.pim"
CK = 2e9                                     # GDDR6-16 Gb/s command clock (specs/dram/gddr6.pim)


@pytest.fixture(scope="module")
def card():
    spec, diags = load_spec(str(ROOT / "specs" / "hardware" / "aimx_card.pim"))
    assert not diags.errors
    return spec.memories["aimx_card"]


def cycles(memory, n, k, refresh="none", **params):
    timer = StreamTimer(CommandTimer(memory, memory.pim.commands, memory.pim.rules, memory.pim.windows, refresh=refresh))
    return timer.run(expand(memory, memory.pim.program("gemv"), {"n": n, "k": k, "m": 1}, params=params or None))


def hand_gemv(n: int, k: int) -> int:
    """One channel's GEMV, worked by hand from aim.pim's rules (CK cycles, no refresh).

    Per channel ceil(n / 32) outputs, P = ceil(that / 16) per bank; input tiles of 1024 (a 2 KB
    buffer, W = 64 words; the last tile its remainder). A tile from its first WR_GB at t0: W fills
    tWRGB = 2 apart, ACT_ABK on the next cycle (t0 + 2W - 1), the first MAC_ABK tRCDMAC = 36 later,
    W MACs tMAC = 2 apart, PRE_ABK tRTPAB = 12 after the last, RD_MAC on the next cycle, the next
    row's ACT tRPAB = 32 after the PRE: a row every 2W + 78 cycles. After the tile's last RD_MAC the
    next tile's fills start on the next cycle: 4W + 47 + (P - 1)(2W + 78) per tile; the stream ends
    one cycle after the last RD_MAC."""
    per_bank = -(-(-(-n // 32)) // 16)
    words = [min(64, -(-(k - c * 1024) // 16)) for c in range(-(-k // 1024))]
    return sum(4 * w + 47 + (per_bank - 1) * (2 * w + 78) for w in words)


def hand_gemv_activation(n: int, k: int) -> int:
    """The same with the activation covered (`activation = 1`): per output row j of the banks, each
    tile fills the buffer (2W), ACT_ABK, MACs, PRE_ABK and the next tile's fills start on the next
    cycle (4W + 46 per tile); after the last tile AF_ABK on the next cycle, RD_AF tAF = 2 later, the
    next row's fills one cycle after it."""
    per_bank = -(-(-(-n // 32)) // 16)
    words = [min(64, -(-(k - c * 1024) // 16)) for c in range(-(-k // 1024))]
    return per_bank * (sum(4 * w + 46 for w in words) + 3)


@pytest.mark.parametrize("n,k", [(4096, 4096), (11008, 4096), (4096, 11008), (32000, 4096), (100, 300)])
def test_gemv_cycles_equal_the_hand_count(card, n, k):
    assert cycles(card, n, k) == hand_gemv(n, k)
    assert cycles(card, n, k, activation=1) == hand_gemv_activation(n, k)


def test_a_4096_square_gemv_takes_3_5_us(card):
    # 6980 cycles = 3.49 us by hand; with blocking refresh one REF falls inside (3.52 us)
    assert hand_gemv(4096, 4096) == 6980
    with_refresh = cycles(card, 4096, 4096, refresh="blocking") / CK
    assert 3.49e-6 < with_refresh < 3.53e-6 * 1.01


def test_decode_step_aim_time_is_the_sum_of_hand_counts_plus_refresh(capsys):
    """Llama-2-7B, batch 1: per layer Q, K, V, O (4096 x 4096), the gate (11008 x 4096, activation
    covered), up (11008 x 4096) and down (4096 x 11008) projections; then the LM head (32000 x 4096):
    2,995,820 cycles = 1.50 ms by hand without refresh. Refresh adds at most one tRFC plus a row
    cycle per tREFI (3906 CK): under 11%."""
    by_hand = 32 * (4 * hand_gemv(4096, 4096) + hand_gemv_activation(11008, 4096) + hand_gemv(11008, 4096)
                    + hand_gemv(4096, 11008)) + hand_gemv(32000, 4096)
    assert by_hand == 2_995_820
    assert main(["run", str(SYSTEM), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    pim = report["pim"]
    assert pim["phase"] == "decode" and pim["ops"] == 32 * 7 + 1
    assert by_hand <= pim["cycles"] <= by_hand * 1.11
    assert pim["refreshes"] > 0
    # the activation after each gate projection is done by the AiM (covered), not by the host
    assert pim["command_counts"]["activation.AF_ABK"] == 32 * 22


def reference(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """y in the program's order: per output and 1024-input tile, the bank's MAC register accumulates
    each 16-input burst's adder-tree sum in BF16 (sum rounded, then the accumulation rounded);
    RD_MAC hands each tile's partial to the host, which adds the tiles in float32 in order."""
    dt = NUMPY_DTYPES["bf16"]
    n, k = w.shape
    y = np.zeros(n, np.float32)
    for c in range(0, k, 1024):
        acc = np.zeros(n, dt)
        for s in range(c, min(k, c + 1024), 16):
            burst = np.zeros((n, 16), dt)
            burst[:, :min(16, k - s)] = w[:, s:s + 16]
            xs = np.zeros(16, dt)
            xs[:min(16, k - s)] = x[s:s + 16]
            tree = adder_tree_dot(burst, xs, 16).astype(dt)
            acc = (acc.astype(np.float32) + tree.astype(np.float32)).astype(dt)
        y = (y + acc.astype(np.float32)).astype(np.float32)
    return y


@pytest.mark.parametrize("n,k,seed", [(64, 100, 0), (700, 2100, 1), (1, 1, 2)])
def test_values_through_mac_abk_equal_numpy_in_the_stated_order(card, n, k, seed):
    rng = np.random.default_rng(seed)
    dt = NUMPY_DTYPES["bf16"]
    w = rng.uniform(-1, 1, (n, k)).astype(dt)
    x = rng.uniform(-1, 1, k).astype(dt)
    y = run(card, card.pim.program("gemv"), {"n": n, "k": k, "m": 1}, {"weight": w}, n, x)
    assert np.array_equal(y, reference(w, x))


def test_mac_abk_bank_by_bank_equals_every_bank_at_once(card, monkeypatch):
    """The executor sums every bank's MAC_ABK at once where each bank has its own MAC register, bank
    by bank where banks share one: both give the stated order's values."""
    rng = np.random.default_rng(3)
    dt = NUMPY_DTYPES["bf16"]
    w, x = rng.uniform(-1, 1, (600, 200)).astype(dt), rng.uniform(-1, 1, 200).astype(dt)
    at_once = run(card, card.pim.program("gemv"), {"n": 600, "k": 200, "m": 1}, {"weight": w}, 600, x)
    monkeypatch.setattr(ProgramExecutor, "apart", staticmethod(lambda files: False))
    by_bank = run(card, card.pim.program("gemv"), {"n": 600, "k": 200, "m": 1}, {"weight": w}, 600, x)
    assert np.array_equal(at_once, by_bank) and np.array_equal(by_bank, reference(w, x))


def test_dot_acc_needs_a_register_to_accumulate_into(errors):
    found = errors("""
pim_unit u {
  placement = bank; simd_width = 256 bit; dtype = bf16; global_buffer = 64 B;
  register_file mac { count = 1; width = 16 bit; }
  command MAC { scope = all_banks; reads = [row, global_buffer]; writes = [host]; effect = dot_acc; }
}
""")
    assert any("command MAC has effect dot_acc, which needs a command that reads [row, <source>] and writes one "
               "register file" in e for e in found)


def test_gemv_may_cover_the_activation_and_says_what_it_may_cover(errors):
    found = errors("""
pim_unit u {
  placement = bank; simd_width = 256 bit; dtype = bf16; operations = [activation];
  program gemv { covers = [activation, softmax]; }
}
""")
    text = "\n".join(found)
    assert "program gemv cannot cover 'softmax'" in text
    assert "activation" in text.split("cannot cover 'softmax'")[1]      # the hint names what may follow
    assert "covers activation" not in text


def test_an_activation_left_on_the_host_is_not_covered(tmp_path, capsys):
    """The gemv program covers the activation only through its 0/1 parameter `activation`: with the
    activation on the host it runs without AF_ABK, and the host applies it once."""
    text = SYSTEM.read_text().replace("activation = pim; ", "")
    path = tmp_path / "aim.pim"
    path.write_text(text.replace('import "../', f'import "{ROOT}/specs/'))
    assert main(["check", "--strict", str(path)]) == 0
    capsys.readouterr()
    assert main(["run", str(path), "--json", "--set", "workload.output_len=2"]) == 0
    counts = json.loads(capsys.readouterr().out)["pim"]["command_counts"]
    assert "activation.AF_ABK" not in counts and counts["reduce.RD_MAC"] > 0


def test_check_values_passes_on_the_aim_program(capsys):
    assert main(["check", "--values", "--shape", "n=200,k=1500", str(SYSTEM)]) == 0
    out = capsys.readouterr().out
    assert "program gemv of unit 'aim' (memory aimx_card): values equal numpy at 1x1, 37x100, 130x1100, 200x1500" in out


def test_check_values_finds_a_broken_effect_and_locates_it(tmp_path, capsys):
    unit = (ROOT / "specs" / "pim" / "aim.pim").read_text()
    broken = "for w[words] { MAC_ABK(row = row, column = w, src = w, acc = 0); }"
    assert unit.count(broken) == 2
    unit = unit.replace(broken, broken.replace("src = w", "src = 0"), 1)     # every burst against word 0
    (tmp_path / "aim.pim").write_text(unit)
    (tmp_path / "card.pim").write_text(f'import "{ROOT}/specs/dram/gddr6.pim";\nimport "aim.pim";\n'
                                       "memory m { part = GDDR6; channels = 2; "
                                       "address_map = [row, bank, bank_group, column, channel]; pim = aim; }\n")
    assert main(["check", "--values", str(tmp_path / "card.pim")]) == 1
    err = capsys.readouterr().err
    line = next(i for i, l in enumerate(unit.splitlines(), 1) if l.strip().startswith("program gemv"))
    assert f"aim.pim:{line}:3: error: program gemv of unit 'aim' (memory m) at 37x100 (seed 0): element (o=" in err
    assert "), output " in err and "by the program, numpy gives" in err and "tolerance" in err


def test_check_values_rejects_a_bad_shape(capsys):
    assert main(["check", "--values", "--shape", "n=4", str(SYSTEM)]) == 2
    assert "--shape needs both n and k" in capsys.readouterr().err


@pytest.mark.slow
def test_check_values_passes_on_every_bundled_spec(capsys):
    assert main(["check", "--values", "--strict", str(ROOT / "specs")]) == 0


def test_an_activation_on_pim_after_a_host_gemv_says_why_it_is_not_covered(tmp_path, capsys):
    text = SYSTEM.read_text().replace("decode  { fc = pim;", "decode  { fc = aim_xeon;")
    path = tmp_path / "aim.pim"
    path.write_text(text.replace('import "../', f'import "{ROOT}/specs/'))
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "op L0.act (activation) is placed on PIM unit 'aim', which has no program for activation" in err
    assert "program gemv covers activation, but only right after an op of its class on this unit, and this " \
           "op follows L0.gate_proj (gemv on aim_xeon)" in err
