"""A spec may come from someone else (issue 31): it reads only the data files it declares, inside its
own folders unless the user passes --allow-outside, and no diagnostic ever shows a byte of them."""
from __future__ import annotations

import os

import pytest

from .conftest import ROOT, pimc as run_pimc

SECRET = "s3cr3t-value-123"


def pimc(*argv):
    done = run_pimc(*argv)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A spec folder `proj/` whose system imports the bundled L3 mapping and GPT-3 model; a secret file
    lives beside the folder, outside it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PIMDSL_SECRET_MARKER", SECRET)
    (tmp_path / "proj").mkdir()
    (tmp_path / "secret.csv").write_text(f"{SECRET},1\n")
    (tmp_path / "proj" / "reqs.csv").write_text("input_len,output_len\n8,2\n16,3\n")
    return tmp_path


def spec(tree, csv: str) -> str:
    path = tree / "proj" / "s.pim"
    text = (ROOT / "specs/systems/l3_gpt3_175b.pim").read_text()
    text = text.replace('import "../', f'import "{ROOT}/specs/')
    text = text.replace("workload = l3_openr1;", "workload = leaky;")
    path.write_text(text + f'\nworkload leaky : l3_openr1 {{ requests_csv = "{csv}"; }}\n')
    return str(path)


@pytest.mark.parametrize("name", ["/proc/self/environ", "/etc/passwd", "../secret.csv", "/etc/hostname"])
@pytest.mark.parametrize("command", [["check"], ["run", "--json"], ["run", "--json", "--allow-outside"]])
def test_a_data_file_is_never_echoed(tree, name, command):
    code, out, err = pimc(*command, spec(tree, name))
    assert code == 1, err
    assert SECRET not in out + err and "root:" not in out + err
    assert "proj/s.pim:" in err and ": error: " in err           # located at the line that names it


def test_a_symlink_out_of_the_tree_is_refused_and_never_read(tree):
    os.symlink("/etc/passwd", tree / "proj" / "passwd.csv")
    code, _, err = pimc("run", "--json", spec(tree, "reqs.csv"), "--set", 'workload.requests_csv="passwd.csv"')
    assert code == 1 and "'passwd.csv' is outside the spec's folders" in err and "--allow-outside" in err
    code, _, err = pimc("run", "--json", "--allow-outside", spec(tree, "reqs.csv"),
                       
                        "--set", 'workload.requests_csv="passwd.csv"')
    assert code == 1 and "this is not a requests CSV: its first line must be the header" in err
    assert "root:" not in err


def test_outside_the_tree_needs_allow_outside(tree):
    (tree / "outside.csv").write_text("input_len,output_len\n8,2\n")
    code, _, err = pimc("check", spec(tree, "../outside.csv"))
    assert code == 1 and "'../outside.csv' is outside the spec's folders" in err, err
    code, out, err = pimc("check", "--allow-outside", spec(tree, "../outside.csv"))
    assert code == 0 and "\n  reads requests CSV outside.csv\n" in out, out        # shown relative to the cwd


def test_check_lists_the_files_a_spec_reads(tree):
    code, out, err = pimc("check", spec(tree, "reqs.csv"))
    assert code == 0, err
    reads = [line.strip() for line in out.splitlines() if line.startswith("  reads ")]
    assert reads == ["reads requests CSV proj/reqs.csv"]
    code, out, _ = pimc("check", ROOT / "specs/systems/pipeload_gpt_j_6b.pim")
    assert code == 0 and "  reads HuggingFace config " in out and out.rstrip().endswith("specs/models/hf/gpt_j_6b/config.json")


def test_a_csv_in_the_tree_runs(tree):
    code, out, err = pimc("run", "--json", spec(tree, "reqs.csv"))
    assert code == 0, err
    assert '"requests": 2' in out.replace(" ", "").replace('"requests":2', '"requests": 2')
