"""Inference requests: one record per request, read from a CSV file or drawn from a seeded distribution.

Owns the request list of a serving run: `Request`, the CSV reader, the synthetic generators
(the NeuPIMs datasets' lengths and the workload IR's plain distributions) and `requests_for`,
which turns a `Workload` block into requests. No timing here.

Lengths are whole tokens, at least 1 (a request has a prompt and asks for at least one token).
Input and output lengths are drawn independently: the NeuPIMs paper gives their means only
([NEUPIMS] Sec. 8.1 "Datasets"), not how they correlate.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..ir.errors import PimdslError
from ..ir.files import TRACE_LIMIT_BYTES, InputFileError, read_input
from ..ir.workload import Workload


@dataclass(frozen=True)
class Request:
    id: int
    input_len: int                # prompt tokens (the prefill)
    output_len: int               # generated tokens (decode steps)
    arrival: float = 0.0          # seconds from the start of the run

    def __post_init__(self):
        for name in ("input_len", "output_len"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"request {self.id}: {name} must be a whole number >= 1, got {value!r}")
        if not math.isfinite(self.arrival) or self.arrival < 0:
            raise ValueError(f"request {self.id}: arrival must be a finite time >= 0 s, got {self.arrival!r}")


# The NeuPIMs evaluation (section 8.1 "Datasets"): "ShareGPT has an average input token length of
# 80 and an output of 296, while Alpaca has shorter sequence lengths of 12 and 56 for input and
# output". (mean input, mean output) in tokens.
DATASET_MEANS: dict[str, tuple[float, float]] = {
    "sharegpt": (80.0, 296.0),
    "alpaca": (12.0, 56.0),
}

# The workload IR gives a mean but no spread, so the normal distribution's standard deviation is a
# fixed fraction of the mean. A quarter keeps lengths below 1 (clipped) at 4 sigma, so clipping
# leaves the mean intact; a spec that needs another spread should gain a field, not this constant.
NORMAL_STD_OF_MEAN = 0.25


def _exponential(rng: np.random.Generator, mean: float, n: int) -> np.ndarray:
    # Exponential lengths in whole tokens: geometric on {1, 2, ...} with p = 1 / mean, whose mean
    # is exactly `mean`. It is the maximum-entropy law on the positive integers with a given mean,
    # so it assumes nothing the mean does not say, and it is long-tailed like real chat traces.
    return rng.geometric(1.0 / mean, n)


def _normal(rng: np.random.Generator, mean: float, n: int) -> np.ndarray:
    return np.maximum(1, np.rint(rng.normal(mean, NORMAL_STD_OF_MEAN * mean, n)))


def _uniform(rng: np.random.Generator, mean: float, n: int) -> np.ndarray:
    # uniform on [1, 2 mean - 1], rounded: symmetric about the mean, so the mean is kept
    return np.rint(rng.uniform(1.0, 2.0 * mean - 1.0, n))


def _fixed(rng: np.random.Generator, mean: float, n: int) -> np.ndarray:
    return np.full(n, max(1, round(mean)))


def gamma_lengths(rng: np.random.Generator, mean: float, std: float, n: int) -> np.ndarray:
    """Whole-token lengths from the gamma law with the given mean and standard deviation (shape
    mean^2 / std^2, scale std^2 / mean), floored at 1. Traces state a mean and a std often as large
    as the mean, where a normal law would go negative; the gamma is positive and fits both moments.
    The floor raises the mean a little when std > mean (many draws fall below 1)."""
    if not (mean >= 1 and std > 0):
        raise ValueError(f"the gamma distribution needs a mean >= 1 and a std > 0, got {mean!r}, {std!r}")
    return np.maximum(1, np.rint(rng.gamma((mean / std) ** 2, std * std / mean, n)))


DISTRIBUTIONS: dict[str, Callable[[np.random.Generator, float, int], np.ndarray]] = {
    "fixed": _fixed, "normal": _normal, "uniform": _uniform, "exponential": _exponential,
}

# The datasets' shape. The paper samples lengths from the real traces (section 8.1 "Workload":
# "randomly picking sequence lengths from the datasets"); pimdsl does not ship the traces, so it
# draws from the exponential law above with the traces' stated means.
DATASET_DISTRIBUTION = "exponential"


def synthetic_requests(dataset_or_distribution: str, n: int, seed: int,
                       mean_input: float | None = None, mean_output: float | None = None) -> list[Request]:
    """`n` requests (ids 0..n-1, all arriving at 0 s) with seeded, reproducible lengths.

    `dataset_or_distribution` is a dataset (sharegpt, alpaca: their means unless `mean_*` are
    given, drawn from DATASET_DISTRIBUTION) or a distribution (fixed, normal, uniform,
    exponential: `mean_input` and `mean_output` required). One numpy Generator seeded with
    `seed` draws every input length, then every output length."""
    name = dataset_or_distribution
    if name in DATASET_MEANS:
        default_in, default_out = DATASET_MEANS[name]
        mean_input = default_in if mean_input is None else mean_input
        mean_output = default_out if mean_output is None else mean_output
        name = DATASET_DISTRIBUTION
    elif name not in DISTRIBUTIONS:
        choices = ", ".join([*DATASET_MEANS, *DISTRIBUTIONS])
        raise ValueError(f"unknown dataset or distribution {name!r}; choose one of {choices}")
    elif mean_input is None or mean_output is None:
        raise ValueError(f"distribution {name!r} needs mean_input and mean_output")
    for label, mean in (("mean_input", mean_input), ("mean_output", mean_output)):
        if not mean >= 1:
            raise ValueError(f"{label} must be at least 1 token, got {mean!r}")
    if n < 0:
        raise ValueError(f"the number of requests must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    draw = DISTRIBUTIONS[name]
    inputs, outputs = draw(rng, mean_input, n), draw(rng, mean_output, n)
    return [Request(i, int(a), int(b)) for i, (a, b) in enumerate(zip(inputs, outputs))]


class RequestsError(PimdslError, ValueError):
    """Bad rows of a requests CSV: `(line, message)` pairs; str() lists them as `file:line: what`."""

    def __init__(self, path, problems: list[tuple[int, str]]):
        self.path, self.problems = str(path), problems
        super().__init__("\n".join(f"{path}:{line}: {message}" for line, message in problems))

    def render(self) -> str:
        return "\n".join(f"{self.path}:{line}:1: error: {message}" for line, message in self.problems)


def load_requests_csv(path: str | Path) -> list[Request]:
    """Requests from a CSV file with the header `input_len,output_len[,arrival]`, one request a row
    (ids in row order; blank lines skipped). Every bad row is reported in one RequestsError."""
    path = Path(path)
    errors: list[tuple[int, str]] = []
    requests: list[Request] = []
    try:
        text = read_input(path, "requests CSV", TRACE_LIMIT_BYTES).decode("utf-8")
    except InputFileError as exc:
        raise RequestsError(path, [(1, exc.message)]) from None
    except UnicodeDecodeError as exc:
        raise RequestsError(path, [(1, f"this is not UTF-8 text (bad byte at offset {exc.start})")]) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    columns = [c.strip() for c in header] if header else []
    if columns not in (["input_len", "output_len"], ["input_len", "output_len", "arrival"]):
        # the line is not quoted: until the header matches, this may be any file (never echo it)
        raise RequestsError(path, [(1, "this is not a requests CSV: its first line must be the header "
                                       "'input_len,output_len' or 'input_len,output_len,arrival'")])
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(columns):
            errors.append((line, f"expected {len(columns)} values ({','.join(columns)}), got {len(row)}"))
            continue
        values, ok = {}, True
        for name, cell in zip(columns, row):
            cell = cell.strip()
            try:
                values[name] = float(cell) if name == "arrival" else int(cell)
            except ValueError:
                kind = "a time in seconds" if name == "arrival" else "a whole number of tokens"
                errors.append((line, f"{name} {cell!r} is not {kind}"))    # the header matched: a requests table
                ok = False
        if not ok:
            continue
        try:
            requests.append(Request(len(requests), **values))
        except ValueError as e:
            errors.append((line, str(e).split(": ", 1)[1]))
    if not requests and not errors:
        errors.append((reader.line_num + 1, "the file has no requests"))
    if errors:
        raise RequestsError(path, errors)
    return requests


def requests_for(workload: Workload, base_dir: str | Path | None = None) -> list[Request]:
    """The requests a `Workload` block describes.

    - `requests_csv`: the file's requests, all of them (a relative path is taken from `base_dir`,
      by default the directory of the file that declares the workload).
    - otherwise `workload.requests` requests drawn with `workload.seed` from `distribution`:
      `fixed` gives every request `input_len` and `output_len`; normal, uniform and exponential
      take their means from `mean_input_len` / `mean_output_len`, else from `dataset`'s means
      (DATASET_MEANS), else from `input_len` / `output_len`; gamma takes the means and the
      `std_input_len` / `std_output_len` (gamma_lengths)."""
    if workload.requests_file is not None:         # resolved and checked by the front end (data_files.py)
        return load_requests_csv(workload.requests_file)
    if workload.requests_csv is not None:
        path = Path(workload.requests_csv)
        if not path.is_absolute():
            base = Path(base_dir) if base_dir is not None else Path(workload.span.path).parent
            path = base / path
        return load_requests_csv(path)
    distribution = workload.distribution or "fixed"
    if distribution == "gamma":
        if workload.mean_input_len is None or workload.mean_output_len is None \
                or workload.std_input_len is None or workload.std_output_len is None:
            raise ValueError("distribution = gamma needs mean_input_len, std_input_len, mean_output_len and "
                             "std_output_len")
        rng = np.random.default_rng(workload.seed)
        inputs = gamma_lengths(rng, workload.mean_input_len, workload.std_input_len, workload.requests)
        outputs = gamma_lengths(rng, workload.mean_output_len, workload.std_output_len, workload.requests)
        return [Request(i, int(a), int(b)) for i, (a, b) in enumerate(zip(inputs, outputs))]
    if distribution == "fixed":
        return synthetic_requests("fixed", workload.requests, workload.seed,
                                  workload.input_len, workload.output_len)
    data_in, data_out = DATASET_MEANS.get(workload.dataset or "", (workload.input_len, workload.output_len))
    mean_in = workload.mean_input_len if workload.mean_input_len is not None else data_in
    mean_out = workload.mean_output_len if workload.mean_output_len is not None else data_out
    return synthetic_requests(distribution, workload.requests, workload.seed, mean_in, mean_out)
