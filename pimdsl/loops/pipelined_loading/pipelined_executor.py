"""Running a model for real with pipelined loading: m loader threads, the inference thread, the daemon.

The same schedule as loading_schedule.py, performed ([PIPELOAD] Sec. III-B): agent k reads the
files of layers k, k+m, ... (round robin) and holds one layer at a time; the inference thread runs
the layers in order (numpy_forward.py); the daemon admits loads in model order within the byte budget
and frees each layer once it is computed. PipeSwitch is one loader that never frees; the baseline
reads every file, then runs. The Layer Profiler measures each layer's load and compute time alone.
Peak memory is sampled from the process's resident set (/proc/self/statm) during the run.
"""
from __future__ import annotations

import gc
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...ir.workload import Model
from ..model_layers import numpy_forward as nf
from ..model_layers import weight_files
from .layer_profile import LayerProfile, Profile

PAGE = os.sysconf("SC_PAGE_SIZE")


def return_freed_memory_to_the_os() -> None:
    """glibc raises its mmap threshold after a large block is freed (up to 32 MB), so later layer
    buffers come from the heap and stay in the resident set when freed: the peak of one run would
    hide in the last. A fixed 1 MiB threshold keeps every layer buffer an mmap, freed for real."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)      # M_MMAP_THRESHOLD
    except (OSError, AttributeError):                       # not glibc: peaks may read low
        pass


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class RssSampler:
    """The highest resident set seen while running, sampled every millisecond."""
    def __init__(self):
        self.peak = self.start = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, rss_bytes())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


class Aborted(Exception):
    pass


class Daemon:
    """Admission in model order within the budget; the ready queue; destruction after compute."""
    def __init__(self, budget: float | None, free_after_use: bool):
        self.budget, self.free = budget, free_after_use
        self.cond = threading.Condition()
        self.next_admit, self.used, self.peak = 0, 0, 0
        self.resident: dict[int, int] = {}
        self.ready: dict[int, dict] = {}
        self.destroyed: set[int] = set()
        self.kept: dict[int, dict] = {}           # without freeing: each layer's last loaded copy
        self.last_of_layer: dict[int, int] = {}
        self.error: BaseException | None = None

    def _wait(self, ready) -> None:
        self.cond.wait_for(lambda: self.error is not None or ready())
        if self.error is not None:
            raise Aborted

    def admit(self, g: int, layer: int, nbytes: int) -> None:
        key = g if self.free else layer            # without freeing, a reload replaces the kept copy
        with self.cond:
            fits = lambda: self.budget is None or self.used + nbytes - self.resident.get(key, 0) <= self.budget
            previous = self.last_of_layer.get(layer)
            reload_ok = lambda: self.free or previous is None or previous in self.destroyed
            self._wait(lambda: g == self.next_admit and fits() and reload_ok())
            self.last_of_layer[layer] = g
            if not self.free:
                self.kept.pop(layer, None)             # the copy from the last pass has been used
            self.used += nbytes - self.resident.get(key, 0)
            self.resident[key] = nbytes
            self.peak = max(self.peak, self.used)
            self.next_admit += 1
            self.cond.notify_all()

    def put(self, g: int, weights: dict) -> None:
        with self.cond:
            self.ready[g] = weights
            self.cond.notify_all()

    def take(self, g: int) -> dict:
        with self.cond:
            self._wait(lambda: g in self.ready)
            return self.ready.pop(g)

    def destroy(self, g: int) -> None:
        """S_k^dest ([PIPELOAD] Sec. III-B): the layer is done; free it (PIPELOAD only)."""
        with self.cond:
            if self.free:
                self.used -= self.resident.pop(g)
            self.destroyed.add(g)
            self.cond.notify_all()

    def wait_destroyed(self, g: int) -> None:
        with self.cond:
            self._wait(lambda: g in self.destroyed)

    def fail(self, exc: BaseException) -> None:
        with self.cond:
            self.error = self.error or exc
            self.cond.notify_all()


@dataclass
class Measured:
    strategy: str
    agents: int
    latency_s: float
    ttft_s: float
    peak_rss_growth_bytes: int    # resident set above the run's start
    layers_peak_bytes: int        # as the daemon counted them
    output: np.ndarray


def _layer_path(folder: Path, i: int) -> Path:
    return folder / f"layer_{i:02d}.safetensors"


def run(model: Model, folder: Path, layer_bytes: list[int], inputs, output_len: int, strategy: str,
        agents: int, budget: float | None, cold: bool = False) -> Measured:
    if cold:
        weight_files.evict(folder)
    return_freed_memory_to_the_os()
    gc.collect()
    n_layers = model.layers
    first = {}
    with RssSampler() as rss:
        t0 = time.perf_counter()
        resident = {name: weight_files.read(folder / f"{name}.safetensors") for name in ("embedding", "other")}
        mark = lambda p, i: first.setdefault("ttft", time.perf_counter()) if (p, i) == (0, n_layers - 1) else None
        if strategy == "baseline":
            layers = [weight_files.read(_layer_path(folder, i)) for i in range(n_layers)]
            out = nf.forward(model, lambda p, i: layers[i], resident, inputs, output_len, mark)
            del layers
            peak_layers, agents = sum(layer_bytes), 1
        else:
            out, peak_layers = _pipelined(model, folder, layer_bytes, inputs, output_len, resident,
                                          1 if strategy == "pipeswitch" else agents,
                                          budget if strategy == "pipeload" else None, strategy == "pipeload", mark)
            agents = 1 if strategy == "pipeswitch" else agents
        latency = time.perf_counter() - t0
        del resident
    return Measured(strategy, agents, latency, first.get("ttft", latency) - t0, rss.peak - rss.start, peak_layers, out)


def _pipelined(model, folder, layer_bytes, inputs, output_len, resident, m, budget, free, mark):
    n_layers, total = model.layers, nf.passes(model, output_len) * model.layers
    daemon = Daemon(budget, free)

    def agent(k: int) -> None:
        try:
            for g in range(total):
                layer = g % n_layers
                if layer % m != k:                 # round robin within each pass (Sec. III-B)
                    continue
                daemon.admit(g, layer, layer_bytes[layer])
                daemon.put(g, weight_files.read(_layer_path(folder, layer)))
                if free:                           # an agent holds one layer until it is destroyed
                    daemon.wait_destroyed(g)
        except Aborted:
            pass
        except BaseException as exc:               # surface a loader's failure in the inference thread
            daemon.fail(exc)

    def get_layer(p: int, i: int) -> dict:
        w = daemon.take(p * n_layers + i)
        if not free:
            daemon.kept[i] = w                     # PipeSwitch keeps every layer it loaded
        return w

    def done(p: int, i: int) -> None:
        mark(p, i)
        daemon.destroy(p * n_layers + i)

    threads = [threading.Thread(target=agent, args=(k,), daemon=True) for k in range(m)]
    for t in threads:
        t.start()
    try:
        out = nf.forward(model, get_layer, resident, inputs, output_len, done)
    except Aborted:
        out = None
    except BaseException as exc:
        daemon.fail(exc)
        raise
    finally:
        for t in threads:
            t.join()
    if daemon.error is not None:
        raise daemon.error
    return out, daemon.peak


def _decode_time(one, layer_and_cache, model: Model, input_len: int) -> float:
    """One generated token through a layer whose K, V cache holds the prompt."""
    w, cache = layer_and_cache
    t = time.perf_counter()
    nf.layer(one, w, model, dict(cache), input_len)
    return time.perf_counter() - t


def profile(model: Model, folder: Path, layer_bytes: list[int], input_len: int, output_len: int,
            cold: bool = False, seed: int = 0) -> Profile:
    """The Layer Profiler ([PIPELOAD] Sec. IV-1): each layer's load and compute time, measured alone."""
    if cold:
        weight_files.evict(folder)
    rng = np.random.default_rng(seed)
    t = time.perf_counter()
    resident = {name: weight_files.read(folder / f"{name}.safetensors") for name in ("embedding", "other")}
    resident_load = time.perf_counter() - t
    decoder = model.architecture == "decoder"
    x = rng.standard_normal((input_len, model.hidden), dtype=np.float32)
    one = x[-1:].copy()
    # A run computes a layer right after reading it (the first pass), but a decode pass reaches
    # each layer after the rest of the model has gone through the cache: time decode on the
    # previous layer, after this one's read has evicted it (a 32 MB L3 holds most of a 50 MB layer).
    loads, prefills, decodes = [], [], []
    previous = None
    for i in range(model.layers):
        t = time.perf_counter()
        w = weight_files.read(_layer_path(folder, i))
        loads.append(time.perf_counter() - t)
        cache = {} if decoder else None
        t = time.perf_counter()
        nf.layer(x, w, model, cache, 0)
        prefills.append(time.perf_counter() - t)
        if decoder and previous is not None:
            decodes.append(_decode_time(one, previous, model, input_len))
        previous = (w, cache)
    if decoder:
        first = weight_files.read(_layer_path(folder, 0))    # evicts the last layer in turn
        decodes.append(_decode_time(one, previous, model, input_len))
        del first
    else:
        decodes = prefills
    del previous, w
    layers = [LayerProfile(layer_bytes[i], loads[i], prefills[i], decodes[i]) for i in range(model.layers)]
    heads = []
    for states in (x, one):
        t = time.perf_counter()
        nf.head(states, resident["other"], resident["embedding"], model)
        heads.append(time.perf_counter() - t)
    resident_bytes = sum(a.nbytes for blob in resident.values() for a in blob.values())
    return Profile(tuple(layers), resident_bytes, resident_load, resident_load + sum(l.load_s for l in layers),
                   heads[0], heads[1], "measured")
