"""Writing an op graph for inspection: JSON (node-link) and Graphviz DOT (jinja2 template)."""
from __future__ import annotations

import networkx as nx

from ..emit.templates import render


def graph_to_json(g: nx.DiGraph) -> dict:
    return {"graph": dict(g.graph),
            "nodes": [g.nodes[n]["op"].to_json() for n in nx.topological_sort(g)],
            "edges": [{"from": u, "to": v, "bytes": d["bytes"]} for u, v, d in g.edges(data=True)]}


def graph_to_dot(g: nx.DiGraph) -> str:
    return render("graph.dot.j2", graph=g.graph, ops=[g.nodes[n]["op"] for n in nx.topological_sort(g)],
                  edges=list(g.edges(data=True)))
