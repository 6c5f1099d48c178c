"""What a PIM program computes (`result { ... }`, LANGUAGE.md) and `pimc check --values` on every
bundled program: the attention programs of NeuPIMs, L3 and Hermes checked against numpy like the GEMVs,
a broken attention effect found at its program with the element and both values, the result's own
mistakes located; and AiM's activation function (effect `activation`) against values worked by hand.
"""
from __future__ import annotations

import numpy as np
import pytest

from pimdsl.cli.check_values import parse_shape
from pimdsl.cli.main import main
from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.values.banks import NUMPY_DTYPES
from pimdsl.interpreter.values.programs import execute
from pimdsl.loops.model_layers.numpy_forward import ACTIVATIONS

from .conftest import ROOT

NEUPIMS = ROOT / "specs" / "pim" / "neupims_pim.pim"


def test_every_attention_program_is_checked(capsys):
    """The six attention programs (two per unit) equal numpy at the small shapes and a given one."""
    files = [str(ROOT / "specs" / "hardware" / f) for f in ("neupims.pim", "rtx4090_ndp.pim", "dgx_a100_pim.pim")]
    assert main(["check", "--values", "--strict", "--shape", "kv=70,heads=2,head_dim=128", *files]) == 0
    out = capsys.readouterr().out
    assert "not checked" not in out
    for unit, memory in (("neupims_pim", "neupims_hbm"), ("hermes_ndp_core", "hermes_ndp_dimm"),
                         ("l3_bank_pu", "l3_host_mem")):
        for op in ("attn_score", "attn_context"):
            assert (f"program {op} of unit '{unit}' (memory {memory}): values equal numpy at kv=1,heads=1,head_dim=64, "
                    "kv=37,heads=3,head_dim=64, kv=600,heads=2,head_dim=128, kv=70,heads=2,head_dim=128") in out
    # Hermes' NDP_SOFTMAX changes no state the executor models: its result is the scores, and it says so
    assert "(memory hermes_ndp_dimm): values equal numpy at kv=1,heads=1,head_dim=64, kv=37,heads=3,head_dim=64, " \
           "kv=600,heads=2,head_dim=128, kv=70,heads=2,head_dim=128; it covers softmax by a command that changes no " \
           "state the values executor models: its result is the values before that" in out
    assert out.count("changes no state") == 1


def _broken_neupims(tmp_path, old, new):
    unit = NEUPIMS.read_text()
    assert unit.count(old) == 1
    (tmp_path / "neupims_pim.pim").write_text(unit.replace(old, new))
    system = (ROOT / "specs" / "hardware" / "neupims.pim").read_text()
    path = tmp_path / "neupims.pim"
    path.write_text(system.replace('import "../pim/neupims_pim.pim";', 'import "neupims_pim.pim";')
                    .replace('import "../', f'import "{ROOT}/specs/')
                    .replace('import "gpus.pim";', f'import "{ROOT}/specs/hardware/gpus.pim";'))
    assert 'import "neupims_pim.pim";' in path.read_text()
    return unit, path


def test_a_broken_score_effect_is_a_located_mismatch(tmp_path, capsys):
    """Every head of a row dotted with the first head's query words: the score of a second head is wrong."""
    unit, path = _broken_neupims(tmp_path, "src = j * steps, k = steps,", "src = 0, k = steps,")
    assert main(["check", "--values", str(path)]) == 1
    err = capsys.readouterr().err
    line = next(i for i, l in enumerate(unit.splitlines(), 1) if l.strip().startswith("program attn_score"))
    assert (f"neupims_pim.pim:{line}:3: error: program attn_score of unit 'neupims_pim' (memory neupims_hbm) at "
            "kv=37,heads=3,head_dim=64 (seed 0): element (h=") in err
    assert ", output " in err and " by the program, numpy gives " in err and "(tolerance " in err
    assert "attn_context" not in err


def test_a_broken_context_output_is_a_located_mismatch(tmp_path, capsys):
    unit, path = _broken_neupims(tmp_path, "output = (h * dim_tiles + d) * units, stride = 1",
                                 "output = (h * dim_tiles + d) * units + 1, stride = 1")
    assert main(["check", "--values", str(path)]) == 1
    err = capsys.readouterr().err
    assert "program attn_context of unit 'neupims_pim' (memory neupims_hbm) at kv=1,heads=1,head_dim=64 (seed 0): " \
           "element (h=0, d=" in err


def test_a_program_without_a_result_is_not_checked_and_strict_says_so(tmp_path, capsys):
    unit, path = _broken_neupims(tmp_path, "    result {\n      let vectors = 1;\n      indices = [h, d];",
                                 "    resultless {\n      let vectors = 1;\n      indices = [h, d];")
    text = (tmp_path / "neupims_pim.pim").read_text()
    start = text.index("    resultless {")
    (tmp_path / "neupims_pim.pim").write_text(text[:start] + text[text.index("    }\n", start) + 6:])
    assert main(["check", "--values", "--strict", str(path)]) == 1
    captured = capsys.readouterr()
    assert "program attn_context of unit 'neupims_pim' (memory neupims_hbm) declares no result: --values cannot " \
           "check it" in captured.err
    assert "attn_context of unit 'neupims_pim' (memory neupims_hbm): not checked (no result)" in captured.out


def test_result_mistakes_are_located(errors):
    found = "\n".join(errors("""
pim_unit u {
  placement = bank; simd_width = 256 bit; dtype = fp16; global_buffer = 64 B;
  register_file acc { count = 1; width = 256 bit; }
  register_file buf { count = 4; width = 256 bit; placement = rank; }
  program gemv {
    let flag = 0;
    rows = 1;
    layout weight { indices = [o, i]; row = 0; column = 0; lane = 0; }
    result { let nope = 1; indices = [o]; dims = [n]; output = o; value = weight(o, i) * bias(i); }
  }
  program attn_score {
    rows = 1;
    layout key { indices = [t, h, d]; dims = [kv, heads, head_dim]; row = 0; column = 0; lane = 0; }
    result { indices = [h, t]; dims = [heads]; output = buf(h); value = key(t, h, d); }
  }
  program attn_context {
    rows = 1;
    layout value { indices = [t, h, d]; row = 0; column = 0; lane = 0; }
    result { indices = [h, d]; dims = [heads, head_dim]; output = h; value = softmax(z, value(t, h, d) * input(t)); }
  }
}
"""))
    assert "'nope' is not a parameter of program gemv" in found and "hint: did you mean 'flag'" not in found
    assert "a result's value is a product of operands" in found and "here weight, input, buf" in found
    assert "`dims` gives one extent per index (2)" in found
    assert "softmax takes an index of the result and a product" in found


def test_a_summed_index_needs_an_extent(errors):
    found = "\n".join(errors("""
pim_unit u {
  placement = bank; simd_width = 256 bit; dtype = fp16;
  program gemv {
    rows = 1;
    layout weight { indices = [o, i]; row = 0; column = 0; lane = 0; }
    result { indices = [o]; dims = [n]; output = o; value = weight(o, i) * input(i); }
  }
}
"""))
    assert "the result sums over 'i', but no operand gives its extent" in found
    assert "use i as an index of a laid-out tensor whose layout gives `dims`" in found


def test_shapes_name_every_dimension_of_an_op_class():
    assert parse_shape("kv=5,heads=2,head_dim=64") == {"kv": 5, "heads": 2, "head_dim": 64}
    assert parse_shape("n=3,k=4") == {"n": 3, "k": 4}
    with pytest.raises(ValueError, match="names every dimension of an op class"):
        parse_shape("kv=5,heads=2")
    with pytest.raises(ValueError, match="NAME=N pairs"):
        parse_shape("kv=5,x=2")


# ---- AiM's activation function, by hand ------------------------------
@pytest.fixture(scope="module")
def card():
    spec, diags = load_spec(str(ROOT / "specs" / "hardware" / "aimx_card.pim"))
    assert not diags.errors
    return spec.memories["aimx_card"]


def test_the_covered_activation_is_applied_by_af_abk(card):
    """y = silu(1 x 0.5 + 2 x 1) = silu(2.5) = 2.5 / (1 + e^-2.5) = 2.30933, rounded to bf16 (steps of
    2^-6 between 2 and 4): 2.3125; silu(-2.5) = -0.18968: -0.189453 (steps of 2^-10); relu(-2.5) = 0. The MAC register is cleared by AF_ABK: the second
    output's sum starts from 0."""
    dt = NUMPY_DTYPES["bf16"]
    program, shape = card.pim.program("gemv"), {"n": 2, "k": 2, "m": 1}
    w = np.array([[1, 2], [-1, -2]], dt)
    x = np.array([0.5, 1], dt)
    silu = execute(card, program, shape, {"weight": w}, 2, x, params={"activation": 1}, activation=ACTIVATIONS["silu"]).y
    assert silu.tolist() == [2.3125, -0.189453125]          # silu(-2.5) = -2.5 / (1 + e^2.5) = -0.18968
    relu = execute(card, program, shape, {"weight": w}, 2, x, params={"activation": 1}, activation=ACTIVATIONS["relu"]).y
    assert relu.tolist() == [2.5, 0.0]
    plain = execute(card, program, shape, {"weight": w}, 2, x).y
    assert plain.tolist() == [2.5, -2.5]


def test_an_activation_without_a_function_is_an_error(card):
    from pimdsl.ir.pim_program import ProgramError
    with pytest.raises(ProgramError, match="AF_ABK applies the activation function, but the values run was given none"):
        execute(card, card.pim.program("gemv"), {"n": 1, "k": 1, "m": 1}, {"weight": np.ones((1, 1))}, 1,
                np.ones(1), params={"activation": 1})
