"""Address decoding: a byte address to DRAM coordinates under a memory's address map."""
from __future__ import annotations

from .hardware import Memory


def decode_address(memory: Memory, address: int) -> dict[str, int]:
    """The DRAM coordinates of a byte address under the memory's address map."""
    return {name: (address >> low) & ((1 << width) - 1) for name, (low, width) in memory.address_bits.items()}


def row_stride(memory: Memory) -> int:
    """Bytes between consecutive row indices (the row field's lowest address bit)."""
    return 1 << memory.address_bits["row"][0]
