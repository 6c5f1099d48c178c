"""Hardware IR: DRAM standards and parts, memories, PIM units, processors, links.

Frozen dataclasses, each with the source span of its declaration. Field
names carry their unit (`_s`, `_hz`, `_bytes`, `_cycles`), so the JSON
export (`pimc show --json`) names every unit. Derived numbers (page size,
capacity, peak bandwidth, address bit widths) are computed once, in the
elaborator, and stored here.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import PimdslError, Span

# DRAM hierarchy levels, outermost first. A timing rule's scope is one of these.
LEVELS = ("channel", "pseudo_channel", "rank", "bank_group", "bank")
# Fields an address map orders (MSB first in the spec).
ADDRESS_FIELDS = ("channel", "pseudo_channel", "rank", "bank_group", "bank", "row", "column")


@dataclass(frozen=True)
class Organization:
    channels: int
    pseudo_channels: int          # per channel (HBM); 1 elsewhere
    ranks: int                    # per channel (or pseudo-channel)
    bank_groups: int              # per rank
    banks_per_group: int
    rows: int                     # per bank
    columns: int                  # device columns per row (device_width bits each)
    device_width_bits: int
    bus_width_bits: int           # data bus of one channel (or pseudo-channel)
    burst_length: int
    # derived
    banks_per_rank: int
    devices_per_rank: int
    access_bytes: int             # one burst on the bus
    row_bytes: int                # one row across the devices of a rank (the page)
    bursts_per_row: int
    capacity_bytes: int           # all channels


@dataclass(frozen=True)
class TimingRule:
    """At `scope`, after any of `preceding`, any of `following` waits `cycles`.
    `other` applies it between different units at that scope (another rank)."""
    scope: str
    other: bool
    preceding: tuple[str, ...]
    following: tuple[str, ...]
    cycles: int
    span: Span = field(compare=False, repr=False)
    # a latency that depends on an argument of the preceding command (`= 2 * (max(k, 6) + 1)`):
    # the argument's name and the latency for each of its values 0 .. len - 1, -1 where it is not
    # defined (`cycles` is the first defined one)
    arg: str = field(default="", metadata={"json": "omit_default"})
    by_arg: tuple[int, ...] = field(default=(), metadata={"json": "omit_default"})

    def latency(self, value: int | None = None) -> int:
        """The rule's cycles after a preceding command whose argument `arg` is `value`."""
        if not self.arg or value is None:
            return self.cycles
        if not 0 <= value < len(self.by_arg):
            raise PimdslError(f"a timing rule's latency is tabulated for {self.arg} = 0 .. {len(self.by_arg) - 1}, "
                              f"not {value}", self.span)
        if self.by_arg[value] < 0:
            raise PimdslError(f"this timing rule's latency has no value for {self.arg} = {value} (its expression "
                              f"fails there, or is not a whole, non-negative number of cycles)", self.span)
        return self.by_arg[value]


@dataclass(frozen=True)
class TimingWindow:
    """At most `count` of `commands` within any `cycles` window at `scope` (tFAW)."""
    scope: str
    other: bool
    commands: tuple[str, ...]
    count: int
    cycles: int
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class CommandDecl:
    """A DRAM or PIM command as data: what it touches and how long it holds the bus."""
    name: str
    scope: str                    # bank, bank_pair, bank_group, all_banks, rank, channel
    args: tuple[str, ...]
    row_buffer: str               # mem, pim or none
    opens: bool
    closes: bool
    reads: tuple[str, ...]        # e.g. (row,), (row, global_buffer)
    writes: tuple[str, ...]
    bus: str                      # command bus it uses: command (the one bus), or row / column (HBM)
    bus_cycles: int               # command-bus occupancy
    data_cycles: int              # data-bus occupancy (bursts)
    refresh: bool
    span: Span = field(compare=False, repr=False)
    effect: str = field(default="none", metadata={"json": "omit_default"})   # what it does to declared state in a PIM program (ir/pim_program.EFFECTS)
    # a PIM command that is an ordinary DRAM command of the part on the bus (HBM-PIM's MAC reads are
    # RDs): timed as that command, its effect still the unit's
    issued_as: str = field(default="", metadata={"json": "omit_default"})


@dataclass(frozen=True)
class DramPower:
    """A DRAM part's supply voltage and per-device currents, as its datasheet gives them (the
    `power` block): names are the JEDEC/datasheet ones (VDD, IDD0, IDD2N, ...)."""
    volts: dict[str, float]
    amps: dict[str, float]
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class DramSpec:
    name: str
    base: str | None
    family: str
    clock_hz: float               # command clock (CK)
    tck_s: float
    data_rate_tps: float          # transfers per second per pin
    organization: Organization
    timing_cycles: dict[str, int]
    rules: tuple[TimingRule, ...]
    windows: tuple[TimingWindow, ...]
    commands: tuple[CommandDecl, ...]
    read_latency_cycles: int      # RD command to the end of its data
    write_latency_cycles: int
    refresh_modes: tuple[str, ...]
    peak_bandwidth_bytes_per_s: float   # one channel (or pseudo-channel)
    span: Span = field(compare=False, repr=False)
    power: DramPower | None = field(default=None, metadata={"json": "omit_default"})   # None: no currents declared


@dataclass(frozen=True)
class Controller:
    scheduler: str                # fcfs, frfcfs, frfcfs_rowhit
    read_queue_depth: int
    write_queue_depth: int
    page_policy: str              # open, closed
    refresh: str                  # none, all_bank, per_bank
    row_hit_cap: int              # FR-FCFS: row hits served before a waiting miss
    write_drain_high: float       # write-buffer fill that starts a drain
    write_drain_low: float
    queue_structure: str          # transaction (requests scheduled from the read/write queues) or
                                  # per_bank (DRAMsim3: requests move on into per-bank command queues)
    command_queue_depth: int      # per-bank command queue depth (per_bank structure)
    pim_blocking: str             # how a single-row-buffer PIM unit shares its channels with reads
                                  # and writes: serial (PIM phases run alone) or channel (a mode switch
                                  # per channel: PIM only on empty R/W queues, no R/W while PIM is queued)
    # how the host issues a PIM GEMV to a channel-blocked unit: one instruction (`fused`), or one per
    # k step plus one that reads the result back (`per_step`)
    blocked_gemv_issue: str = field(default="fused", metadata={"json": "omit_default"})
    # which queued request may precharge a bank whose open row it misses: only the bank's oldest
    # (`oldest`), or any (`any`: Ramulator 2's FRFCFS derives every request's next command)
    precharge_for: str = field(default="oldest", metadata={"json": "omit_default"})
    # per_bank: `watermark` (write_drain_high/low) or `batch` (DRAMsim3: a drain starts when the write
    # queue is full or holds more than write_drain_idle writes while the command queues are empty, and
    # moves exactly the writes queued at its start; outside a drain only reads move on)
    write_drain: str = field(default="watermark", metadata={"json": "omit_default"})
    write_drain_idle: int = field(default=8, metadata={"json": "omit_default"})
    # among commands ready in the same cycle: the oldest request's (`oldest`), or the first bank after
    # the one served last (`round_robin`, DRAMsim3's scan of its per-bank command queues)
    bank_arbitration: str = field(default="oldest", metadata={"json": "omit_default"})
    # how a refresh closes its banks: the rank's precharge-all command where the part has one
    # (`all_bank`), or one PRE per open bank, first ready first (`per_bank`, DRAMsim3)
    refresh_precharge: str = field(default="all_bank", metadata={"json": "omit_default"})
    # a two-cycle ACT issues its second cycle (LPDDR5 ACT-2) in the first idle command cycle, at the
    # latest tAAD after the first, and no other ACT issues meanwhile (Ramulator 2's LPDDR5 controller)
    split_activate: bool = field(default=False, metadata={"json": "omit_default"})
    # a RD/WR issued once the data clock has stopped (tWCKPST after the last burst) is preceded by a
    # one-cycle sync command (LPDDR5 CAS with WCK2CK sync; Ramulator 2 wck_sync_mode need_sync)
    data_clock_sync: bool = field(default=False, metadata={"json": "omit_default"})
    # the ordered-stream timer's refresh: every unit first due at tREFI (False), or staggered, unit k of
    # n first due at (k + 1) tREFI / n (True), as the request-level controller always does
    refresh_stagger: bool = field(default=False, metadata={"json": "omit_default"})


@dataclass(frozen=True)
class Region:
    name: str
    offset_bytes: int
    size_bytes: int
    cacheable: bool
    layout: str                   # host_friendly, pim_aware
    holds: tuple[str, ...]        # weights, kv_cache, buffers, activations
    span: Span = field(compare=False, repr=False)
    set_by: tuple[Span, ...] = field(default=(), compare=False, repr=False)   # `--set`s that changed its room


@dataclass(frozen=True)
class RegisterFile:
    name: str
    count: int
    width_bits: int
    # where one copy of the file sits when not with each unit: `rank` is one file per rank shared by
    # the rank's units (a buffer on the rank's buffer chip); "" is one per unit (the unit's placement)
    placement: str = field(default="", metadata={"json": "omit_default"})


@dataclass(frozen=True)
class PimUnit:
    name: str
    placement: str                # bank, bank_pair, bank_group, rank, buffer_chip, channel
    simd_width_bits: int
    dtype: str
    lanes: int                    # derived: SIMD width / dtype width
    row_buffers: str              # single, dual
    register_files: tuple[RegisterFile, ...]
    operations: tuple[str, ...]
    commands: tuple[CommandDecl, ...]
    rules: tuple[TimingRule, ...]
    windows: tuple[TimingWindow, ...]
    timing_cycles: dict[str, int]
    global_buffer_bytes: int
    clock_hz: float | None
    span: Span = field(compare=False, repr=False)
    programs: tuple = field(default=(), metadata={"json": "omit_default"})   # PimProgram per op class it runs (ir/pim_program.py)

    def program(self, op_class: str):
        return next((p for p in self.programs if p.op_class == op_class), None)


@dataclass(frozen=True)
class Memory:
    name: str
    count: int                    # identical instances (8 NDP-DIMMs)
    part: DramSpec
    organization: Organization    # the part's, with this memory's overrides
    address_map: tuple[str, ...]  # most significant field first
    address_bits: dict[str, tuple[int, int]]   # field -> (low bit, width)
    offset_bits: int
    interleave_bytes: int
    capacity_bytes: int           # one instance
    peak_bandwidth_bytes_per_s: float   # one instance, all channels
    controller: Controller
    regions: tuple[Region, ...]
    pim: PimUnit | None
    pim_units: int                # derived: PIM units in one instance
    span: Span = field(compare=False, repr=False)
    set_by: tuple[Span, ...] = field(default=(), compare=False, repr=False)   # `--set`s that changed its size


@dataclass(frozen=True)
class Cache:
    name: str
    size_bytes: int
    shared: bool


@dataclass(frozen=True)
class KernelCalibration:
    """The fitted quantities of the measured GPU kernel model (`interpreter/host/gpu_kernel.py`),
    a `calibration { ... }` block of a `gpu`: fitted together on one model at TP 1 per GPU."""
    launch_latency_s: float       # the floor of one kernel (launch, pipeline fill, tail)
    memory_efficiency: float      # achieved fraction of memory_bandwidth by a GEMM's operand stream
    tensor_efficiency: float      # achieved fraction of a per-SM tensor peak in a tile's main loop
    elementwise_efficiency: float   # achieved fraction of memory_bandwidth by element-wise kernels
    exposed_fraction: float       # the share of the shorter roof (compute or memory) not hidden under the longer


@dataclass(frozen=True)
class Processor:
    name: str
    kind: str                     # cpu, gpu, npu
    count: int
    clock_hz: float | None
    cores: int
    peak_flops: dict[str, float]  # per datatype, FLOP/s
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float   # achievable
    efficiency: float             # fraction of peak a dense kernel reaches
    caches: tuple[Cache, ...]
    threads: dict[str, int]       # e.g. gemm and copy threads
    systolic_arrays: int
    systolic_rows: int
    systolic_cols: int
    vector_units: int
    vector_width: int
    systolic_issue: str           # overlapped (tiles pipelined under the weight stream) or in_order
    span: Span = field(compare=False, repr=False)
    # PIM instructions the processor issues per clock cycle to all channels together (one
    # instruction queue); 0: no limit
    pim_issue_rate: int = field(default=0, metadata={"json": "omit_default"})
    # how the processor dispatches PIM work: overlapped (every request's instructions as one stream)
    # or grouped (one request group in flight, groups cut by the scratchpad: loops/iteration_serving/layer_segments.py)
    # or batch (the whole (sub-)batch as one group)
    pim_dispatch: str = field(default="overlapped", metadata={"json": "omit_default"})
    scratchpad_bytes: int = field(default=0, metadata={"json": "omit_default"})
    # overlapped (GEMVs pipelined like GEMM tiles) or serial (each GEMV's preloads wait for the
    # previous instruction to finish: host/models.py serial_gemv_cycles)
    systolic_gemv_issue: str = field(default="overlapped", metadata={"json": "omit_default"})
    # power of one instance while busy and while idle (run energy, interpreter/run_energy.py); 0: not declared
    active_power_w: float = field(default=0.0, metadata={"json": "omit_default"})
    idle_power_w: float = field(default=0.0, metadata={"json": "omit_default"})
    # memories whose power the declared power already includes (a board power with its own DRAM on it):
    # their standby and host accesses are not counted again
    power_covers: tuple[str, ...] = field(default=(), metadata={"json": "omit_default"})
    # a gpu with a `calibration` block is timed by the measured GPU kernel model
    calibration: KernelCalibration | None = field(default=None, metadata={"json": "omit_default"})


@dataclass(frozen=True)
class Collective:
    """How collectives run over a link (`collective { ... }` of a `link`; host/collectives.py):
    the algorithm, and the per-step latency and bus bandwidth it achieves (fitted on measured
    all-reduce curves, so marked as calibration in the spec)."""
    algorithm: str                # ring or tree
    step_latency_s: float
    bus_bandwidth_bytes_per_s: float


@dataclass(frozen=True)
class Link:
    name: str
    kind: str                     # pcie, dimm_link, nvlink, on_chip, ...
    count: int
    bandwidth_bytes_per_s: float  # one direction, one instance
    latency_s: float
    endpoints: tuple[str, ...]
    span: Span = field(compare=False, repr=False)
    collective: Collective | None = field(default=None, metadata={"json": "omit_default"})
    # energy to move one bit across it (run energy, interpreter/run_energy.py); 0: not declared
    energy_per_bit_j: float = field(default=0.0, metadata={"json": "omit_default"})


@dataclass(frozen=True)
class Storage:
    """A storage device (disk, SSD, flash) that holds weight blobs outside main memory.

    A read of `n` bytes by one reader takes `read_latency_s + n / read_bandwidth_bytes_per_s`
    when it reads alone; concurrent readers share the device's bandwidth."""
    name: str
    kind: str                     # disk, ssd, flash
    capacity_bytes: int
    read_bandwidth_bytes_per_s: float   # whole device
    read_latency_s: float               # per read request (one blob)
    span: Span = field(compare=False, repr=False)
