"""Elaboration of model, mapping, workload and system blocks."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..ir import units as U
from ..ir.files import InputFileError
from ..ir.units import Quantity
from ..ir.workload import DATA_KINDS, DTYPE_BYTES, Mapping, Model, OpDecl, System, TensorDecl, Workload
from .diagnostics import SpecError, did_you_mean
from .elaborate_hardware import DTYPES
from .loader import library_path
from .hf_config import ConfigError, load_hf_config
from .nodes import Node
from .reader import MISSING, Reader
from .syntax import ListExpr

ACTIVATIONS = ("gelu", "relu", "silu")
OP_KINDS = ("gemv", "gemm", "add", "mul", "softmax", "layernorm", "rmsnorm", "gelu", "relu", "silu",
            "attention", "embedding", "copy")
PHASES = ("prefill", "decode")


class ModelBuilder:
    def __init__(self, el):
        self.el = el
        self.ev = el.ev
        self.diags = el.diags

    def model(self, node: Node) -> Model:
        r = Reader(self.ev, node)
        imported: dict = {}
        source = r.string("hf_config", None)
        if source is not None:
            try:
                here = Path(node.span.path).parent
                path = self.el.data.resolve(source, here, "HuggingFace config", ".json", tuple(library_path(here)))
                imported = load_hf_config(path)
            except (ConfigError, InputFileError) as exc:
                r.fail(exc.message, "hf_config", exc.hint or "give the path of a HuggingFace config.json, relative to this file")
                raise SpecError(str(exc)) from None      # the missing shape fields follow from this one
        arch = r.choice("architecture", ("decoder", "encoder", "graph"), imported.get("architecture", "decoder"))
        if arch == "graph":
            return self._graph(node, r, arch)

        def whole(name, default=MISSING):
            return r.integer(name, imported.get(name, default))

        layers, hidden, heads = whole("layers"), whole("hidden"), whole("heads")
        kv_heads = whole("kv_heads", heads)
        ffn = whole("ffn")
        # Encoders such as ViT embed patches, not tokens: no vocabulary.
        vocab = r.integer("vocab", imported.get("vocab", MISSING if arch == "decoder" else 0), minimum=0)
        head_dim_given = r.has("head_dim") or "head_dim" in imported
        if not head_dim_given and hidden and heads and hidden % heads:
            r.fail(f"hidden = {hidden} is not divisible by heads = {heads}", "hidden" if r.has("hidden") else None,
                   "give head_dim explicitly, or fix hidden or heads")
        head_dim = whole("head_dim", (hidden // heads) if hidden and heads else 1)
        if heads and kv_heads and heads % kv_heads:
            r.fail(f"heads = {heads} is not divisible by kv_heads = {kv_heads}",
                   "kv_heads" if r.has("kv_heads") else None, "grouped-query attention needs heads = k * kv_heads")
        gated = r.flag("gated_ffn", imported.get("gated_ffn", False))
        tied = r.flag("tied_embeddings", imported.get("tied_embeddings", False))
        dtype = r.choice("dtype", DTYPES, imported.get("dtype", "fp16"))
        parallel = r.flag("parallel_attention", imported.get("parallel_attention", False))
        norms = r.integer("parallel_norms", imported.get("parallel_norms", 1))
        if norms not in (1, 2):
            r.fail(f"parallel_norms = {norms}: a parallel block has 1 or 2 norms", "parallel_norms",
                   "1: attention and FFN share the norm (GPT-J); 2: one norm per branch (GPT-NeoX)")
        elif norms == 2 and r.has("parallel_norms") and not parallel:
            r.fail("parallel_norms is set but parallel_attention is false", "parallel_norms",
                   "set `parallel_attention = true;`, or drop parallel_norms")
        params = self.parameter_count(layers or 0, hidden or 0, heads or 0, kv_heads or 0, head_dim or 0,
                                      ffn or 0, vocab or 0, gated, tied)
        model = Model(
            name=node.name, architecture=arch, source=source, layers=layers, hidden=hidden, heads=heads,
            kv_heads=kv_heads, head_dim=head_dim, ffn=ffn, vocab=vocab,
            max_seq_len=whole("max_seq_len", 2048), activation=r.choice("activation", ACTIVATIONS,
                                                                        imported.get("activation", "gelu")),
            gated_ffn=gated, norm=r.choice("norm", ("layernorm", "rmsnorm"), imported.get("norm", "layernorm")),
            tied_embeddings=tied, dtype=dtype, parameters=params,
            weight_bytes=int(params * DTYPE_BYTES[dtype or "fp16"]), tensors=(), ops=(), params={},
            span=node.span, parallel_attention=parallel, parallel_norms=norms if norms in (1, 2) else 1)
        r.finish()
        return model

    @staticmethod
    def parameter_count(layers, hidden, heads, kv_heads, head_dim, ffn, vocab, gated, tied) -> int:
        """Weights of the linear layers and embeddings (norms and biases are under 0.1% and left out)."""
        attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
        mlp = (3 if gated else 2) * hidden * ffn
        embeddings = vocab * hidden * (1 if tied else 2)
        return layers * (attention + mlp) + embeddings

    def _graph(self, node: Node, r: Reader, arch: str) -> Model:
        params = {}
        for name in node.lets:
            try:
                value = self.ev.member(node, name)
            except SpecError:
                continue
            if isinstance(value, Quantity) and value.dims == U.NONE:
                params[name] = value.value
        tensors, ops, weight_bytes, count = [], [], 0, 0
        for t in r.blocks("tensor"):
            tr = Reader(self.ev, t)
            shape = self._shape(tr)
            dtype = tr.choice("dtype", DTYPES, "fp16")
            role = tr.choice("role", ("input", "weight", "output", "activation", "kv_cache"), "activation")
            tensors.append(TensorDecl(t.name or "?", shape, dtype, role, t.span))
            if role == "weight":
                elements = 1
                for d in shape:
                    elements *= d
                count += elements
                weight_bytes += int(elements * DTYPE_BYTES[dtype])
            tr.finish()
        names = {t.name for t in tensors}
        for o in r.blocks("op"):
            orr = Reader(self.ev, o)
            inputs = orr.symbols("inputs")
            for i in inputs or ():
                if i not in names:
                    orr.fail(f"op '{o.name}' reads '{i}', which is no tensor or op of this model", "inputs",
                             did_you_mean(i, names, "tensors"))
            ops.append(OpDecl(o.name or "?", orr.choice("op", OP_KINDS), inputs or (),
                              orr.choice("output", tuple(sorted(names)) or ("out",), None) or o.name, o.span))
            names.add(o.name)
            orr.finish()
        if not ops:
            r.fail(f"graph model '{node.name}' has no `op` blocks", None, "add e.g. `op y { op = gemv; inputs = [W, x]; }`")
        model = Model(node.name, arch, None, 0, 0, 0, 0, 0, 0, 0, 0, "gelu", False, "layernorm", False,
                      r.choice("dtype", DTYPES, "fp16"), count, weight_bytes, tuple(tensors), tuple(ops), params,
                      node.span)
        r.finish()
        return model

    def _shape(self, r: Reader) -> tuple[int, ...]:
        stmt = r.node.fields.get("shape")
        r.asked.add("shape")
        if stmt is None:
            r.fail(f"tensor '{r.node.name}' needs a `shape = [...]`")
            return ()
        items = stmt.expr.items if isinstance(stmt.expr, ListExpr) else (stmt.expr,)
        out = []
        for item in items:
            try:
                q = self.ev.quantity(item, r.node)
            except SpecError:
                continue
            if q.dims != U.NONE or not q.is_integer() or q.value < 1:
                self.diags.error("a shape holds positive whole numbers", item.span)
                continue
            out.append(int(q.value))
        return tuple(out)

    def mapping(self, node: Node) -> Mapping:
        r = Reader(self.ev, node)
        strategies = r.symbols("strategies", default=())
        strategy = r.choice("strategy", strategies, None) if strategies else None
        if not strategies:
            r.asked.add("strategy")
            stmt = node.fields.get("strategy")
            strategy = stmt.expr.parts[0] if stmt is not None and hasattr(stmt.expr, "parts") else "default"
        placement, placement_spans = {}, {}
        for phase in PHASES:
            sub = r.block(phase)
            if sub is not None:
                pr = Reader(self.ev, sub)
                placement[phase] = {name: pr.choice(name, self._devices()) for name in sub.fields}
                placement_spans.update({(phase, name): stmt.span for name, stmt in sub.fields.items()})
                pr.finish()
        data, data_spans = {}, {}
        data_node = r.block("data")
        if data_node is not None:
            dr = Reader(self.ev, data_node)
            memories = tuple(sorted(n for n, g in self.ev.globals.items() if g.kind == "memory"))
            for kind in DATA_KINDS:
                if dr.has(kind):
                    data[kind], data_spans[kind] = dr.choice(kind, memories), data_node.fields[kind].span
            dr.finish()
        params, param_spans, param_dims = {}, {}, {}
        params_node = r.block("params")
        if params_node is not None:
            pr = Reader(self.ev, params_node)
            param_spans = {name: pr.span(name) for name in params_node.fields}
            for name, value in pr.open_fields().items():
                params[name] = value.value if isinstance(value, Quantity) else getattr(value, "name", value)
                if isinstance(value, Quantity):
                    param_dims[name] = value.dims
            for name, stmt in params_node.fields.items():
                if isinstance(params.get(name), Node):
                    params[name] = params[name].name
            pr.finish(open_schema=True)
        out = Mapping(node.name, strategy, strategies, placement, params, node.span, param_spans,
                      loop=(r.symbols("loop", default=("step",)) or ("step",))[0],
                      placement_spans=placement_spans, strategy_spans=self._strategy_spans(node),
                      data=data, data_spans=data_spans, param_dims=param_dims)
        r.finish()
        return out

    @staticmethod
    def _strategy_spans(node: Node) -> dict:
        """Where each strategy name is written: its item of `strategies = [...]`, else `strategy`."""
        out = {}
        for key in ("strategy", "strategies"):
            stmt = node.fields.get(key)
            if stmt is not None:
                items = stmt.expr.items if isinstance(stmt.expr, ListExpr) else (stmt.expr,)
                out.update({i.parts[0]: i.span for i in items if getattr(i, "parts", None) and i.parts[0] not in out})
        return out

    def _devices(self) -> tuple[str, ...]:
        kinds = ("cpu", "gpu", "npu", "memory", "pim_unit")
        return tuple(sorted(n for n, g in self.ev.globals.items() if g.kind in kinds)) + ("pim", "host")

    def workload(self, node: Node) -> Workload:
        r = Reader(self.ev, node)
        out = Workload(
            name=node.name, batch=r.integer("batch", 1), input_len=r.integer("input_len", 1),
            output_len=r.integer("output_len", 1), requests_csv=r.string("requests_csv", None),
            dataset=r.choice("dataset", ("sharegpt", "alpaca", "fixed"), None),
            distribution=r.choice("distribution", ("fixed", "normal", "uniform", "exponential", "gamma"), "fixed"),
            mean_input_len=r.number("mean_input_len", None), mean_output_len=r.number("mean_output_len", None),
            requests=r.integer("requests", 1), seed=r.integer("seed", 0, minimum=0),
            kv_admission=r.choice("kv_admission", ("reserve", "on_demand"), "reserve"), span=node.span,
            memory_limit_bytes=r.bytes("memory_limit", None),
            std_input_len=r.number("std_input_len", None), std_output_len=r.number("std_output_len", None))
        if out.requests_csv is not None and not r.failed:
            try:
                found = self.el.data.resolve(out.requests_csv, Path(node.span.path).parent, "requests CSV", ".csv")
                out = replace(out, requests_file=str(found))
            except InputFileError as exc:
                r.fail(exc.message, "requests_csv", exc.hint)
        r.finish()
        return out

    def system(self, node: Node) -> System:
        r = Reader(self.ev, node)
        build = self.el.build
        processors = [build(n) for n in r.refs("processors", ("cpu", "gpu", "npu"), [])]
        memories = [build(n) for n in r.refs("memories", ("memory",), [])]
        links = [build(n) for n in r.refs("links", ("link",), [])]
        one = lambda name, kind: (lambda n: build(n) if n is not None else None)(r.ref(name, (kind,), None))
        out = System(node.name, tuple(p for p in processors if p), tuple(m for m in memories if m),
                     tuple(l for l in links if l), one("model", "model"), one("mapping", "mapping"),
                     one("workload", "workload"), node.span,
                     tuple(s for s in (build(n) for n in r.refs("storage", ("storage",), [])) if s), self.el.data)
        r.finish()
        return out
