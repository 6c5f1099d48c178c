"""`pimc compile` of every bundled system: each writes its steps, and what it writes adds up.

Per system: the exit code, every step's files, the summary's op counts against the op graph it
wrote (every op is a PIM op, a host kernel, a transfer or an op absorbed by a PIM program that
covers it, never missing), and for a system whose mapping places decode ops on `pim`, PIM ops with
commands in its decode step. Absorbed ops (`covers = [...]`, LANGUAGE.md) follow the op whose
program did their work, on the same PIM memory.
"""
from __future__ import annotations

import json

import pytest

from pimdsl.cli.main import main
from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.op_timing import OpTimer
from pimdsl.loops.step.step_run import compile_step
from pimdsl.lowering.records import Absorbed, Kernel, PimWork

from .conftest import ROOT

SYSTEMS = sorted((ROOT / "specs" / "systems").glob("*.pim"))
# Writing a step's PIM command listing, kernels and request trace is half of a compile (the NeuPIMs and
# Hermes decode steps: 10^4-10^5 lines each) and the same writers for every model of a family (one
# mapping, one PIM unit and its programs): the default run writes everything for one system per family
# and the op graphs (`--graph`: every op lowered and accounted for) of the others, whose full outputs
# are written by `-m slow`.
WRITTEN = {"aim_llama2_7b", "hermes_ndp_opt_13b", "l3_gpt3_175b", "neupims_gpt3_7b", "pim_sherpa_llama3_2_1b",
           "pipeload_bert_large", "pipeload_gpt2_medium", "pipeload_gpt_j_6b", "pipeload_vit_large",
           "tensor_parallel_llama2_70b"}
COMPILES = [pytest.param(p, False, id=p.stem) if p.stem in WRITTEN else
            pytest.param(p, False, id=p.stem, marks=pytest.mark.slow) for p in SYSTEMS] + \
           [pytest.param(p, True, id=f"{p.stem}-graph") for p in SYSTEMS if p.stem not in WRITTEN]


def _system(path):
    spec, diags = load_spec(str(path))
    assert not diags.errors
    (system,) = spec.systems.values()
    return system


def test_every_bundled_system_is_listed():
    names = {p.stem for p in SYSTEMS}
    assert len(names) == 21
    assert {"l3_gpt3_175b", "hermes_ndp_opt_13b", "neupims_gpt3_7b", "aim_llama2_7b"} <= names


def test_every_family_writes_one_system_by_default():
    assert {p.stem.split("_")[0] for p in SYSTEMS} == {name.split("_")[0] for name in WRITTEN}


@pytest.mark.parametrize("path,graph_only", COMPILES)
def test_bundled_system_compiles(path, graph_only, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compile", str(path), "-o", str(out), "--max-requests", "1000",
                 *(["--graph"] if graph_only else [])]) == 0, capsys.readouterr().err
    system = _system(path)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["system"] == system.name and summary["model"] == system.model.name
    phases = ["prefill", "decode"] if system.model.architecture == "decoder" else ["prefill"]
    assert list(summary["steps"]) == phases
    for phase in phases:
        step, folder = summary["steps"][phase], out / phase
        for name in ("graph.json", "graph.dot", "kernels.txt", "kernels.json"):
            assert (folder / name).is_file() == (name.startswith("graph") or not graph_only)
        graph = json.loads((folder / "graph.json").read_text())
        nodes = {n["name"]: n for n in graph["nodes"]}
        absorbed = step.get("absorbed", {})
        # every op of the graph is accounted for, once
        assert step["ops"] == len(nodes) == sum(step["ops_by_device"].values())
        assert step["pim_ops"] + step["kernels"] + step["transfers"] + len(absorbed) == step["ops"]
        if not graph_only:
            assert len(json.loads((folder / "kernels.json").read_text())) == step["kernels"]
        assert (folder / "commands.txt").is_file() == (step["pim_ops"] > 0 and not graph_only)
        assert (step["pim_commands"] > 0) == (step["pim_ops"] > 0 and not graph_only)
        for op, by in absorbed.items():          # right after its covering op, which runs a program
            assert [e["from"] for e in graph["edges"] if e["to"] == op] == [by]
            assert (nodes[by]["kind"], nodes[op]["kind"]) in {("attn_score", "softmax"), ("gemv", "activation")}
    on_pim = any(device == "pim" for device in system.mapping.placement.get("decode", {}).values())
    if on_pim and any(m.pim is not None for m in system.memories):
        decode = summary["steps"]["decode"]
        assert decode["pim_ops"] > 0 and (decode["pim_commands"] > 0 or graph_only)


@pytest.mark.parametrize("name", ["l3_gpt3_175b", "hermes_ndp_opt_13b"])
def test_decode_attention_runs_on_the_pim_programs_with_softmax_absorbed(name):
    """L3's rank PU and Hermes' activation unit apply softmax inside the score program: per layer,
    score and context run the unit's programs, softmax is absorbed by the score (no commands, no
    time), and the KV append is a kernel of the mapping's processor (kv_cache = <gpu>)."""
    system = _system(ROOT / "specs" / "systems" / f"{name}.pim")
    program = compile_step(system, "decode", 2, 1, 300)
    pim = "pim:" + next(m.name for m in system.memories if m.pim is not None)
    gpu = system.mapping.placement["decode"]["kv_cache"]
    assert gpu == system.processors[0].name
    nodes = program.graph.nodes
    timer = OpTimer(system)
    for i in range(system.model.layers):
        score, soft, context = (nodes[f"L{i}.{k}"] for k in ("attn_score", "softmax", "attn_context"))
        assert score["device"] == soft["device"] == context["device"] == pim
        assert isinstance(score["lowered"], PimWork) and isinstance(context["lowered"], PimWork)
        assert soft["lowered"] == Absorbed(f"L{i}.softmax", pim[4:], f"L{i}.attn_score")
        assert timer.seconds(soft["lowered"]) == 0.0
        assert isinstance(nodes[f"L{i}.kv_append"]["lowered"], Kernel) and nodes[f"L{i}.kv_append"]["device"] == gpu
    # on PIM: exactly the attention ops (QKV and FFN go to the GPU in the step-compiled path)
    assert sorted({a["op"].kind for _, a in program.ops() if a["device"] == pim}) == \
        ["attn_context", "attn_score", "softmax"]


def test_a_host_softmax_after_a_covering_program_is_an_error(tmp_path, capsys):
    """The score program already normalised the scores: a softmax on the GPU would apply it twice."""
    mapping = (ROOT / "specs" / "mappings" / "l3.pim").read_text()
    mapping = mapping.replace('import "../hardware/', f'import "{ROOT}/specs/hardware/')
    mapping = mapping.replace("kv_cache = l3_a100; }", "kv_cache = l3_a100; softmax = l3_a100; }")
    (tmp_path / "l3.pim").write_text(mapping)
    system = (ROOT / "specs" / "systems" / "l3_gpt_89b.pim").read_text()
    system = system.replace('import "../mappings/l3.pim";', f'import "{tmp_path}/l3.pim";')
    system = system.replace('import "../models/', f'import "{ROOT}/specs/models/')
    (tmp_path / "s.pim").write_text(system)
    assert main(["compile", str(tmp_path / "s.pim"), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "op L0.softmax (softmax) is placed on l3_a100, but L0.attn_score runs program attn_score of PIM " \
           "unit 'l3_bank_pu', which already performs softmax (covers = [softmax])" in err
    assert f"{tmp_path}/l3.pim:" in err and "softmax = pim" in err
    assert not (tmp_path / "out").exists()
    assert err.count("already performs softmax") == 1        # once, not once per layer
