"""`pimc`: the command-line driver (contract in ARCHITECTURE.md).

Exit codes: 0 success, 1 diagnostics (bad input), 2 usage errors. Bad input
never shows a Python traceback; an internal error says so and exits 3.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from ..ir.errors import PimdslError
from .. import __version__
from ..frontend.resources import specs_dir
from ..ir.files import forget_inputs
from . import cache, check, compile as compile_cmd, dram, execute, explain, kernel, run as run_cmd, sweep
from .loading import NothingToDo, add_allow_outside, load_reported


def version_text() -> str:
    return f"pimc {__version__} (bundled specs: {specs_dir()})"


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a spec value by its dotted path, with units (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    # raw text: `--version` names a folder, printed whole on one line, never wrapped at the terminal width
    parser = argparse.ArgumentParser(prog="pimc", description="pimdsl: describe, compile and time PIM systems",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=version_text(),
                        help="print pimc's version and where its bundled specs are read from")
    sub = parser.add_subparsers(dest="command", required=True)
    check.add_parser(sub)
    show = sub.add_parser("show", help="print the elaborated IR of a spec")
    show.add_argument("file", metavar="FILE")
    show.add_argument("--json", action="store_true", help="print the IR as JSON")
    _add_set(show)
    add_allow_outside(show)
    dram.add_parser(sub)
    run_cmd.add_parser(sub)
    compile_cmd.add_parser(sub)
    sweep.add_parser(sub)
    execute.add_parser(sub)
    kernel.add_parser(sub)
    explain.add_parser(sub)
    cache.add_parser(sub)
    return parser


def cmd_show(args) -> int:
    from ..emit.templates import render
    from .show import spec_to_json
    spec, _ = load_reported(args.file, args.overrides, args.allow_outside)
    if spec is None:
        return 1
    if args.json:
        print(json.dumps(spec_to_json(spec), indent=2))
    else:
        print(render("show.txt.j2", spec=spec).rstrip("\n"))
    return 0


COMMANDS = {"check": check.run, "show": cmd_show, "dram": dram.run, "run": run_cmd.run,
            "compile": compile_cmd.run, "sweep": sweep.run, "execute": execute.run,
            "kernel": kernel.run, "explain": explain.run, "cache": cache.run}


def _terminated(signum, frame):
    raise KeyboardInterrupt        # unwind as Ctrl-C does, so that temporary outputs are removed


def main(argv: list[str] | None = None) -> int:
    forget_inputs()                              # this command's inputs only (checked by output paths)
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "timeline_layer", None) is not None and not args.timeline:
        parser.error("--timeline-layer N keeps one layer of the --timeline FILE; give --timeline too")
    previous = signal.signal(signal.SIGTERM, _terminated) if threading.current_thread() is threading.main_thread() else None
    try:
        return COMMANDS[args.command](args)
    except NothingToDo as exc:
        print(exc, file=sys.stderr)
        return 0
    except KeyboardInterrupt:
        print("pimc: interrupted", file=sys.stderr)
        return 130
    except PimdslError as exc:                   # a problem of the input found late: still a diagnostic
        from ..frontend.diagnostics import render_error
        print(render_error(exc), file=sys.stderr)
        return 1
    except BrokenPipeError:                       # `pimc run ... | head`: the reader left; stay quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:                      # a bug in pimc, not in the spec
        if os.environ.get("PIMDSL_DEBUG"):
            raise
        print(f"pimc: internal error: {type(exc).__name__}: {exc}\n"
              "  this is a bug in pimc; set PIMDSL_DEBUG=1 for the traceback and report it", file=sys.stderr)
        return 3
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
