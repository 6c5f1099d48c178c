"""The command-line contract: exit codes, diagnostics on stderr, no tracebacks, JSON on stdout."""
import json
import shutil
import subprocess
import sys

import pytest

from .conftest import pimc


def pimc_process(*args, cwd=None):
    """The installed `pimc` console script in a process of its own (start-up and imports: about 0.3 s)."""
    exe = shutil.which("pimc")
    cmd = [exe] if exe else [sys.executable, "-m", "pimdsl.cli.main"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, cwd=cwd, timeout=120)


def test_check_ok_and_errors(tmp_path):
    good = tmp_path / "good.pim"
    good.write_text("workload w { batch = 2; }\n")
    bad = tmp_path / "bad.pim"
    bad.write_text("workload w { batch = 2 ms; }\n")
    ok = pimc_process("check", str(good))         # the exit codes of a process, its whole stderr
    assert ok.returncode == 0, ok.stderr
    assert "ok" in ok.stdout
    fail = pimc_process("check", str(good), str(bad))
    assert fail.returncode == 1
    assert f"{bad}:1:22: error: a whole number was expected for 'batch', this is a time" in fail.stderr
    assert "Traceback" not in fail.stderr


def test_usage_errors_exit_2():
    assert pimc().returncode == 2
    assert pimc("check").returncode == 2
    assert pimc("frobnicate", "x.pim").returncode == 2


def test_show_json_with_set(tmp_path):
    spec = tmp_path / "s.pim"
    spec.write_text("workload w { batch = 2; input_len = 8; }\n")
    out = pimc("show", str(spec), "--json", "--set", "workload.batch=32")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["workloads"]["w"]["batch"] == 32
    assert data["workloads"]["w"]["input_len"] == 8


@pytest.mark.parametrize("content", [
    b"", b"\x00\x01\x02garbage\xff", b"\xff\xfe\xfd", b"workload w {" * 50,
    b"workload w { batch = " + b"(" * 5000 + b"1" + b")" * 5000 + b"; }",
    b"workload w { batch = " + b"1+" * 20000 + b"1; }",
    b"workload w { batch = 99999999999999999999999999999999999999999999999999e999999; }",
    b"workload w { batch = 0x" + b"f" * 400 + b"; }",
])
def test_bad_input_never_gives_a_traceback(tmp_path, content):
    path = tmp_path / "bad.pim"
    path.write_bytes(content)
    result = pimc("check", str(path))
    assert "Traceback" not in result.stderr
    assert "internal error" not in result.stderr
    assert result.returncode in (0, 1)
    if content.strip() and result.returncode == 1:
        assert f"{path}:" in result.stderr


def test_directory_and_missing_file(tmp_path):
    for target in (tmp_path, tmp_path / "missing.pim"):
        result = pimc("check", str(target))
        assert result.returncode == 1
        assert "Traceback" not in result.stderr


def test_installed_pimc_runs_from_any_directory(tmp_path):
    """The wheel carries grammar and specs: the bundled library imports from outside the checkout."""
    spec = tmp_path / "uses_library.pim"
    spec.write_text('import "dram/ddr4.pim";\nmemory m { part = DDR4_3200; address_map = [row, bank, bank_group, column]; }\n')
    result = pimc_process("check", spec.name, cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_show_text_summary_is_rendered_from_the_template(tmp_path):
    spec = tmp_path / "s.pim"
    spec.write_text("""
        gpu g[8] { peak { fp16 = 312 TFLOPS; } }
        link l { kind = nvlink; bandwidth = 300 GB/s; }
        model m { layers = 2; hidden = 64; heads = 4; kv_heads = 2; ffn = 256; vocab = 1000; }
        workload w { batch = 4; input_len = 16; output_len = 8; }
        mapping p { strategies = [a, b]; strategy = b; }
        system s { processors = [g]; links = [l]; model = m; workload = w; mapping = p; }
    """)
    out = pimc("show", spec.name, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "s.pim",
        "gpu g[8]  fp16 312 TFLOP/s",
        "link l  nvlink, 300 GB/s",
        "model m  decoder, 2 layers, hidden 64, 4/2 heads, ffn 256, 0.0002181 B params, fp16",
        "system s  g; ; model m; strategy b; batch 4, in 16, out 8",
    ]


def test_check_a_folder_recurses_over_its_pim_files(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.pim").write_text("workload a { batch = 2; }\n")
    (tmp_path / "sub" / "b.pim").write_text("workload b { batch = 2 ms; }\n")
    (tmp_path / "notes.txt").write_text("not a spec")
    result = pimc("check", str(tmp_path))
    assert result.returncode == 1
    assert f"{tmp_path / 'a.pim'}: ok" in result.stdout
    assert f"{tmp_path / 'sub' / 'b.pim'}:1:22: error: a whole number was expected" in result.stderr
    assert "notes.txt" not in result.stdout + result.stderr
    (tmp_path / "sub" / "b.pim").write_text("workload b { batch = 2; }\n")
    assert pimc("check", "--strict", str(tmp_path)).returncode == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    none = pimc("check", str(empty))
    assert none.returncode == 1 and "no .pim files" in none.stderr


def test_check_strict_passes_over_the_bundled_specs_folder():
    from pathlib import Path
    specs = Path(__file__).resolve().parents[1] / "specs"
    result = pimc("check", "--strict", str(specs))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok") == len(list(specs.rglob("*.pim")))


def test_version_names_the_bundled_specs():
    import re
    from pathlib import Path
    from pimdsl import __version__
    out = pimc_process("--version")
    assert out.returncode == 0
    # the installed pimc's folder (the package's copy in a wheel install, the checkout's in an editable one)
    found = re.fullmatch(r"pimc (\S+) \(bundled specs: (.+)\)", out.stdout.strip())
    assert found and found[1] == __version__, out.stdout
    assert (Path(found[2]) / "systems" / "pim_sherpa_llama3_2_1b.pim").is_file()


def test_timeline_layer_without_timeline_is_a_usage_error():
    from pathlib import Path
    spec = Path(__file__).resolve().parents[1] / "specs" / "systems" / "pim_sherpa_llama3_2_1b.pim"
    out = pimc("run", str(spec), "--timeline-layer", "3")
    assert out.returncode == 2
    assert "--timeline-layer N keeps one layer of the --timeline FILE; give --timeline too" in out.stderr


def test_show_json_lists_the_imported_blocks_a_system_uses(tmp_path):
    (tmp_path / "hw.pim").write_text('import "dram/ddr4.pim";\n'
                                     "memory m { part = DDR4_3200; address_map = [row, bank, bank_group, rank, column]; }\n"
                                     "cpu c { peak { fp16 = 1 TFLOPS; } memory_bandwidth = 10 GB/s; }\n"
                                     "cpu unused { peak { fp16 = 1 TFLOPS; } }\n")
    (tmp_path / "sys.pim").write_text('import "hw.pim";\nsystem s { processors = [c]; memories = [m]; }\n')
    out = pimc("show", str(tmp_path / "sys.pim"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert list(data["memories"]) == ["m"] and list(data["processors"]) == ["c"]   # not `unused`
    assert list(data["drams"]) == ["DDR4_3200"]


def test_a_spec_in_a_checkout_imports_the_checkouts_specs_not_the_installed_ones(tmp_path):
    """Run from a pimdsl checkout (a folder with grammar/pim.lark and specs/), imports of the library
    read that checkout's specs/ (what a user edits there), before the bundled copy."""
    checkout = tmp_path / "clone"
    (checkout / "grammar").mkdir(parents=True)
    (checkout / "grammar" / "pim.lark").write_text("// stands for the grammar\n")
    (checkout / "specs" / "dram").mkdir(parents=True)
    (checkout / "specs" / "systems").mkdir()
    (checkout / "specs" / "dram" / "ddr4.pim").write_text("workload edited_here { batch = 3; }\n")
    text = 'import "dram/ddr4.pim";\nworkload w : edited_here { }\n'
    (checkout / "specs" / "systems" / "s.pim").write_text(text)
    inside = pimc("show", str(checkout / "specs" / "systems" / "s.pim"), "--json")
    assert inside.returncode == 0, inside.stderr
    assert json.loads(inside.stdout)["workloads"]["w"]["batch"] == 3
    (tmp_path / "s.pim").write_text(text)                    # outside a checkout: the bundled ddr4.pim
    outside = pimc("show", str(tmp_path / "s.pim"))
    assert outside.returncode == 1 and "edited_here" in outside.stderr
