"""`pimc sweep`: run one spec over a grid of `--set` overrides, in parallel, into a CSV (and a plot).

    pimc sweep FILE [--system NAME] [--set PATH=VALUE ...] --grid PATH=V1,V2,... [--grid ...]
               -o OUT.csv [--plot OUT.png --x COL --y COL[,COL...] [--series COL] [--logy]]
               [-j N | --scheduler tcp://HOST:PORT | --cluster CLUSTER.yaml] [--exact]

The grid is the cartesian product of the `--grid` axes, in the order given (the last axis varies
fastest); the fixed `--set` values apply to every point. A grid value goes through the same
override machinery as `--set`, so units work (`--grid memory.lp5x.channels=4,8`,
`--grid "memory.m.capacity=64 MB,128 MB"`); commas inside brackets do not split a value.
`START:STOP:STEP` is an integer range with STOP included: `--grid workload.input_len=64:192:32`
is 64, 96, 128, 160, 192. Each point is `pimc run FILE --set ... --json` in a worker process
(`-j N`, default one per CPU), or on a Dask cluster: `--scheduler tcp://HOST:PORT` (a running
scheduler) or `--cluster FILE` (a dask-jobqueue SLURM/PBS/... cluster, see executors.py); the CSV is
the same wherever the points ran. `--exact` times every PIM command, as `pimc run --exact`.
A progress bar shows on stderr when it is a terminal.

OUT.csv has one row per point, in grid order: the grid paths first (named as given, e.g.
`workload.input_len`), then `ok` (true/false) and `error` (the first line of a failed point's
diagnostic), then every metric of `pimc run --json` with nested objects flattened by dots
(`memory_bytes.weights`, `utilization.pim:s24_lpddr5x`, `breakdown_s.decode.total`); lists are
JSON text. The columns are the union over all points, in first-seen order.

`--plot OUT.png` draws column `--x` against each `--y` column (comma-separated), one line per
value of `--series` when given, with a log y axis under `--logy`; the format follows the suffix
(png, pdf, svg, ...). Example:

    pimc sweep PHONE_SPEC.pim --grid workload.input_len=64:512:64 \\
        --grid mapping.strategy=c_gemm,owr -o sweep.csv \\
        --plot ttft.png --x workload.input_len --y ttft_s --series mapping.strategy --logy

Exit 0 when every point ran. Exit 1 when some points failed (the CSV is written anyway, with
their rows, and the failed points are listed on stderr), when the spec does not load with the
fixed `--set` values alone (nothing is written), or when a plot column does not exist (the CSV
is written). Exit 2 for usage errors. Files are written atomically.
"""
from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import math
import os
import re
import shlex
import sys
from contextlib import redirect_stderr

from ..emit.atomic import atomic_file
from ..frontend.diagnostics import did_you_mean, render_error
from ..ir.errors import PimdslError
from ..budget import DEFAULT_MAX_WORK
from ..ir.errors import CompileError
from .loading import add_allow_outside
from .system import add_max_work, load_system, output_file, report_compile_error

MAX_GRID_POINTS = 10_000              # each point is a whole `pimc run`
_RANGE = re.compile(r"^\s*(-?\d+)\s*:\s*(-?\d+)\s*:\s*(-?\d+)\s*$")


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="run a spec over a grid of --set overrides into a CSV (and a plot)",
                       description="Run FILE at every point of the grid (the cartesian product of the --grid "
                                   "axes) in parallel; write one CSV row per point with every metric of "
                                   "`pimc run --json`, and optionally plot chosen columns.")
    p.add_argument("file", metavar="FILE", help="spec file with a system block")
    p.add_argument("--system", metavar="NAME", help="system to use when the file declares several")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a spec value at every point, with units (repeatable)")
    p.add_argument("--grid", dest="grid", action="append", type=_grid_axis, required=True,
                   metavar="PATH=V1,V2,...",
                   help="a grid axis: values separated by commas, or START:STOP:STEP (integers, STOP "
                        "included); repeat for more axes")
    p.add_argument("-o", "--output", required=True, metavar="OUT.csv", type=output_file, help="the CSV to write")
    p.add_argument("--plot", metavar="OUT.png", type=output_file, help="also plot --y against --x into this image")
    p.add_argument("--x", metavar="COL", help="the plot's x column")
    p.add_argument("--y", metavar="COL[,COL...]", help="the plot's y column(s), comma-separated")
    p.add_argument("--series", metavar="COL", help="one line per distinct value of this column")
    p.add_argument("--logy", action="store_true", help="logarithmic y axis")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="worker processes (default: one per CPU)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                       help="run the points on this running Dask scheduler (needs pimdsl[cluster])")
    where.add_argument("--cluster", metavar="CLUSTER.yaml",
                       help="start a dask-jobqueue cluster (SLURM, PBS, ...) from this file and run the points there")
    p.add_argument("--exact", action="store_true", help="time every PIM command (no steady-state skipping)")
    add_max_work(p)
    add_allow_outside(p)
    p.set_defaults(usage_error=p.error)


def _grid_axis(text: str) -> tuple[str, list[str]]:
    """`PATH=V1,V2,...` -> (PATH, [V1, V2, ...]), ranges expanded; argparse reports what is wrong."""
    path, eq, values = text.partition("=")
    path = path.strip()
    if not eq or not path:
        raise argparse.ArgumentTypeError(f"'{text}' is not PATH=V1,V2,... (e.g. workload.batch=1,2,4)")
    out = []
    for item in _split_values(values):
        if not item:
            raise argparse.ArgumentTypeError(f"'{text}' has an empty value (values are separated by commas)")
        match = _RANGE.match(item)
        if match is None:
            out.append(item)
            continue
        start, stop, step = map(int, match.groups())
        if step == 0 or (stop - start) * step < 0:
            raise argparse.ArgumentTypeError(
                f"range '{item}' of {path} is empty: START:STOP:STEP needs STEP != 0 going from START "
                f"towards STOP (e.g. 64:192:32)")
        count = (stop - start) // step + 1        # counted before expanding: 1:1000000000:1 is a billion points
        if len(out) + count > MAX_GRID_POINTS:
            raise argparse.ArgumentTypeError(_too_many(f"--grid {path}", len(out) + count))
        out.extend(str(v) for v in range(start, stop + (1 if step > 0 else -1), step))
    return path, out


def _too_many(what: str, points: int) -> str:
    return (f"{what} would have {points:,} points, past the limit of {MAX_GRID_POINTS:,}; "
            "use a coarser STEP or split the sweep")


def _split_values(text: str) -> list[str]:
    """Split on commas outside brackets, so that a list value such as `[a, b]` stays whole."""
    items, depth, current = [], 0, []
    for ch in text:
        depth += (ch in "[(") - (ch in "])")
        if ch == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    items.append("".join(current).strip())
    return items


def run_point(file: str, system: str | None, overrides: list[str], exact: bool,
              max_work: float = DEFAULT_MAX_WORK, allow_outside: bool = False) -> tuple[bool, dict | str]:
    """One grid point, as `pimc run --json` would: (True, report) or (False, its diagnostic text)."""
    from ..driver import run_loaded
    from ..serving.requests import RequestsError
    captured = io.StringIO()
    with redirect_stderr(captured):
        try:
            loaded, diags = load_system(argparse.Namespace(file=file, system=system, overrides=overrides,
                                                           max_work=max_work, allow_outside=allow_outside))
            if loaded is None:
                return False, captured.getvalue()
            try:
                return True, run_loaded(loaded, fast=not exact).report      # as `pimc run` (driver.py)
            except CompileError as exc:
                report_compile_error(exc, diags, file)
                return False, captured.getvalue()
            except RequestsError as exc:
                print(exc.render(), file=sys.stderr)
                return False, captured.getvalue()

        except PimdslError as exc:                # a problem of the spec found late: this point's diagnostic
            print(render_error(exc), file=sys.stderr)
            return False, captured.getvalue()
        except Exception as exc:                  # a bug in pimc: one failed point, not a lost sweep
            if os.environ.get("PIMDSL_DEBUG"):
                raise
            return False, f"pimc: internal error: {type(exc).__name__}: {exc}"


def run(args) -> int:
    axes = args.grid
    _check_usage(args, axes)
    # the spec must load with the fixed values alone, or every point would fail the same way
    base, _ = load_system(argparse.Namespace(file=args.file, system=args.system, overrides=args.overrides,
                                             max_work=args.max_work, allow_outside=args.allow_outside))
    if base is None:
        return 1
    points = [[f"{path}={value}" for (path, _), value in zip(axes, combo)]
              for combo in itertools.product(*(values for _, values in axes))]
    from .executors import ClusterError           # (with its process pool: not imported by other commands)
    try:
        results = _run_all(args, points)
    except ClusterError as exc:
        print(f"pimc sweep: error: {exc}", file=sys.stderr)
        return 1

    header, rows = _table([path for path, _ in axes], points, results)
    try:
        with atomic_file(args.output, newline="") as out:
            _write_csv(out, header, rows)
    except OSError as exc:
        print(f"pimc sweep: error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    failed = [(point, text) for point, (ok, text) in zip(points, results) if not ok]
    print(f"wrote {args.output}: {len(points)} point(s), {len(points) - len(failed)} ok, {len(failed)} failed")
    status = 0
    if failed:
        status = 1
        print(f"pimc sweep: {len(failed)} of {len(points)} point(s) failed:", file=sys.stderr)
        for point, text in failed:
            print(f"  {' '.join(point)}: {_first_error(text)}", file=sys.stderr)
        again = ["pimc", "run", args.file, *([f"--system={args.system}"] if args.system else []),
                 *(f"--set={o}" for o in [*args.overrides, *failed[0][0]])]
        print(f"  see the first in full with: {shlex.join(again)}", file=sys.stderr)
    if args.plot:
        status = _plot(args, header, rows) or status
    return status


def _check_usage(args, axes) -> None:
    points = math.prod(len(values) for _, values in axes)
    if points > MAX_GRID_POINTS:
        args.usage_error(_too_many("the grid", points))
    paths = [path for path, _ in axes]
    for path in paths:
        if paths.count(path) > 1:
            args.usage_error(f"--grid {path} is given twice; put all its values in one --grid")
    fixed = {o.partition("=")[0].strip() for o in args.overrides}
    for path in paths:
        if path in fixed:
            args.usage_error(f"{path} is both --set and --grid; drop the --set")
    if args.jobs < 1:
        args.usage_error("-j needs at least 1 worker")
    plot_options = [name for name in ("x", "y", "series", "logy") if getattr(args, name)]
    if not args.plot:
        if plot_options:
            args.usage_error(f"--{plot_options[0]} needs --plot OUT.png")
        return
    if not args.x or not args.y:
        args.usage_error("--plot needs --x COL and --y COL[,COL...]")
    _pyplot()
    from matplotlib.backend_bases import FigureCanvasBase
    supported = FigureCanvasBase.get_supported_filetypes()
    if _plot_format(args.plot) not in supported:
        args.usage_error(f"--plot {args.plot}: cannot write '{_plot_format(args.plot)}' images; use one of "
                         + ", ".join(f".{s}" for s in sorted(supported)))


def _run_all(args, points: list[list[str]]) -> list[tuple[bool, dict | str]]:
    """Every point's result, in grid order, whatever order they finish in."""
    results: list = [None] * len(points)
    jobs = min(args.jobs, len(points), 4 * (os.cpu_count() or 1))     # -j 100000 must not fork that many
    call = lambda point: (args.file, args.system, [*args.overrides, *point], args.exact, args.max_work,
                          args.allow_outside)
    remote = args.scheduler is not None or args.cluster is not None
    if jobs == 1 and not remote:                  # no pool: same worker, easier to debug
        bar, done = _progress(len(points))
        try:
            for i, point in enumerate(points):
                results[i] = run_point(*call(point))
                done()
        finally:
            if bar is not None:
                bar.stop()
        return results
    from concurrent.futures import as_completed

    from .executors import open_executor
    with open_executor(jobs, args.scheduler, args.cluster) as pool:
        futures = {pool.submit(run_point, *call(point)): i for i, point in enumerate(points)}
        bar, done = _progress(len(points))        # after the fork: the bar's thread stays in the parent
        try:
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                done()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            if bar is not None:
                bar.stop()
    return results


def _progress(total: int):
    """A progress bar on stderr over the points when stderr is a terminal: (bar, advance-by-one)."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import Progress
    # bound to the real stderr now: a point run in this process redirects sys.stderr while it runs
    bar = Progress(console=Console(file=sys.stderr), transient=True)
    task = bar.add_task("sweep points", total=total)
    bar.start()
    return bar, lambda: bar.advance(task)


def _table(grid_paths: list[str], points, results) -> tuple[list[str], list[dict]]:
    header = [*grid_paths, "ok", "error"]
    reserved, seen = set(header), set(header)
    rows = []
    for point, (ok, result) in zip(points, results):
        row = {path: value for path, value in (o.split("=", 1) for o in point)}
        row["ok"] = "true" if ok else "false"
        row["error"] = "" if ok else _first_error(result)
        if ok:
            for key, value in _flatten(result):
                if key in reserved:
                    continue                      # a grid path or ok/error keeps its column
                if key not in seen:
                    seen.add(key)
                    header.append(key)
                row[key] = value
        rows.append(row)
    return header, rows


def _flatten(report: dict, prefix: str = ""):
    for key, value in report.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, f"{name}.")
        elif isinstance(value, (list, tuple)):
            yield name, json.dumps(value)
        elif isinstance(value, bool) or value is None:
            yield name, json.dumps(value) if value is not None else ""
        else:
            yield name, value


def _first_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if " error: " in f" {line}"]
    return (errors or lines or ["failed without a diagnostic"])[0]


def _write_csv(out, header: list[str], rows: list[dict]) -> None:
    writer = csv.DictWriter(out, fieldnames=header, restval="")
    writer.writeheader()
    writer.writerows(rows)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _plot_format(path: str) -> str:
    return os.path.splitext(path)[1].lstrip(".").lower() or "png"


def _plot(args, header: list[str], rows: list[dict]) -> int:
    ys = [y.strip() for y in args.y.split(",") if y.strip()]
    for option, column in [("--x", args.x), *(("--y", y) for y in ys), ("--series", args.series)]:
        if column is not None and column not in header:
            print(f"pimc sweep: error: {option} {column}: no such column in {args.output}\n"
                  f"  hint: {did_you_mean(column, header, 'columns')}\n"
                  f"  the columns: {', '.join(header)}", file=sys.stderr)
            return 1
    good = [row for row in rows if row["ok"] == "true"]
    for y in ys:
        bad = [row[y] for row in good if row.get(y, "") != "" and _number(row[y]) is None]
        if bad:
            print(f"pimc sweep: error: --y {y}: not a number ('{bad[0]}'); plot a numeric column", file=sys.stderr)
            return 1
    numeric_x = all(_number(row.get(args.x, "")) is not None for row in good)
    x_of = (lambda row: _number(row[args.x])) if numeric_x else (lambda row: row[args.x])
    groups: dict[str | None, list[dict]] = {}
    for row in good:
        groups.setdefault(row.get(args.series, "") if args.series else None, []).append(row)

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for y in ys:
        for value, group in groups.items():
            points = [(x_of(row), _number(row[y])) for row in group if row.get(y, "") != ""]
            if numeric_x:
                points.sort(key=lambda p: p[0])
            label = ", ".join(part for part in (y if len(ys) > 1 else "",
                                                f"{args.series}={value}" if args.series else "") if part)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label or y)
    ax.set_xlabel(args.x)
    ax.set_ylabel(", ".join(ys))
    ax.set_title(os.path.basename(args.file), fontsize="medium")
    if args.logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    try:
        with atomic_file(args.plot, "wb") as out:
            fig.savefig(out, format=_plot_format(args.plot))
    except OSError as exc:
        print(f"pimc sweep: error: cannot write {args.plot}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    finally:
        plt.close(fig)
    print(f"wrote {args.plot}")
    return 0


def _number(text) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None
