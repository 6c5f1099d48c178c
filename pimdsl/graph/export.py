"""Writing an op graph for inspection: JSON (node-link) and Graphviz DOT (jinja2 template)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..emit.templates import render

if TYPE_CHECKING:            # imported where a graph is written: every pimc command loads this module
    import networkx as nx


def graph_to_json(g: nx.DiGraph) -> dict:
    import networkx as nx
    return {"graph": dict(g.graph),
            "nodes": [g.nodes[n]["op"].to_json() for n in nx.topological_sort(g)],
            "edges": [{"from": u, "to": v, "bytes": d["bytes"]} for u, v, d in g.edges(data=True)]}


def graph_to_dot(g: nx.DiGraph) -> str:
    import networkx as nx
    return render("graph.dot.j2", graph=g.graph, ops=[g.nodes[n]["op"] for n in nx.topological_sort(g)],
                  edges=list(g.edges(data=True)))
