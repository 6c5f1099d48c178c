"""Quantities with dimensions: units are types (STYLE.md, 9).

Values are kept in SI (seconds, bytes, FLOP, joules, transfers, amperes) plus two
dimensions of our own: `cycle` (of a named clock, resolved by the elaborator)
and dimensionless counts. KB/MB/GB are decimal (10^3..), KiB/MiB/GiB binary.
"""
from __future__ import annotations

from dataclasses import dataclass

# Base dimensions, in this order, as exponent tuples.
BASES = ("B", "s", "cycle", "FLOP", "J", "T", "A")


def dim(**exps: int) -> tuple[int, ...]:
    return tuple(exps.get(b, 0) for b in BASES)


NONE = dim()
BYTES = dim(B=1)
TIME = dim(s=1)
CYCLES = dim(cycle=1)
FREQUENCY = dim(s=-1)
BANDWIDTH = dim(B=1, s=-1)
FLOPS = dim(FLOP=1, s=-1)
FLOP = dim(FLOP=1)
ENERGY = dim(J=1)
POWER = dim(J=1, s=-1)
DATA_RATE = dim(T=1, s=-1)
CURRENT = dim(A=1)
VOLTAGE = dim(J=1, s=-1, A=-1)     # W / A

DIMENSION_NAMES = {
    NONE: "a plain number", BYTES: "a size (bytes)", TIME: "a time",
    CYCLES: "a cycle count", FREQUENCY: "a frequency", BANDWIDTH: "a bandwidth",
    FLOPS: "a compute rate (FLOP/s)", FLOP: "an operation count (FLOP)",
    ENERGY: "an energy", POWER: "a power", DATA_RATE: "a data rate (transfers/s)",
    CURRENT: "a current", VOLTAGE: "a voltage",
}

_DEC = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}

UNITS: dict[str, tuple[float, tuple[int, ...]]] = {"%": (0.01, NONE)}
for _p, _f in {**_DEC, **_BIN}.items():
    UNITS[f"{_p}B"] = (_f, BYTES)
    UNITS[f"{_p}bit"] = (_f / 8, BYTES)
    UNITS[f"{_p}B/s"] = (_f, BANDWIDTH)
    UNITS[f"{_p}bit/s"] = (_f / 8, BANDWIDTH)
for _p, _f in _DEC.items():
    UNITS[f"{_p}FLOP"] = (_f, FLOP)
    UNITS[f"{_p}FLOP/s"] = (_f, FLOPS)
    UNITS[f"{_p}FLOPS"] = (_f, FLOPS)
    UNITS[f"{_p}OPS"] = (_f, FLOPS)
    UNITS[f"{_p}T/s"] = (_f, DATA_RATE)
    UNITS[f"{_p}Hz"] = (_f, FREQUENCY)
UNITS["kHz"] = UNITS["KHz"]
UNITS["T"] = (1.0, dim(T=1))
UNITS["Gb/s"] = UNITS["Gbit/s"]
for _name, _f in {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12}.items():
    UNITS[_name] = (_f, TIME)
for _name, _f in {"J": 1.0, "mJ": 1e-3, "uJ": 1e-6, "nJ": 1e-9, "pJ": 1e-12}.items():
    UNITS[_name] = (_f, ENERGY)
for _name, _f in {"W": 1.0, "mW": 1e-3, "kW": 1e3}.items():
    UNITS[_name] = (_f, POWER)
for _name, _f in {"A": 1.0, "mA": 1e-3, "uA": 1e-6}.items():
    UNITS[_name] = (_f, CURRENT)
for _name, _f in {"V": 1.0, "mV": 1e-3}.items():
    UNITS[_name] = (_f, VOLTAGE)
CYCLE_UNITS = ("cycles", "cycle", "cyc", "clk")


@dataclass(frozen=True)
class Quantity:
    """A number with a dimension. `clock` names the clock of a cycle count."""
    value: float
    dims: tuple[int, ...] = NONE
    clock: str | None = None

    @property
    def dimension(self) -> str:
        return dimension_name(self.dims)

    def is_integer(self) -> bool:
        return float(self.value).is_integer()

    def __str__(self) -> str:
        v = int(self.value) if self.is_integer() and abs(self.value) < 1e15 else self.value
        if self.dims == NONE:
            return f"{v}"
        return f"{v} {unit_label(self.dims)}"


def dimension_name(dims: tuple[int, ...]) -> str:
    return DIMENSION_NAMES.get(dims, "a quantity in " + unit_label(dims))


def unit_label(dims: tuple[int, ...]) -> str:
    num = [b if e == 1 else f"{b}^{e}" for b, e in zip(BASES, dims) if e > 0]
    den = [b if e == -1 else f"{b}^{-e}" for b, e in zip(BASES, dims) if e < 0]
    label = "*".join(num) or "1"
    return label + ("/" + "/".join(den) if den else "")


def parse_unit(text: str) -> tuple[float, tuple[int, ...], str | None] | None:
    """`22 cycles@npu` -> (1, CYCLES, 'npu'); None if the unit is unknown."""
    name, _, clock = text.partition("@")
    if name in CYCLE_UNITS:
        return 1.0, CYCLES, clock or None
    if clock:
        return None
    if name in UNITS:
        factor, dims = UNITS[name]
        return factor, dims, None
    return None


def known_units() -> list[str]:
    return sorted(UNITS) + list(CYCLE_UNITS)
