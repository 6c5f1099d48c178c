"""GDDR6-AiM on the bundled specs beside the published figures and hand calculations.

Ours: the peak and internal bandwidth derived from specs/pim/aim.pim and specs/dram/gddr6.pim, the
4096 x 4096 GEMV timed from the declared program by the DRAM engine (with and without refresh), the
Llama-2-7B decode step of specs/systems/aim_llama2_7b.pim (`pimc run`), and the same step with every
decode op on the Xeon host. Published: [AIM_ISSCC22] and [AIM_PR22] figures. Hand calculations are
tests/test_aim.py's counts from the rules. `python validation/run_aim.py` rewrites
validation/aim.json and validation/aim.md; tests/test_validation_aim.py regenerates the rows.
"""
from __future__ import annotations

from ..driver import run_loaded
from ..frontend.pipeline import load_spec
from ..frontend.resources import specs_dir
from ..interpreter.dram.command_stream import CommandTimer
from ..interpreter.dram.stream_timer import StreamTimer
from ..lowering.pim_program import expand
from .scoring import prediction_count

SYSTEM = "systems/aim_llama2_7b.pim"
HOST_ONLY = ["mapping.decode.fc=aim_xeon", "mapping.decode.activation=aim_xeon"]
# Published figures: [AIM_ISSCC22] title ("1TFLOPS MAC Operation", "16Gb/s/pin"), [AIM_PR22] (with a CPU
# or GPU, certain computations "16 times faster" than with conventional DRAM).
PUBLISHED = {"peak_tflops_per_device": 1.0, "data_rate_gbps_per_pin": 16.0, "speedup_vs_dram": 16.0}
# The issue that asked for these specs reports a first user's numbers (hand and pimc, specs of theirs).
FIRST_USER = {"gemv_4096_us": 3.53, "token_pim_ms_pimc": 1.39, "token_pim_ms_hand": [1.31, 1.34]}
# Hand counts (tests/test_aim.py: hand_gemv, hand_gemv_activation), CK cycles without refresh.
HAND = {"gemv_4096_cycles": 6980, "token_cycles": 2_995_820}
MARKER = "<!-- written by hand below; run_aim.py keeps it -->"
# GEMV shapes whose speedup over the host we predict, the talk's own not being public: Llama-2-7B's
# projections (Q/K/V/O, gate/up, down) and LM head, out x in.
PREDICTED = ((4096, 4096), (11008, 4096), (4096, 11008), (32000, 4096))


def _system(overrides=()):
    spec, diags = load_spec(specs_dir() / SYSTEM, list(overrides))
    assert not diags.errors, [diags.render(d) for d in diags.errors]
    return next(iter(spec.systems.values()))


def _gemv_cycles(memory, n: int, k: int, refresh: str, **params) -> int:
    timer = StreamTimer(CommandTimer(memory, memory.pim.commands, memory.pim.rules, memory.pim.windows, refresh=refresh))
    return timer.run(expand(memory, memory.pim.program("gemv"), {"n": n, "k": k, "m": 1}, params=params or None))


def collect() -> dict:
    system = _system()
    card = next(m for m in system.memories if m.pim is not None)
    org, pim = card.organization, card.pim
    ck = card.part.clock_hz
    mac_cycles = pim.timing_cycles["tMAC"]                                     # MAC_ABK -> MAC_ABK
    per_channel_flops = org.banks_per_rank * pim.lanes * 2 * ck / mac_cycles
    internal = org.banks_per_rank * org.access_bytes * ck / mac_cycles          # bytes/s per channel
    external = card.part.data_rate_tps * org.bus_width_bits / 8                # bytes/s per channel
    gemv = {r: _gemv_cycles(card, 4096, 4096, r) for r in ("none", "blocking")}
    report = run_loaded(system).report
    # Llama-2-7B's gate projection (11008 x 4096), one channel's share, without refresh: with the SiLU
    # covered (`activation = 1`) the buffer is refilled for every output row
    gate = {"plain": _gemv_cycles(card, 11008, 4096, "none"),
            "activation_covered": _gemv_cycles(card, 11008, 4096, "none", activation=1)}
    host = run_loaded(_system(HOST_ONLY)).report
    steps = system.workload.output_len
    decode_pim_s = report["breakdown_s"]["decode"]["pim:aimx_card"] / steps
    host_gemv_s = 4096 * 4096 * 2 / host_bandwidth(system)
    return {
        "ours": {
            "peak_tflops_per_device": round(2 * per_channel_flops / 1e12, 4),
            "peak_tflops_per_card": round(org.channels * per_channel_flops / 1e12, 4),
            "data_rate_gbps_per_pin": card.part.data_rate_tps / 1e9,
            "internal_over_external_bandwidth": round(internal / external, 4),
            "gemv_4096_cycles": gemv,
            "gemv_4096_us": {r: round(c / ck * 1e6, 4) for r, c in gemv.items()},
            "gemv_4096_tflops_per_card": round(2 * 4096 * 4096 / (gemv["blocking"] / ck) / 1e12, 3),
            "host_gemv_4096_us": round(host_gemv_s * 1e6, 2),
            "gemv_4096_speedup_vs_host": round(host_gemv_s / (gemv["blocking"] / ck), 1),
            "gemv_speedups_vs_host": {f"{n}x{k}": round(n * k * 2 / host_bandwidth(system)
                                                        / (_gemv_cycles(card, n, k, "blocking") / ck), 1)
                                      for n, k in PREDICTED},
            "gate_cycles": gate,
            "gate_activation_ms_per_token": round((gate["activation_covered"] - gate["plain"]) * system.model.layers
                                                  / ck * 1e3, 4),
            "token_pim_cycles": report["pim"]["cycles"],
            "token_pim_ms": round(report["pim"]["seconds"] * 1e3, 4),
            "token_pim_ms_from_breakdown": round(decode_pim_s * 1e3, 4),
            "token_refreshes": report["pim"]["refreshes"],
            "tpot_ms": round(report["tpot_s"] * 1e3, 4),
            "tpot_ms_host_only": round(host["tpot_s"] * 1e3, 4),
            "token_speedup_vs_host": round(host["tpot_s"] / report["tpot_s"], 2),
        },
        "hand": {**HAND, "gemv_4096_us": HAND["gemv_4096_cycles"] / ck * 1e6,
                 "token_ms": round(HAND["token_cycles"] / ck * 1e3, 4)},
        "published": PUBLISHED,
        "first_user": FIRST_USER,
    }


def host_bandwidth(system) -> float:
    """The Xeon's achievable DRAM bandwidth (its `memory_bandwidth`): the host GEMV's bound."""
    cpu = system.processors[0]
    return cpu.memory_bandwidth_bytes_per_s


def markdown(d: dict) -> str:
    o, h, p, f = d["ours"], d["hand"], d["published"], d["first_user"]
    rows = [
        ("Peak MAC rate per device (TFLOPS)", f"{p['peak_tflops_per_device']:.2f} [AIM_ISSCC22] title",
         f"{o['peak_tflops_per_device']:.3f}", "-", "16 banks x 16 BF16 lanes x 2 FLOP per MAC_ABK, one per tMAC "
         "= 2 CK at 2 GHz, 2 channels: 1.024; the paper's 1 TFLOPS is the same product rounded"),
        ("Data rate (Gb/s/pin)", f"{p['data_rate_gbps_per_pin']:.0f} [AIM_ISSCC22] title",
         f"{o['data_rate_gbps_per_pin']:.0f}", "-", "the part's data rate (gddr6.pim)"),
        ("Speedup over conventional DRAM", f"{p['speedup_vs_dram']:.0f}x [AIM_PR22]",
         f"{o['internal_over_external_bandwidth']:.0f}x (internal / external bandwidth)", "-",
         "the bound of a memory-bound GEMV: all 16 banks stream a 32 B burst per ns where the x16 pins move one"),
        ("4096 x 4096 GEMV, one channel's share (us)", "not published in the text we read",
         f"{o['gemv_4096_us']['none']:.3f} (no refresh), {o['gemv_4096_us']['blocking']:.3f} (blocking refresh)",
         f"{h['gemv_4096_us']:.3f} ({h['gemv_4096_cycles']} CK)",
         f"equal without refresh; one REF falls inside the op. The first user's spec: {f['gemv_4096_us']} us"),
        ("4096 x 4096 GEMV on the card (TFLOPS)", "-", f"{o['gemv_4096_tflops_per_card']:.2f}", "-",
         f"{o['gemv_4096_tflops_per_card'] / o['peak_tflops_per_card']:.0%} of the card's "
         f"{o['peak_tflops_per_card']:.1f}: each 2 KB row costs tRCD + tRTP + tRP = 40 ns beside its 64 ns of MACs, "
         "and the buffer fills (64 ns per 1024 inputs) do not overlap the MACs"),
        ("4096 x 4096 GEMV speedup over the Xeon", "the talk's GEMV speedups are not in the text we read",
         f"{o['gemv_4096_speedup_vs_host']:.0f}x", "-",
         f"host: 32 MiB of BF16 weights at the Xeon's {host_bandwidth_label(o)} -> {o['host_gemv_4096_us']:.0f} us"),
        ("GEMV speedups over the Xeon, Llama-2-7B shapes (out x in)", "not public: the talk's are not in the text we read",
         ", ".join(f"{shape}: {x:.0f}x" for shape, x in o["gemv_speedups_vs_host"].items()), "-",
         f"predictions, not validations: each of the card's 32 channels times its share (blocking refresh) against the "
         f"host reading the BF16 weights at its DRAM bandwidth. The bound is the card's {o['peak_tflops_per_card']:.1f} "
         f"TB/s of internal reads over the host's {host_bandwidth_label(o)} ({bound(o):.0f}x); each shape reaches "
         f"{min(o['gemv_speedups_vs_host'].values()) / bound(o):.0%}-{max(o['gemv_speedups_vs_host'].values()) / bound(o):.0%} "
         "of it: row activations and precharges between MACs, and one buffer fill per input tile shared by the tile's "
         "rows (63 rows per channel for 32000 outputs, 8 for 4096)"),
        ("Llama-2-7B decode, AiM time per token (ms)", "-", f"{o['token_pim_ms']:.3f} ({o['token_refreshes']} refreshes)",
         f"{h['token_ms']:.3f} (no refresh)",
         f"refresh adds {o['token_pim_ms'] / h['token_ms'] - 1:.1%}; the covered SiLU refills the buffer for every gate "
         f"row (+{o['gate_activation_ms_per_token']:.3f} ms/token). The first user: {f['token_pim_ms_pimc']} ms by pimc, "
         f"{f['token_pim_ms_hand'][0]}-{f['token_pim_ms_hand'][1]} ms by hand (SiLU on the host)"),
        ("Llama-2-7B time per output token (ms)", "-", f"{o['tpot_ms']:.3f}", "-",
         f"AiM plus the host's attention, norms and element-wise ops and the PCIe transfers; "
         f"{o['tpot_ms_host_only']:.1f} ms with every decode op on the Xeon: {o['token_speedup_vs_host']:.1f}x"),
    ]
    lines = ["# GDDR6-AiM: ours beside the published figures and the hand calculations", "",
             "Written by `python validation/run_aim.py` from `specs/systems/aim_llama2_7b.pim` (16 AiM devices, "
             "32 channels, beside a Xeon; Llama-2-7B BF16, batch 1, 128 in / 128 out). Hand counts: "
             "`tests/test_aim.py` (`hand_gemv`, `hand_gemv_activation`), from the rules of `specs/pim/aim.pim`. "
             + prediction_count([o["peak_tflops_per_device"] / p["peak_tflops_per_device"] - 1,
                                 o["data_rate_gbps_per_pin"] / p["data_rate_gbps_per_pin"] - 1,
                                 o["internal_over_external_bandwidth"] / p["speedup_vs_dram"] - 1],
                                "the published figure", "They are the three rows with a published number, none "
                                "fitted on it; the other rows have none (the GEMV and the per-token AiM time are "
                                "checked against the hand counts instead)."), "",
             "| figure | published | ours (pimc) | by hand | gap, and why |", "|---|---|---|---|---|"]
    lines += [f"| {' | '.join(r)} |" for r in rows]
    return "\n".join(lines) + "\n\n" + MARKER + "\n"


def bound(o: dict) -> float:
    """The card's internal read rate over the host's DRAM bandwidth: the GEMV speedup's bound."""
    internal = o["peak_tflops_per_card"] * 1e12                 # bytes/s: a 2-byte BF16 weight per 2 FLOP
    return internal / (4096 * 4096 * 2 / (o["host_gemv_4096_us"] * 1e-6))


def host_bandwidth_label(o: dict) -> str:
    return f"{4096 * 4096 * 2 / (o['host_gemv_4096_us'] * 1e-6) / 1e9:.1f} GB/s"
