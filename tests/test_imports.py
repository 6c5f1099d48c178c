"""Imports (relative, library path, cycles, missing), derivation and counts."""


def test_relative_import_and_derivation_with_overrides(spec_file, elaborate):
    spec_file("""
        workload base_wl { batch = 4; input_len = 128; output_len = 32; }
        dram base_dram {
          family = ddr4; clock = 1600 MHz; data_rate = 3200 MT/s;
          organization { banks_per_group = 4; rows = 1024; columns = 1024; device_width = 8 bit;
                         bus_width = 64 bit; burst_length = 8; }
          timing { tRCD = 22 cycles; tRP = 22 cycles; }
          command ACT { scope = bank; opens = true; }
          command RD { scope = bank; }
          command PRE { scope = bank; closes = true; }
          rules { rule bank: ACT -> RD = tRCD; rule bank: PRE -> ACT = tRP; }
        }
    """, name="lib.pim")
    spec, diags = elaborate("""
        import "lib.pim";
        workload derived : base_wl { batch = 8; }
        dram faster : base_dram {
          timing { tRCD = 18 cycles; }
          rules { rule bank: ACT -> RD = tRCD + 1 cycles; }
        }
    """)
    assert not diags.errors, diags.render_all()
    w = spec.workloads["derived"]
    assert (w.batch, w.input_len, w.output_len) == (8, 128, 32)
    d = spec.drams["faster"]
    assert d.base == "base_dram"
    assert d.timing_cycles == {"tRCD": 18, "tRP": 22}
    rules = {(r.preceding, r.following): r.cycles for r in d.rules}
    assert rules == {(("ACT",), ("RD",)): 19, (("PRE",), ("ACT",)): 22}
    assert set(spec.drams) == {"faster"}          # only the root file's blocks are reported


def test_library_path_import(elaborate, tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "shared.pim").write_text("workload shared_wl { batch = 2; }\n")
    monkeypatch.setenv("PIMDSL_PATH", str(lib))
    spec, diags = elaborate('import "shared.pim";\nworkload w : shared_wl { input_len = 3; }')
    assert not diags.errors, diags.render_all()
    assert spec.workloads["w"].batch == 2


def test_import_cycle(spec_file, errors):
    spec_file('import "spec.pim";\nworkload b { batch = 1; }', name="other.pim")
    found = errors('import "other.pim";\nworkload a { batch = 1; }')
    assert len(found) == 1
    assert found[0].startswith("other.pim:1:1: error: import cycle: ")
    assert found[0].splitlines()[0].endswith("spec.pim -> other.pim -> spec.pim")


def test_missing_import(errors):
    (found,) = errors('import "nowhere.pim";')
    assert found.startswith('spec.pim:1:1: error: cannot find the imported file "nowhere.pim"')


def test_each_file_is_loaded_once(spec_file, elaborate):
    spec_file('workload shared { batch = 1; }', name="a.pim")
    spec_file('import "a.pim";\nworkload wb : shared { }', name="b.pim")
    spec, diags = elaborate('import "a.pim";\nimport "b.pim";\nworkload wc : shared { batch = 3; }')
    assert not diags.errors, diags.render_all()


def test_counts(elaborate):
    spec, diags = elaborate("""
        gpu g[8] { peak { fp16 = 312 TFLOPS; } }
        link l { kind = nvlink; bandwidth = 300 GB/s; count = 12; }
    """)
    assert not diags.errors, diags.render_all()
    assert spec.processors["g"].count == 8
    assert spec.links["l"].count == 12


def test_bad_count(errors):
    (found,) = errors("gpu g[2.5] { peak { fp16 = 1 TFLOPS; } }")
    assert "a count in [...] must be a positive whole number" in found


def test_set_overrides_fields_lets_and_nested_values(elaborate):
    text = """
        model g { architecture = graph; let out = 64; let in = 32;
                  tensor W { shape = [out, in]; role = weight; } tensor x { shape = [in]; role = input; }
                  op y { op = gemv; inputs = [W, x]; } }
        workload w { batch = 1; }
        cpu c { peak { fp16 = 1 TFLOPS; } memory_bandwidth = 10 GB/s; }
    """
    spec, diags = elaborate(text, ["g.out=128", "workload.batch=16", "cpu.c.memory_bandwidth=20 GB/s",
                                   "c.peak.fp16=2 TFLOPS"])
    assert not diags.errors, diags.render_all()
    assert spec.models["g"].params == {"out": 128, "in": 32}
    assert spec.models["g"].tensors[0].shape == (128, 32)
    assert spec.workloads["w"].batch == 16
    assert spec.processors["c"].memory_bandwidth_bytes_per_s == 20e9
    assert spec.processors["c"].peak_flops == {"fp16": 2e12}


def test_set_errors(errors):
    text = "workload w { batch = 1; }"
    assert errors(text, ["workload.batch=1 ms"])[0].startswith(
        "--set workload.batch=1 ms:1:16: error: a whole number was expected for 'batch', this is a time")
    assert errors(text, ["wrkload.batch=2"])[0].startswith(
        "--set wrkload.batch=2:1:1: error: --set: no block or kind named 'wrkload'")
    assert errors(text, ["batch"])[0].startswith("--set batch:1:1: error: --set takes PATH=VALUE")
