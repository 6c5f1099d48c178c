"""Unit arithmetic, dimensions and the expression evaluator."""
import math

import pytest

from pimdsl.ir import units as U


def _value(elaborate, expr: str, where: str = "workload"):
    spec, diags = elaborate(f"""
        cpu c {{ clock = 1600 MHz; peak {{ fp16 = 1 TFLOPS; }} memory_bandwidth = {expr}; }}
    """)
    assert not diags.errors, diags.render_all()
    return spec.processors["c"].memory_bandwidth_bytes_per_s


@pytest.mark.parametrize("expr, expected", [
    ("68.264 GB/s", 68.264e9),
    ("1 GiB/s", 2**30),
    ("64 bit * 3200 MT/s / 1 T", 25.6e9),           # bus width x data rate
    ("2 * 4 KiB / 1 us", 8192e6),
    ("(10 GB + 6 GB) / 2 s", 8e9),
    ("max(10 GB/s, 12 GB/s) - 1 GB/s", 11e9),
    ("8 Gbit/s", 1e9),
    ("1 KB / 1 ns * 2 ^ 3", 8e12),
])
def test_bandwidth_expressions(elaborate, expr, expected):
    assert math.isclose(_value(elaborate, expr), expected, rel_tol=1e-12)


def test_cycles_mix_with_time_through_the_clock(elaborate):
    spec, diags = elaborate("""
        dram d {
          family = ddr4; clock = 1600 MHz; data_rate = 3200 MT/s;
          organization { banks_per_group = 4; rows = 1024; columns = 1024; device_width = 8 bit;
                         bus_width = 64 bit; burst_length = 8; }
          timing { tRRD_S = max(4 cycles, 5 ns); tRP = 13.75 ns; tX = 2 * tRP + 1 cycles; }
          command ACT { scope = bank; opens = true; }
          rules { rule rank: ACT -> ACT = tRRD_S; rule bank: ACT -> ACT = tX; }
        }
    """)
    assert not diags.errors, diags.render_all()
    timing = spec.drams["d"].timing_cycles
    assert timing["tRRD_S"] == 8          # 5 ns at 0.625 ns = 8 cycles > 4
    assert timing["tRP"] == 22            # ceil(13.75 / 0.625)
    assert timing["tX"] == 45             # 27.5 ns + 0.625 ns = 45 cycles


def test_unit_table_is_consistent():
    assert U.parse_unit("KiB") == (1024.0, U.BYTES, None)
    assert U.parse_unit("KB") == (1000.0, U.BYTES, None)
    assert U.parse_unit("bit")[0] == 1 / 8
    assert U.parse_unit("cycles@npu") == (1.0, U.CYCLES, "npu")
    assert U.parse_unit("GFLOPS") == (1e9, U.FLOPS, None)
    assert U.parse_unit("pJ") == (1e-12, U.ENERGY, None)
    assert U.parse_unit("W") == (1.0, U.POWER, None)
    assert U.parse_unit("furlong") is None
    assert U.parse_unit("ns@npu") is None


@pytest.mark.parametrize("expr, message", [
    ("10 ns", "a bandwidth was expected for 'memory_bandwidth', this is a time"),
    ("10 GB + 1 s", "cannot add a size (bytes) and a time"),
    ("10 GBs", "unknown unit 'GBs'"),
    ("log2(8 GB)", "log2() takes a plain number, this is a size (bytes)"),
    ("1 GB / 0 s", "division by zero"),
    ("1e999 GB/s", "'1e999' is too large"),
    ("10 GB/s ^ 1.5", "an exponent must be a plain number (an integer if the base has a unit)"),
    ("sqrt(4) * 1 GB/s", "unknown function 'sqrt'"),
    ("bandwith * 2", "unknown name 'bandwith'"),
    ("\"fast\"", "a bandwidth was expected for 'memory_bandwidth', this is a string"),
])
def test_dimension_and_expression_errors(errors, expr, message):
    found = errors(f"cpu c {{ peak {{ fp16 = 1 TFLOPS; }} memory_bandwidth = {expr}; }}")
    assert found, "expected an error"
    assert message in found[0].splitlines()[0]


def test_unknown_unit_suggests(errors):
    (first,) = errors("cpu c { peak { fp16 = 1 TFLOPs; } }")
    assert "hint: did you mean 'TFLOPS'" in first


def test_a_cycle_without_a_clock_is_a_diagnostic(errors):
    (first,) = errors("cpu c { peak { fp16 = 1 TFLOPS; } memory_bandwidth = max(1 ns, 4 cycles); }")
    assert "cycles are used here, but no clock is known" in first


def test_bytes_per_cycle_is_not_a_bandwidth(errors):
    (first,) = errors("cpu c { peak { fp16 = 1 TFLOPS; } memory_bandwidth = 1 GB / 4 cycles; }")
    assert "a bandwidth was expected for 'memory_bandwidth', this is a quantity in B/cycle" in first
