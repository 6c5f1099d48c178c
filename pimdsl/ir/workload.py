"""Model, mapping, workload and system IR."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import Span
from .hardware import DramSpec, Link, Memory, PimUnit, Processor, Storage

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "int4": 0.5, "fp8": 1}


@dataclass(frozen=True)
class TensorDecl:
    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str                     # input, weight, output, activation
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class OpDecl:
    name: str
    op: str                       # gemv, gemm, add, softmax, ...
    inputs: tuple[str, ...]
    output: str
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class Model:
    name: str
    architecture: str             # decoder, encoder, graph
    source: str | None            # the HuggingFace config.json it was imported from
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    max_seq_len: int
    activation: str
    gated_ffn: bool
    norm: str
    tied_embeddings: bool
    dtype: str
    # derived
    parameters: int
    weight_bytes: int
    tensors: tuple[TensorDecl, ...]     # graph models
    ops: tuple[OpDecl, ...]
    params: dict[str, float]            # graph models' named dimensions
    span: Span = field(compare=False, repr=False)
    # attention and FFN read the same layer input and both add to the residual (GPT-J, Falcon,
    # GPT-NeoX); `parallel_norms` is how many norms that input has (1: shared, 2: one per branch)
    parallel_attention: bool = field(default=False, metadata={"json": "omit_default"})
    parallel_norms: int = field(default=1, metadata={"json": "omit_default"})


# what a mapping's `data { ... }` block places: the weights host ops read (PIM ops read theirs in
# their PIM memory), the KV cache, the activations of host ops
DATA_KINDS = ("weights", "kv_cache", "activations")


@dataclass(frozen=True)
class Mapping:
    name: str
    strategy: str
    strategies: tuple[str, ...]
    placement: dict[str, dict[str, str]]    # phase -> op class -> device
    params: dict[str, object]
    span: Span = field(compare=False, repr=False)
    param_spans: dict[str, Span] = field(default_factory=dict, compare=False, repr=False)   # where each is set
    loop: str = "step"            # the registered run loop (pimdsl.loops) that runs this system
    # where each placement key (phase, op class) and each strategy name is written, for warnings
    placement_spans: dict[tuple[str, str], Span] = field(default_factory=dict, compare=False, repr=False)
    strategy_spans: dict[str, Span] = field(default_factory=dict, compare=False, repr=False)
    # which memory holds each kind of data (DATA_KINDS -> memory name); unset: the PIM memory, else the first
    data: dict[str, str] = field(default_factory=dict)
    data_spans: dict[str, Span] = field(default_factory=dict, compare=False, repr=False)
    param_dims: dict[str, tuple] = field(default_factory=dict, compare=False, repr=False)   # a number's dimension


@dataclass(frozen=True)
class Workload:
    name: str
    batch: int
    input_len: int
    output_len: int
    requests_csv: str | None
    dataset: str | None
    distribution: str | None      # fixed, normal, uniform, exponential
    mean_input_len: float | None
    mean_output_len: float | None
    requests: int
    seed: int
    kv_admission: str             # reserve (Orca: a request's whole life at admission) or on_demand (vLLM)
    span: Span = field(compare=False, repr=False)
    memory_limit_bytes: int | None = None   # a cap on the device memory a run may occupy (None: no cap)
    std_input_len: float | None = field(default=None, metadata={"json": "omit_default"})   # the gamma law's spread
    std_output_len: float | None = field(default=None, metadata={"json": "omit_default"})
    requests_file: str | None = field(default=None, compare=False, repr=False, metadata={"json": "omit_default"})   # requests_csv resolved (frontend/data_files.py)


@dataclass(frozen=True)
class System:
    name: str
    processors: tuple[Processor, ...]
    memories: tuple[Memory, ...]
    links: tuple[Link, ...]
    model: Model | None
    mapping: Mapping | None
    workload: Workload | None
    span: Span = field(compare=False, repr=False)
    storage: tuple[Storage, ...] = ()     # devices the weights are read from (disk, flash)
    data: object = field(default=None, compare=False, repr=False)   # the spec's DataTree: where a loop may read data files


@dataclass(frozen=True)
class Spec:
    """Everything one root file (and its imports) declares, elaborated."""
    root: str
    drams: dict[str, DramSpec]
    memories: dict[str, Memory]
    pim_units: dict[str, PimUnit]
    processors: dict[str, Processor]
    links: dict[str, Link]
    models: dict[str, Model]
    mappings: dict[str, Mapping]
    workloads: dict[str, Workload]
    systems: dict[str, System]
    storages: dict[str, Storage] = field(default_factory=dict)
    reads: tuple[tuple[str, str], ...] = field(default=(), repr=False)   # (what, resolved path) of each data file the spec names
