"""A seeded mutation fuzzer for `pimc`: bad input must end in a located diagnostic, never worse.

    python -m pimdsl.fuzz [--cases 5000] [--seed 1] [--timeout 10]

Each case is one `pimc` command on mutated input, run in this process:
  * a bundled spec (or a LANGUAGE.md example) with lines deleted, duplicated, swapped or cut, or a
    token replaced by a syntax fragment or an extreme value, checked with `pimc check`;
  * a DRAM request trace (DRAMsim3 or Ramulator, generated from the memory's organization) with
    its fields replaced by extreme or malformed values, replayed with `pimc dram`;
  * a system spec with one field overridden by `--set PATH=VALUE` (zero, negative, huge, a string,
    a list, a wrong unit), elaborated with `pimc show` or, for the small systems, run with
    `pimc run` under a small `--max-work`;
  * a system spec with a unit swapped for one of another dimension, or an unknown field added after
    a field, checked with `pimc check`: it must draw an error or a warning (silence is a failure);
  * an output path (`--timeline`, `--command-trace`) that is the run's own spec or trace, a folder
    or a FIFO: refused, and the input unchanged;
  * a damaged or planted entry in a private `$PIMDSL_CACHE`: the run heals, and a planted pickle
    never runs.
A case fails on an exception escaping `pimc` (a traceback), an internal error (exit 3), a hang
(past `--timeout` seconds), an error line without `path:line:col`, or a silent acceptance. The same seed gives the same
cases. The test suite runs a few hundred (tests/test_fuzz.py); this command runs as many as asked
and prints each failure with the command that reproduces it.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import re
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .cli.main import main as pimc
from .frontend.diagnostics import Diagnostics, SpecError
from .frontend.evaluate import Evaluator
from .frontend.loader import Loader
from .frontend.nodes import ScopeBuilder
from .frontend.pipeline import load_spec
from .frontend.resources import specs_dir

TOKEN = re.compile(r'"[^"\n]*"|[A-Za-z_][A-Za-z0-9_]*|[0-9][0-9._]*|->|\S')
FRAGMENTS = ["{", "}", ";", "=", ":", "[", "]", "(", ")", ",", "->", "1e999", "0", "-1", "ns", "GB/s", "rule",
             "window", "other", "import", "let", "x", '"', '"../x.pim"', '"/etc/passwd"', "dram", "tRCD", "@", "^",
             "2^64", "1e300", "1e-300", "0 GB/s", "0 MHz", "-5 ns", '"text"']
VALUES = ["0", "-1", "1e300", "2^64", "1e-300", "0.5", "1e9", '"x"', "[1, 2]", "true", "nonsense", "1 ms",
          "0 GB/s", "-3 GB/s", "0 MHz", "1e300 GB/s", "0 B", "1e30 B", "7 bit", "0 ns", "{", "1e999"]
TRACE_VALUES = ["-1", "-0x40", "0x10000000000000000", "0xffffffffffffffff", "1000000000000000000", "x", "",
                "READ", "0x", "99999999", "1.5", "\udcff", "0,0,0", "0,0,0,0,0,0,0", "-1,0,0,0,0,0"]
# Whole-run refusals name the file but no line: the limit is the run's, not one field's.
UNLOCATED_OK = ("would take about", "declares no system", "systems (", "has no model", "no memory named",
                "nothing to do", "error: cannot write ", "the request traces would hold")
SMALL_SYSTEMS = {"pipeload_gpt_j_6b.pim": ["--set", "gpt_j_6b.layers=1", "--set", "workload.output_len=2"],
                 "hbm_pim_gemv.pim": []}
DRAM_SPEC, DRAM_MEMORIES = "reference/dram.pim", ("ddr4_3200", "hbm2", "lpddr5_6400")
LOCATED = re.compile(r"^\S.*?:\d+:\d+: (error|warning): ")
# A unit of each dimension, for a `unit` mutation that swaps one for another kind.
UNITS = ["ns", "cycles", "GB/s", "MHz", "MB", "GT/s", "TFLOPS", "W", "J"]
UNIT_TOKEN = re.compile(r"(?<=[0-9] )(ns|us|ms|s|ps|cycles|B|KB|MB|GB|KiB|MiB|GiB|GB/s|MB/s|MHz|GHz|Hz|MT/s|GT/s|TFLOPS|GFLOPS|bit)\b")
FIELD_LINE = re.compile(r"^(\s*)[A-Za-z_][A-Za-z0-9_]* = [^;{}]*;\s*$")


@dataclass
class Failure:
    argv: list[str]
    why: str
    stderr: str

    def __str__(self) -> str:
        return f"{self.why}: pimc {' '.join(self.argv)}\n" + "\n".join("    " + l for l in self.stderr.splitlines()[:8])


class _Hang(BaseException):
    """Raised by the alarm; a BaseException so that pimc's `except Exception` does not take it."""


def judge(argv: list[str], timeout: float, must_say: bool = False) -> Failure | None:
    """Run `pimc argv`; None if it ended well (exit 0/1/2, every error located), else why not.
    `must_say`: the input is wrong, so exit 0 without an error or warning is a silent acceptance."""
    err, out = io.StringIO(), io.StringIO()

    def expired(*_):
        raise _Hang()
    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = pimc(argv)
    except SystemExit as exc:
        code = exc.code
    except _Hang:
        return Failure(argv, f"hang (more than {timeout:g} s)", err.getvalue())
    except KeyboardInterrupt:
        raise
    except BaseException as exc:          # an escaping exception is a traceback for a user
        return Failure(argv, f"traceback: {type(exc).__name__}: {exc}", err.getvalue())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    text = err.getvalue()
    if "internal error" in text or "Traceback" in text or code not in (0, 1, 2):
        return Failure(argv, f"internal error (exit {code})", text)
    for line in text.splitlines():
        if ": error: " in line and not LOCATED.match(line) and code != 2 \
                and not any(ok in line for ok in UNLOCATED_OK):
            return Failure(argv, "diagnostic without a location", text)
    if must_say and code == 0 and ": error: " not in text and ": warning: " not in text:
        return Failure(argv, "silently accepted", text + out.getvalue())
    return None


# ---- specs ------------------------------------------------------------------------------------------

def spec_corpus(workdir: Path) -> list[Path]:
    """A copy of the bundled specs (relative imports still resolve) plus LANGUAGE.md's examples."""
    shutil.copytree(specs_dir(), workdir / "specs")
    files = sorted((workdir / "specs").rglob("*.pim"))
    language = specs_dir().parent / "LANGUAGE.md"
    if language.is_file():
        for i, example in enumerate(re.findall(r"```pim\n(.*?)```", language.read_text(), re.S)):
            path = workdir / "specs" / f"language_example_{i}.pim"
            path.write_text(example)
            files.append(path)
    return files


def mutate_spec(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True) or [""]
    kind = rng.choice(["delete", "duplicate", "swap", "token", "token", "truncate", "insert"])
    i = rng.randrange(len(lines))
    if kind == "delete":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(i, lines[i])
    elif kind == "swap":
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "truncate":
        return text[:rng.randrange(len(text) + 1)]
    else:
        tokens = list(TOKEN.finditer(lines[i]))
        fragment = rng.choice(FRAGMENTS)
        if tokens and kind == "token":
            m = rng.choice(tokens)
            lines[i] = lines[i][:m.start()] + fragment + lines[i][m.end():]
        else:
            lines.insert(i, fragment + "\n")
    return "".join(lines)


def mutate_meaning(text: str, rng: random.Random) -> str | None:
    """A spec made wrong in a way that must draw a diagnostic: a unit swapped for one of another
    dimension, or an unknown field after a field. None if the text has no place for it."""
    lines = text.splitlines(keepends=True)
    if rng.random() < 0.5:
        spots = [(i, m) for i, line in enumerate(lines) if not line.lstrip().startswith(("//", "#"))
                 for m in UNIT_TOKEN.finditer(line.split("//")[0])]
        if not spots:
            return None
        i, m = rng.choice(spots)
        from .ir.units import parse_unit
        was = parse_unit(m.group(1))
        other = [u for u in UNITS if parse_unit(u) and was and parse_unit(u)[1] != was[1]]
        lines[i] = lines[i][:m.start()] + rng.choice(other) + lines[i][m.end():]
    else:
        spots = [i for i, line in enumerate(lines) if FIELD_LINE.match(line)]
        if not spots:
            return None
        i = rng.choice(spots)
        lines.insert(i + 1, FIELD_LINE.match(lines[i]).group(1) + "bogus_field_xyz = 1;\n")
    return "".join(lines)


def output_case(work: Path, n: int, spec: Path, dram_spec: Path, trace: Path, rng: random.Random):
    """(argv, the input that must stay unchanged) for an output path pimc must refuse."""
    fifo = work / f"fifo{n}"
    os.mkfifo(fifo)
    target = rng.choice(["input", "folder", "fifo"])
    if rng.random() < 0.5:
        out = {"input": spec, "folder": work, "fifo": fifo}[target]
        return ["run", str(spec), *SMALL_SYSTEMS.get(spec.name, []), "--max-work", "50000", "--timeline", str(out)], spec
    out = {"input": rng.choice([trace, dram_spec]), "folder": work, "fifo": fifo}[target]
    return ["dram", str(dram_spec), "--memory", "ddr4_3200", "--trace", str(trace), "--trace-format", "dramsim3",
            "--command-trace", str(out)], (out if target == "input" else trace)


class _Planted:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def damage_cache(cache: Path, rng: random.Random, marker: Path) -> None:
    """Damage or replace every entry of a private cache (a planted pickle writes `marker` if loaded)."""
    import pickle
    for entry in [p for p in cache.rglob("*") if p.is_file() and p.name != "key"]:
        kind = rng.choice(["pickle", "bytes", "half", "empty", "folder", "list"])
        body = entry.read_bytes()
        entry.unlink()
        if kind == "folder":
            entry.mkdir()
        else:
            entry.write_bytes({"pickle": pickle.dumps(_Planted(str(marker))), "bytes": rng.randbytes(64),
                               "half": body[:len(body) // 2], "empty": b"", "list": b"[]"}[kind])


def field_paths(spec: Path) -> list[str]:
    """Dotted `--set` paths of every field the spec (with its imports) declares."""
    diags = Diagnostics()
    loader = Loader(diags)
    if loader.load(spec) is None:
        return []
    scope = ScopeBuilder(loader.top_level_blocks(), diags).build_all()
    ev = Evaluator(scope, diags)
    out = []

    def walk(node):
        for name in node.fields:
            try:
                ev.member(node, name)
            except SpecError:
                continue
            out.append(f"{node.path}.{name}")
        for child in node.children:
            walk(child)
    for node in scope.values():
        walk(node)
    return sorted(set(out))


# ---- traces -----------------------------------------------------------------------------------------

def make_trace(memory, fmt: str, rng: random.Random, requests: int = 12) -> str:
    """A valid trace of `requests` requests for `memory`, to be mutated."""
    org = memory.organization
    lines, cycle = [], 0
    for _ in range(requests):
        cycle += rng.randrange(0, 50)
        write = rng.random() < 0.3
        if fmt == "dramsim3":
            lines.append(f"{rng.randrange(memory.capacity_bytes) & ~63:#x} {'WRITE' if write else 'READ'} {cycle}")
        elif rng.random() < 0.5:
            lines.append(f"{'ST' if write else 'LD'} {rng.randrange(memory.capacity_bytes) & ~63:#x}")
        else:
            second = org.pseudo_channels if memory.part.family.startswith("hbm") else org.ranks
            sizes = (org.channels, second, org.bank_groups, org.banks_per_group, org.rows, org.bursts_per_row)
            lines.append(f"{'W' if write else 'R'} " + ",".join(str(rng.randrange(n)) for n in sizes))
    if fmt == "ramulator":                   # one kind of line per trace
        kind = lines[0].split()[0] in ("LD", "ST")
        lines = [l for l in lines if (l.split()[0] in ("LD", "ST")) == kind]
    return "\n".join(lines) + "\n"


def mutate_trace(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    i = rng.randrange(len(lines))
    kind = rng.choice(["field", "field", "field", "delete", "swap", "insert", "truncate"])
    if kind == "field":
        parts = lines[i].split()
        parts[rng.randrange(len(parts))] = rng.choice(TRACE_VALUES)
        lines[i] = " ".join(parts)
    elif kind == "delete":
        del lines[i]
    elif kind == "swap":
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "insert":
        lines.insert(i, rng.choice(["", "# c", "READ", "0x0 READ", "R", "LD 0x0 0x0", "\t"]))
    else:
        return text[:rng.randrange(len(text) + 1)]
    return "\n".join(lines) + "\n"


# ---- the run ----------------------------------------------------------------------------------------

def fuzz(cases: int, seed: int, timeout: float = 10.0, on_case=None) -> list[Failure]:
    """Run `cases` seeded cases; the failures, each with the argv that reproduces it."""
    rng = random.Random(seed)
    failures = []
    with tempfile.TemporaryDirectory(prefix="pimc-fuzz-") as tmp:
        work = Path(tmp)
        corpus = spec_corpus(work)
        systems = [p for p in corpus if p.parent.name in ("systems", "reference") and p.name != "dram.pim"]
        dram_spec = work / "specs" / DRAM_SPEC
        memories = load_spec(dram_spec)[0].memories
        previous_cache = os.environ.get("PIMDSL_CACHE")
        paths = {}
        good_trace = work / "good.trace"
        good_trace.write_text(make_trace(memories["ddr4_3200"], "dramsim3", random.Random(seed)))
        for n in range(cases):
            kind = rng.choice(["spec", "spec", "trace", "set", "meaning", "meaning", "output", "cache"])
            must_say, kept, marker = False, None, None
            if kind == "meaning":
                original = rng.choice(systems)
                mutated = mutate_meaning(original.read_text(), rng)
                if mutated is None:
                    continue
                kind, target = "spec", original.with_name(f"mutant_{n}.pim")      # "spec": removed below
                target.write_text(mutated)
                argv, must_say = ["check", str(target)], True
            elif kind == "output":
                argv, kept = output_case(work, n, rng.choice([s for s in systems if s.name in SMALL_SYSTEMS]),
                                         dram_spec, good_trace, rng)
                kept = (kept, kept.read_bytes())
                must_say = True                       # exit 0 would mean the output was written
            elif kind == "cache":
                cache, marker = work / f"cache{n}", work / f"ran{n}"
                os.environ["PIMDSL_CACHE"] = str(cache)
                argv = ["check", str(rng.choice(systems))]
                judge(argv, timeout)                  # fills the cache
                damage_cache(cache, rng, marker)
            elif kind == "spec":
                original = rng.choice(corpus)
                target = original.with_name(f"mutant_{n}.pim")
                target.write_text(mutate_spec(original.read_text(), rng), errors="surrogateescape")
                argv = ["check", str(target)]
            elif kind == "trace":
                name, fmt = rng.choice(DRAM_MEMORIES), rng.choice(["dramsim3", "ramulator"])
                trace = work / f"t{n}.trace"
                text = mutate_trace(make_trace(memories[name], fmt, rng), rng)
                trace.write_bytes(text.encode("utf-8", "surrogateescape"))
                argv = ["dram", str(dram_spec), "--memory", name, "--trace", str(trace), "--trace-format", fmt]
            else:
                spec = rng.choice(systems)
                if spec not in paths:
                    paths[spec] = field_paths(spec)
                override = f"{rng.choice(paths[spec])}={rng.choice(VALUES)}"
                if spec.name in SMALL_SYSTEMS and rng.random() < 0.7:
                    argv = ["run", str(spec), *SMALL_SYSTEMS[spec.name], "--set", override, "--max-work", "50000"]
                else:
                    argv = ["show", str(spec), "--set", override]
            try:
                failure = judge(argv, timeout, must_say)
            finally:
                if kind == "cache":
                    os.environ.pop("PIMDSL_CACHE", None) if previous_cache is None else \
                        os.environ.__setitem__("PIMDSL_CACHE", previous_cache)
            if failure is None and kept is not None and kept[0].read_bytes() != kept[1]:
                failure = Failure(argv, "an output replaced an input", "")
            if failure is None and marker is not None and marker.exists():
                failure = Failure(argv, "a planted cache pickle ran", "")
            if failure is not None:
                failures.append(failure)
            if on_case is not None:
                on_case(n, failure)
            if kind == "spec":
                target.unlink()
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pimdsl.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000, help="how many cases (default 5000)")
    parser.add_argument("--seed", type=int, default=1, help="the seed: the same seed gives the same cases")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds a case may take (default 10)")
    args = parser.parse_args(argv)

    def report(n, failure):
        if failure is not None:
            print(failure, flush=True)
        elif (n + 1) % 100 == 0:
            print(f"{n + 1} cases", file=sys.stderr, flush=True)
    failures = fuzz(args.cases, args.seed, args.timeout, report)
    print(f"{args.cases} cases, {len(failures)} failure(s) (seed {args.seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
