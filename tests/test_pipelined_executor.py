"""The real executor: its outputs equal the plain forward; the daemon's budget holds in a real run;
weight files round-trip through safetensors; `pimc execute` prints measured beside predicted."""
import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from pimdsl.cli.main import main
from pimdsl.loops.model_layers import numpy_forward as nf
from pimdsl.loops.pipelined_loading import pipelined_executor as ex
from pimdsl.loops.model_layers import weight_files
from pimdsl.loops.model_layers.layer_blobs import partition

TINY = """
storage d { kind = disk; read_bandwidth = 2 GB/s; read_latency = 0.1 ms; }
cpu c { cores = 2; memory = 4 GB; memory_bandwidth = 10 GB/s; peak { fp32 = 100 GFLOPS; } }
model tiny { architecture = ARCH; layers = 5; hidden = 64; heads = 4; kv_heads = KV; ffn = 128; vocab = VOCAB;
             max_seq_len = 32; dtype = DTYPE; gated_ffn = GATED; }
mapping mp { loop = pipelined_loading; strategy = pipeload; strategies = [baseline, pipeswitch, pipeload];
             params { loading_agents = 2; } }
workload w { batch = 1; input_len = 4; output_len = 3; memory_limit = 2 MB; }
system s { processors = [c]; storage = [d]; model = tiny; mapping = mp; workload = w; }
"""
VARIANTS = {"gpt": dict(ARCH="decoder", KV=4, VOCAB=100, DTYPE="fp32", GATED="false"),
            "gqa_gated_fp16": dict(ARCH="decoder", KV=2, VOCAB=100, DTYPE="fp16", GATED="true"),
            "vit": dict(ARCH="encoder", KV=4, VOCAB=0, DTYPE="fp16", GATED="false")}


def _spec(variant):
    text = TINY
    for key, value in VARIANTS[variant].items():
        text = text.replace(key, str(value))
    return text


@pytest.fixture
def tiny(elaborate, tmp_path):
    def make(variant):
        spec, diags = elaborate(_spec(variant))
        assert not diags.errors, diags.render_all()
        model = spec.systems["s"].model
        blobs = partition(model)
        folder = weight_files.ensure(model.name, blobs, 0, tmp_path / "weights")
        return model, blobs, folder
    return make


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_strategy_equals_the_plain_forward(tiny, variant, monkeypatch):
    # outputs only: the full collection a measured run starts with (for its RSS and latency) would walk
    # this test process's whole heap, about 0.3 s each of the 15 runs
    monkeypatch.setattr(ex.gc, "collect", lambda *generation: 0)
    model, blobs, folder = tiny(variant)
    all_blobs = {b.name: weight_files.read(folder / f"{b.name}.safetensors") for b in blobs}
    inputs = nf.inputs_for(model, 4)
    reference = nf.forward_plain(model, all_blobs, inputs, 3)
    assert np.isfinite(reference).all()
    sizes = [b.bytes for b in blobs if b.part == "layer"]
    for strategy, m, budget in [("baseline", 1, None), ("pipeswitch", 1, None), ("pipeload", 1, None),
                                ("pipeload", 3, None), ("pipeload", 4, 2 * sizes[0])]:
        got = ex.run(model, folder, sizes, inputs, 3, strategy, m, budget)
        assert np.array_equal(got.output, reference), (strategy, m)
        if budget is not None:
            assert got.layers_peak_bytes <= budget


def test_decoder_generation_matches_an_unrolled_forward_without_cache(tiny):
    """The KV cache is right: pass 2's logits equal a forward over prompt + token 1, no cache."""
    model, blobs, folder = tiny("gpt")
    w = {b.name: weight_files.read(folder / f"{b.name}.safetensors") for b in blobs}
    prompt = nf.inputs_for(model, 4)
    cached = nf.forward_plain(model, w, prompt, 2)
    longer = np.concatenate([prompt, [int(cached[0].argmax())]])
    x = nf.embed(longer, w["embedding"], 0)
    for i in range(model.layers):
        x = nf.layer(x, w[f"layer_{i:02d}"], model, {}, 0)
    assert np.allclose(nf.head(x, w["other"], w["embedding"], model)[0], cached[1], rtol=1e-4, atol=1e-5)


def test_weight_files_are_safetensors_read_back_exactly(tiny):
    model, blobs, folder = tiny("gqa_gated_fp16")
    ours, theirs = weight_files.read(folder / "layer_02.safetensors"), load_file(str(folder / "layer_02.safetensors"))
    assert set(ours) == set(theirs) == {name for name, _ in blobs[3].tensors}
    for name in ours:
        assert ours[name].dtype == np.float16 and np.array_equal(ours[name], theirs[name])
    assert sum(a.nbytes for a in ours.values()) == blobs[3].bytes


@pytest.mark.parametrize("m,budget_layers", [(1, 1), (2, 1), (3, 2), (5, 3), (4, 5)])
def test_the_real_daemon_never_exceeds_the_budget(tiny, m, budget_layers):
    model, blobs, folder = tiny("gpt")
    sizes = [b.bytes for b in blobs if b.part == "layer"]
    got = ex.run(model, folder, sizes, nf.inputs_for(model, 4), 3, "pipeload", m, budget_layers * sizes[0])
    assert got.layers_peak_bytes == min(m, budget_layers) * sizes[0]


def test_pimc_execute_prints_measured_and_predicted(spec_file, tmp_path, capsys):
    path = spec_file(_spec("gpt"))
    profile = tmp_path / "profile.json"
    argv = ["execute", str(path), "--cache", str(tmp_path), "--profile-out", str(profile), "--agents", "1,2", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["strategy"], r["loading_agents"]) for r in out["runs"]] == [
        ("baseline", 1), ("pipeswitch", 1), ("pipeload", 1), ("pipeload", 2)]
    for r in out["runs"]:
        assert r["output_equals_plain_forward"] and r["measured_latency_s"] > 0 and r["predicted_latency_s"] > 0
    # the profile it wrote drives `pimc run`
    assert main(["run", str(path), "--set", f'mapping.params.profile="{profile}"', "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["profile"] == str(profile) and run["loading_agents"] == 2


def test_pimc_execute_refuses_a_step_loop_system(spec_file, capsys):
    path = spec_file(_spec("gpt").replace("loop = pipelined_loading;", ""))
    assert main(["execute", str(path)]) == 1
    assert "cannot be executed for real" in capsys.readouterr().err


@pytest.mark.parametrize("norms", [1, 2])
def test_parallel_block_sums_both_branches_of_the_layer_input(tiny, norms):
    """x + attention(ln1 x) + FFN(ln x): each branch alone equals the sequential layer with the
    other branch zeroed (and, with one shared norm, ln2 set to ln1)."""
    import dataclasses
    seq, blobs, folder = tiny("gpt")
    par = dataclasses.replace(seq, parallel_attention=True, parallel_norms=norms)
    w = weight_files.read(folder / "layer_00.safetensors")
    x = np.random.default_rng(0).standard_normal((4, seq.hidden)).astype(np.float32)
    zero = lambda names: {**w, **{n: np.zeros_like(w[n]) for n in names}}
    shared = {**w, "ln2_g": w["ln1_g"], "ln2_b": w["ln1_b"]} if norms == 1 else w
    no_ffn, no_attn = zero(("w2", "b2")), zero(("wo", "bo"))
    assert np.array_equal(nf.layer(x, no_ffn, par, None, 0), nf.layer(x, no_ffn, seq, None, 0))
    assert np.allclose(nf.layer(x, no_attn, par, None, 0), nf.layer(x, {**shared, "wo": no_attn["wo"],
                       "bo": no_attn["bo"]}, seq, None, 0), rtol=1e-6, atol=1e-6)
    both = nf.layer(x, w, par, None, 0)
    assert np.allclose(both, nf.layer(x, no_ffn, par, None, 0) + nf.layer(x, no_attn, par, None, 0) - x,
                       rtol=1e-5, atol=1e-5)
    assert not np.allclose(both, nf.layer(x, w, seq, None, 0))


@pytest.mark.parametrize("parallel, norms, has_ln2", [(False, 1, True), (True, 1, False), (True, 2, True)])
def test_layer_blob_holds_the_ffn_norm_only_when_the_layer_has_one(tiny, parallel, norms, has_ln2):
    """A parallel layer with one shared norm stores no ln2: a loader would read 2*d dead values."""
    import dataclasses
    from pimdsl.loops.model_layers.layer_blobs import layer_tensors
    model = dataclasses.replace(tiny("gpt")[0], parallel_attention=parallel, parallel_norms=norms)
    names = [n for n, _ in layer_tensors(model)]
    assert ("ln2_g" in names and "ln2_b" in names) == has_ln2
    assert len(names) == 16 - 2 * (not has_ln2)
