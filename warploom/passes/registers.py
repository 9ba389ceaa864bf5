"""Register budgets: few for the producer (it only issues TMA), many for the consumers' accumulators."""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir


@dataclass(frozen=True)
class AssignRegisters:
    """Attributes:
    producer, consumer: per-thread registers (setmaxnreg takes multiples of 8 in [24, 256]).
    scales: a scale partition's budget (0: the producer's; sm_100a seed 000's is a warpgroup of its own)."""

    producer: int
    consumer: int
    scales: int = 0

    def __call__(self, m: ir.Module) -> ir.Module:
        # A scale partition only issues copies: the producer's budget.
        # sm_100a: the MMA warp only issues too; the epilogue partition holds accumulator blocks.
        regs = {ir.Role.PRODUCER: self.producer, ir.Role.SCALES: self.scales or self.producer,
                ir.Role.CONSUMER: self.consumer, ir.Role.MMA: self.producer, ir.Role.EPILOGUE: self.consumer}
        return replace(m, partitions=tuple(replace(p, regs=regs[p.role]) for p in m.partitions))
