#!/usr/bin/env python3
"""Regenerate validation/l3.json and validation/l3.md: [L3]'s stated numbers beside the sub-batch
serving loop's (about 10 minutes on two shared cores: 3 models x 4 traces x 5 systems of 1,000 requests).

    python validation/run_l3.py
    python validation/run_l3.py --markdown-only    (the table again from validation/l3.json)
    python validation/run_l3.py --plots [fig11]    (only Figs. 8, 9 and 11 by `pimc sweep` into validation/l3/,
                                                    about 5 minutes of CPU; or the sweeps of one figure)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.cli.main import main as pimc         # noqa: E402
from pimdsl.emit.atomic import atomic_file       # noqa: E402
from pimdsl.validation import l3 as V              # noqa: E402

OUT = ROOT / "validation" / "l3.json"
PLOTS = ROOT / "validation" / "l3"
WORKLOADS = ",".join(f"l3_{t}" for t in V.TRACES)


def sweeps() -> list[list[str]]:
    """`pimc sweep` arguments of Figs. 8, 9 and 11 ([L3] Sec. 6.2-6.3), each a CSV and a PNG."""
    out = []
    for model in V.MODELS:      # Fig. 8: tokens/s of every system on every trace, one plot per model
        out.append([V.spec_path(model), "--grid", f"l3_{model}.workload={WORKLOADS}",
                    "--grid", "mapping.strategy=l3," + ",".join(V.BASELINES), "--logy",
                    "--x", f"l3_{model}.workload", "--y", "tokens_per_s", "--series", "mapping.strategy",
                    "-o", f"fig8_{model}.csv"])
    # Fig. 9: GPT-175B on OpenR1 over host capacity x ranksets (ranks per channel); the rows follow the capacity
    out.append([V.spec_path("gpt3_175b"), "--grid", "l3_host_mem.capacity=512GiB,1024GiB,2048GiB,4096GiB",
                "--grid", "L3_DDR4_PIM.organization.ranks=2,4,8,16", "--x", "L3_DDR4_PIM.organization.ranks",
                "--y", "tokens_per_s", "--series", "l3_host_mem.capacity", "-o", "fig9_gpt3_175b.csv"])
    # Fig. 11: GPT-89B decode-only batches of 6K-token requests (prompts already in the KV cache); two
    # replicas, so a replica's batch is half the requests; memory large enough to hold every batch
    decode = ["--set", "workload.distribution=fixed", "--set", "workload.input_len=6000", "--set",
              "workload.output_len=2", "--set", "mapping.params.prefilled=1", "--grid", "workload.requests=32,64,128,256",
              "--x", "workload.requests", "--y", "tpot_s"]
    out.append([V.spec_path("gpt_89b"), *decode, "--set", "l3_host_mem.capacity=8TiB",
                "--grid", "L3_DDR4_PIM.organization.ranks=2,4,8,16", "--series", "L3_DDR4_PIM.organization.ranks",
                "-o", "fig11_gpt_89b_l3.csv"])
    out.append([V.spec_path("gpt_89b"), *decode, "--set", "mapping.strategy=gpu_only",
                "--set", "l3_a100.memory=100TB", "-o", "fig11_gpt_89b_gpu_only.csv"])   # unbounded HBM ([L3] Sec. 6.3)
    return out


def plots(only: str = "") -> int:
    PLOTS.mkdir(exist_ok=True)
    for args in sweeps():
        if not args[-1].startswith(only):
            continue
        csv = str(PLOTS / args[-1])
        args = ["sweep", *args[:-1], csv, "--plot", csv[:-len(".csv")] + ".png", "-j", "2"]
        status = pimc(args)
        if status:
            return status
    return 0


def write(path: Path, text: str) -> None:
    with atomic_file(path) as out:
        out.write(text)


def main() -> int:
    if "--plots" in sys.argv:        # `--plots fig11`: only the sweeps whose CSV starts so
        rest = sys.argv[sys.argv.index("--plots") + 1:]
        return plots(rest[0] if rest else "")
    if "--markdown-only" not in sys.argv:          # else: rewrite the table from the committed JSON
        data = V.collect(progress=lambda what: print(what, file=sys.stderr, flush=True))
        write(OUT, json.dumps(data, indent=1) + "\n")
    md = ROOT / "validation" / "l3.md"
    kept = ""                                  # the hand-written discussion below the marker survives
    if md.exists() and V.MARKER in md.read_text():
        kept = md.read_text()[md.read_text().index(V.MARKER):]
    write(md, V.markdown(json.loads(OUT.read_text())) + ("\n" + kept if kept else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
