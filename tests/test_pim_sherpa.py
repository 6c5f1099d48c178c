"""PIM-SHERPA on the phone (issue 5): weight strategies, memory attributes, SMC schedules, the host-only
baseline, Fig. 11 timelines, and decode GEMVs of the compiled model through the PIM commands."""
from __future__ import annotations

import math

import json

import numpy as np
import pytest

from pimdsl.cli.main import main
from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.values.banks import NUMPY_DTYPES, hbm_pim_gemv_reference
from pimdsl.loops.step.step_run import compile_step, run_system
from pimdsl.interpreter.values.programs import run_gemv
from pimdsl.passes.strategy import STRATEGIES

from .conftest import ROOT

PHONE = str(ROOT / "specs" / "systems" / "pim_sherpa_llama3_2_1b.pim")
PHONE_3B = str(ROOT / "specs" / "systems" / "pim_sherpa_llama3_2_3b.pim")
SMALL = ["llama3_2_1b.layers=2", "llama3_2_1b.vocab=4096", "workload.input_len=16", "workload.output_len=2"]
MiB = 2 ** 20


def system(*overrides, path=PHONE):
    spec, diags = load_spec(path, list(overrides))
    assert spec is not None, diags.render_all()
    return next(iter(spec.systems.values()))


def report(strategy, *overrides):
    return run_system(system(f"mapping.strategy={strategy}", *SMALL, *overrides)).report


@pytest.fixture(scope="module")
def reports():
    return {name: report(name) for name in STRATEGIES}


def test_memory_by_strategy(reports):
    """WD keeps both copies; FACIL-O and NC-GEMM the PIM-aware one; DDB adds two buffers of the largest
    layer (2048 x 8192 BF16 = 32 MiB, [PIM_SHERPA] Sec. 6), OWR one; C-GEMM the host-friendly copy only."""
    mem = {name: r["memory_bytes"] for name, r in reports.items()}
    host, pim = mem["wd"]["weights_by_region"]["host_weights"], mem["wd"]["weights_by_region"]["pim_weights"]
    assert mem["wd"]["weights"] == host + pim
    assert mem["c_gemm"]["weights_by_region"] == {"host_weights": host}
    for name in ("facil_o", "ddb", "owr", "nc_gemm"):
        assert mem[name]["weights_by_region"] == {"pim_weights": pim}
    assert (mem["ddb"]["buffers"], mem["owr"]["buffers"]) == (2 * 32 * MiB, 32 * MiB)
    assert all(mem[n]["buffers"] == 0 for n in ("wd", "facil_o", "c_gemm", "nc_gemm"))
    for m in mem.values():
        assert m["total"] == m["weights"] + m["buffers"] + m["kv_cache"] + m["activations"]
    # padding: K and V (512 outputs over 128 PIM blocks = half an output tile) are stored twice over
    spec_model = system().model
    assert pim - host == 2 * 2 * (2048 * 512 * 2) + (pim - host - 8 * MiB)   # K/V of two layers, + LM head
    assert 0 <= pim - host - 8 * MiB < spec_model.hidden * 2 * 128 * 16


def test_host_only_baseline_and_speedup(reports):
    base = reports["c_gemm"]
    assert base["tpot_pim_s"] is None and "pim" not in base
    assert base["tpot_no_pim_s"] == base["tpot_s"] and base["speedup_vs_no_pim"] == 1.0
    for name in ("wd", "facil_o", "ddb", "owr", "nc_gemm"):
        r = reports[name]
        assert r["tpot_pim_s"] == r["tpot_s"] and r["tpot_no_pim_s"] == base["tpot_s"]
        assert r["tpot_s"] < r["tpot_no_pim_s"] / 4          # decode GEMVs on 128 PIM blocks
        assert r["speedup_vs_no_pim"] == pytest.approx(base["end_to_end_s"] / r["end_to_end_s"])


def test_prefill_time_by_strategy(reports):
    """WD, FACIL-O and C-GEMM prefill alike (cacheable host-friendly reads); DDB hides part of the SMC
    under GEMM, OWR serialises it; NC-GEMM rereads every weight for each of the 16 tokens."""
    t = {name: r["ttft_s"] for name, r in reports.items()}
    assert t["wd"] == t["facil_o"] == t["c_gemm"]
    copy = reports["ddb"]["breakdown_s"]["prefill"]["cpu:s24_cpu.copy"]
    assert t["wd"] < t["ddb"] < t["wd"] + copy
    # OWR: the same copies at twice the threads, in series with the GEMMs on the compute threads
    owr = reports["owr"]["breakdown_s"]["prefill"]
    assert set(owr) == {"total", "cpu:s24_cpu"}
    # (and the embedding gather reads the non-cacheable copy uncached: tens of microseconds)
    assert t["owr"] == pytest.approx(t["wd"] + copy / 2, rel=1e-3)
    assert t["nc_gemm"] > 10 * t["wd"]


def test_smc_bytes_and_rates():
    """The SMC moves source + 2 x destination bytes ([PIM_SHERPA] Sec. 3.3) at peak x threads/8 / 2."""
    sys_ = system("mapping.strategy=owr", *SMALL)
    p = compile_step(sys_, "prefill", 1, 16, 0)
    g = p.graph
    copies = [n for n in p.order() if n.startswith("smc:")]
    weighted = [n for n, a in p.ops() if a.get("access") == "smc"]
    assert copies == [f"smc:{n}" for n in weighted]
    for n in weighted:
        op = g.nodes[n]["op"]
        dest = op.weight_elements * 2
        # PIMnast rows: per block (4 ch x 2 ranks x 16 banks = 128) ceil(n / 128) outputs in tiles of
        # 8 output registers, times input tiles of 8 registers x 16 lanes
        weight_rows = math.ceil(math.ceil(op.shape["n"] / 128) / 8) * math.ceil(op.shape["k"] / 128)
        source = weight_rows * 256 * 1024           # a row index spans 4 ch x 2 ranks x 16 banks x 2 KiB
        k = g.nodes[f"smc:{n}"]["lowered"]
        assert k.bytes == source + 2 * dest and k.threads == 4
        assert k.bandwidth == pytest.approx(68.264e9 * 4 / 8 / 2)
        assert list(g.successors(f"smc:{n}")) == [n]


def test_ddb_copies_run_beside_their_carriers():
    """DDB ([PIM_SHERPA] Sec. 4.1, Fig. 5): FF0 in quarters during Q, K, V, O; FF1 during FF0; FF2 during
    FF1; the next layer's Q-O during FF2; each copy starts with its carrier, and the next GEMM waits."""
    sys_ = system("mapping.strategy=ddb", *SMALL)
    p = compile_step(sys_, "prefill", 1, 16, 0)
    g = p.graph
    carried = {n: g.nodes[n]["smc_of"] for n in g if n.startswith("smc:")}
    assert carried["smc:preload"] == ("L0.q_proj", "L0.k_proj", "L0.v_proj", "L0.o_proj")
    for proj in ("q", "k", "v", "o"):
        assert carried[f"smc:L0.{proj}_proj"] == ("L0.up_proj",)
    assert carried["smc:L0.up_proj"] == ("L0.gate_proj",)
    assert carried["smc:L0.gate_proj"] == ("L0.down_proj",)
    assert carried["smc:L0.down_proj"] == ("L1.q_proj", "L1.k_proj", "L1.v_proj", "L1.o_proj")
    assert carried["smc:L1.down_proj"] == ("lm_head",)
    quarter = g.nodes["smc:L0.q_proj"]["smc_bytes"]
    assert quarter * 4 == g.nodes["smc:L0.up_proj"]["smc_bytes"]       # FF0 and FF1 are the same size
    from pimdsl.interpreter.op_timing import OpTimer
    from pimdsl.interpreter.schedule import schedule
    timer = OpTimer(sys_)
    step = schedule(p, lambda a: timer.seconds(a["lowered"]))
    at = {i.name: i for i in step.intervals}
    order = [n for n, a in p.ops() if a.get("access") == "smc"]
    for carrier, nxt in zip(order, order[1:]):
        copy = at[f"smc:{carrier}"]
        assert copy.start_s == pytest.approx(at[carrier].start_s)       # never during attention or norms
        assert at[nxt].start_s >= max(copy.end_s, at[carrier].end_s) - 1e-15
    assert at["L0.q_proj"].start_s >= at["smc:preload"].end_s


def test_nc_gemm_rereads_weights_per_token():
    sys_ = system("mapping.strategy=nc_gemm", *SMALL)
    p = compile_step(sys_, "prefill", 1, 16, 0)
    k = p.graph.nodes["L0.up_proj"]["lowered"]
    assert k.bandwidth == pytest.approx(2.44e9)
    assert k.bytes == 16 * 2048 * 8192 * 2 + 16 * 2048 * 2 + 16 * 8192 * 2


def test_pim_weights_in_a_cacheable_region_is_an_error(capsys):
    code = main(["run", PHONE, "--set", "s24_lpddr5x.pim_weights.cacheable=true", "--json"])
    err = capsys.readouterr().err
    assert code == 1
    assert "galaxy_s24p.pim:" in err and "non-cacheable" in err and "region pim_weights" in err
    assert "Traceback" not in err


@pytest.mark.slow                                   # whole 1B/3B runs: CI's slow step
def test_every_strategy_of_both_models_runs_from_the_cli(capsys):
    """`pimc run ... --set mapping.strategy=S --json` prints the numbers for every strategy and model
    (a one-layer model keeps this quick; the full models run in validation/pim_sherpa.py)."""
    for path, model in ((PHONE, "llama3_2_1b"), (PHONE_3B, "llama3_2_3b")):
        for name in STRATEGIES:
            assert main(["run", path, "--set", f"mapping.strategy={name}", "--set", f"{model}.layers=1",
                         "--set", "workload.input_len=8", "--set", "workload.output_len=1", "--json"]) == 0
            out = json.loads(capsys.readouterr().out)
            assert out["strategy"] == name
            for key in ("ttft_s", "tpot_s", "tpot_pim_s", "tpot_no_pim_s", "speedup_vs_no_pim", "memory_bytes",
                        "capacity"):
                assert key in out


@pytest.mark.slow                                   # whole 1B/3B runs: CI's slow step
def test_3b_weight_duplication_does_not_fit_the_phone(capsys):
    """[PIM_SHERPA] Sec. 3.2: a second 6 GB copy of Llama 3.2 3B does not fit a 12 GB phone; SHERPA's does."""
    fits = {}
    for name in ("wd", "ddb"):
        assert main(["run", PHONE_3B, "--set", f"mapping.strategy={name}", "--set", "workload.input_len=1",
                     "--set", "workload.output_len=1", "--json"]) == 0
        fits[name] = json.loads(capsys.readouterr().out)["capacity"]
    assert not fits["wd"]["fits"] and fits["wd"]["required_bytes"] > 12e9
    assert fits["ddb"]["fits"]


def test_timeline_of_one_layer_has_thread_tracks(tmp_path):
    path = tmp_path / "layer.json"
    assert main(["run", PHONE, *[a for o in SMALL for a in ("--set", o)], "--timeline", str(path),
                 "--timeline-layer", "1"]) == 0
    trace = json.loads(path.read_text())
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {f"s24_cpu thread {i}" for i in range(4)} <= tracks
    assert {f"s24_cpu.copy thread {i}" for i in range(2)} <= tracks
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert "L1.q_proj" in names and "smc:L1.q_proj" in names and not any(n.startswith("L0.") for n in names)


@pytest.mark.parametrize("op", ["L0.k_proj", pytest.param("L0.q_proj", marks=pytest.mark.slow)])
def test_decode_gemv_of_the_compiled_model_through_the_commands_equals_numpy(op):
    """The compiler's own layout of a decode FC layer (allocated rows, K/V padding) computed command by
    command on numpy banks equals numpy in the same accumulation order, bit for bit."""
    sys_ = system("mapping.strategy=ddb", *SMALL)
    p = compile_step(sys_, "decode", 1, 1, 16)
    attrs = p.graph.nodes[op]
    memory, shape = p.pim_memory, attrs["op"].shape
    assert attrs["family"] == "program" and attrs["first_row"] > 0
    rng = np.random.default_rng(7)
    dt = NUMPY_DTYPES[memory.pim.dtype]
    w = rng.standard_normal((shape["n"], shape["k"])).astype(dt)
    x = rng.standard_normal(shape["k"]).astype(dt)
    y = run_gemv(memory, attrs["program"], w, x, first_row=attrs["first_row"])
    assert np.array_equal(y, hbm_pim_gemv_reference(w, x, memory.pim.dtype))
