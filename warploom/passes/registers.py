"""Register budgets: few for the producer (it only issues TMA), many for the consumers' accumulators."""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir


@dataclass(frozen=True)
class AssignRegisters:
    """Attributes:
    producer, consumer: per-thread registers (setmaxnreg takes multiples of 8 in [24, 256]).
    A scale partition whose pass set its budget keeps it (sm_100a seed 000's, a warpgroup of its own sized by its
    scales a row: passes/blackwell_scales.py)."""

    producer: int
    consumer: int

    def __call__(self, m: ir.Module) -> ir.Module:
        # A scale partition only issues copies: the producer's budget.
        # sm_100a: the MMA warp only issues too; the epilogue partition holds accumulator blocks.
        regs = {ir.Role.PRODUCER: self.producer, ir.Role.SCALES: self.producer, ir.Role.CONSUMER: self.consumer,
                ir.Role.MMA: self.producer, ir.Role.EPILOGUE: self.consumer}
        return replace(m, partitions=tuple(
            p if p.role is ir.Role.SCALES and p.regs else replace(p, regs=regs[p.role]) for p in m.partitions))
