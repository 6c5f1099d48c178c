"""The house drawn from its imports (every `import` in pimdsl, those inside functions included): no
circle, and the run loops one room each. A loop's package (`pimdsl/loops/<loop>/`) imports no other
loop; the shared `loops/model_layers` imports no loop; the stages below the loops (records and IR,
front end, graph, passes, lowering, interpreter, serving, sparsity, emit) import no loop, no driver
and no command; and the IR imports nothing but the IR and the caches beside it."""
import ast
from pathlib import Path

import networkx as nx

from .conftest import ROOT

LOOPS = "pimdsl.loops"
SHARED = f"{LOOPS}.model_layers"
BELOW_LOOPS = ("pimdsl.ir", "pimdsl.frontend", "pimdsl.graph", "pimdsl.passes", "pimdsl.lowering",
               "pimdsl.interpreter", "pimdsl.serving", "pimdsl.sparsity", "pimdsl.emit",
               "pimdsl.bounded_cache", "pimdsl.cache_home", "pimdsl.jit_cache")
BOTTOM = ("pimdsl.ir", "pimdsl.bounded_cache", "pimdsl.cache_home", "pimdsl.jit_cache")
ABOVE_LOOPS = ("pimdsl.loops", "pimdsl.driver", "pimdsl.cli", "pimdsl.validation", "pimdsl.unread")


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's __init__) for every module under root/pimdsl."""
    out = {}
    for path in (root / "pimdsl").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def import_graph(root: Path) -> nx.DiGraph:
    """module -> each pimdsl module it imports (a name imported from a package counts as its module
    when it is one, else as the package)."""
    mods = modules(root)
    graph = nx.DiGraph()
    for name, (path, package) in mods.items():
        graph.add_node(name)
        here = name.split(".") if package else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in targets:
                while target not in mods and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in mods and target != name:
                    graph.add_edge(name, target)
    return graph


def within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def loop_of(name: str) -> str | None:
    """The loop package a module lies in (`model_layers` for the shared one), None outside them."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and within(name, LOOPS) else None


def wrong_imports(graph: nx.DiGraph) -> list[str]:
    wrong = []
    for a, b in graph.edges:
        if loop_of(a) and loop_of(b) and loop_of(a) != loop_of(b) and "model_layers" not in (loop_of(a), loop_of(b)):
            wrong.append(f"{a} -> {b}: one loop's room imports another's")
        if loop_of(a) == "model_layers" and within(b, LOOPS) and loop_of(b) != "model_layers":
            wrong.append(f"{a} -> {b}: the shared model_layers imports a loop")
        if within(a, *BELOW_LOOPS) and within(b, *ABOVE_LOOPS):
            wrong.append(f"{a} -> {b}: a stage below the loops imports one above it")
        if within(a, LOOPS) and within(b, "pimdsl.driver", "pimdsl.cli", "pimdsl.validation"):
            wrong.append(f"{a} -> {b}: a loop imports the driver, a command or a validation")
        if within(a, "pimdsl.ir") and not within(b, *BOTTOM):
            wrong.append(f"{a} -> {b}: the IR imports something above it")
    return sorted(wrong)


def circles(graph: nx.DiGraph) -> list[str]:
    """Each circle once, from its first module in sorted order."""
    out = []
    for cycle in nx.simple_cycles(graph):
        start = cycle.index(min(cycle))
        out.append(" -> ".join(cycle[start:] + cycle[:start]))
    return sorted(out)


def test_no_import_circle():
    assert circles(import_graph(ROOT)) == []


def test_imports_run_only_downward_and_each_loop_is_one_room():
    graph = import_graph(ROOT)
    assert wrong_imports(graph) == []
    rooms = {loop_of(m) for m in graph if loop_of(m)}
    assert rooms == {"step", "pipelined_loading", "sub_batch_serving", "hot_cold_offload", "iteration_serving",
                     "model_layers"}
    flat = [p.name for p in (ROOT / "pimdsl" / "loops").glob("*.py")]
    assert flat == ["__init__.py"]                      # every loop module lives in its loop's room


def test_the_checks_find_a_circle_and_each_kind_of_wrong_import(tmp_path):
    """The checks above on a made-up package that breaks every rule once."""
    files = {
        "pimdsl/__init__.py": "", "pimdsl/ir/__init__.py": "", "pimdsl/loops/__init__.py": "",
        "pimdsl/ir/records.py": "from ..graph import build\n",
        "pimdsl/graph/__init__.py": "", "pimdsl/graph/build.py": "from ..loops.a import run\n",
        "pimdsl/loops/a/__init__.py": "def run():\n    from ..b import helper\n",
        "pimdsl/loops/b/__init__.py": "from ..a import run\nhelper = 1\n",
        "pimdsl/loops/model_layers/__init__.py": "from ..a import run\n",
        "pimdsl/cli/__init__.py": "", "pimdsl/loops/a/cmd.py": "from ...cli import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    assert circles(graph) == ["pimdsl.loops.a -> pimdsl.loops.b"]
    assert wrong_imports(graph) == [
        "pimdsl.graph.build -> pimdsl.loops.a: a stage below the loops imports one above it",
        "pimdsl.ir.records -> pimdsl.graph.build: the IR imports something above it",
        "pimdsl.loops.a -> pimdsl.loops.b: one loop's room imports another's",
        "pimdsl.loops.a.cmd -> pimdsl.cli: a loop imports the driver, a command or a validation",
        "pimdsl.loops.b -> pimdsl.loops.a: one loop's room imports another's",
        "pimdsl.loops.model_layers -> pimdsl.loops.a: the shared model_layers imports a loop",
    ]
