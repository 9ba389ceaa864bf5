"""The schedule options a caller may force on the planner (`PlanOptions`), as `plan_schedule` hands them to the
device's target's rule, and the refusal of sm_90a's options by a target whose rule has none of them."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from warploom.errors import ArgumentTypeError, InputError, UnsupportedError
from warploom.target import Target

# `plan_schedule`'s keyword options by the type each takes (None: the rules decide, where the signature allows it).
_COUNTS = ("bm", "bn", "stages", "group_m", "consumer_partitions", "partial_blocks", "split_k", "tail_split")
_FLAGS = ("hoist_rows", "scalar_columns", "prefetch_operands", "pingpong", "scale_partition", "swap_ab")
_BOOL_ONLY = ("scalar_columns", "pingpong")  # (flags whose signature default is a bool: None is no choice there)
_INT_ONLY = ("group_m", "sk_waves")  # (counts whose signature default is an int: None is no choice there)


def check_arguments(spec: Any, device: Any, options: dict[str, Any]) -> None:
    """`plan_schedule`'s arguments by type and sign, before any rule reads them: a string taken for a flag would turn
    it on, a float stream_k would reach the kernel's name, and a wrong spec or device would fail deep in a rule."""
    from warploom.device import check_device
    from warploom.spec import check_spec

    check_spec(spec)
    check_device(device)
    for name in (*_COUNTS, "stream_k", "sk_waves"):
        value = options.get(name)
        if value is None and name not in _INT_ONLY:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentTypeError(name, "an int" + ("" if name in _INT_ONLY else " or None"),
                                    f"{type(value).__name__} {value!r}", f"pass {name} as an int, or leave it out")
        if value < (0 if name in ("stream_k", "sk_waves") else 1):
            raise InputError(name, "a positive int" if name in _COUNTS else "0 or more", str(value),
                             f"pass a {'positive' if name in _COUNTS else 'non-negative'} {name}, or leave it out")
    for name in _FLAGS:
        value = options.get(name)
        if (value is not None or name in _BOOL_ONLY) and not isinstance(value, bool):
            raise ArgumentTypeError(name, "True or False" if name in _BOOL_ONLY else "True, False or None",
                                    f"{type(value).__name__} {value!r}", f"pass {name}=True or {name}=False")
    blocks = options.get("n_blocks")
    if blocks is not None and (isinstance(blocks, (str, bytes)) or not hasattr(blocks, "__iter__")
                               or any(isinstance(w, bool) or not isinstance(w, int) for w in blocks)):
        raise ArgumentTypeError("n_blocks", "a tuple of column-block widths (e.g. (128, 32)), () or None",
                                f"{type(blocks).__name__} {blocks!r}", "pass n_blocks=(128, 32), or leave it out")
    cluster = options.get("cluster")
    if cluster is not None and (isinstance(cluster, bool) or not isinstance(cluster, (int, str))):
        raise ArgumentTypeError("cluster", 'None, 1, 2, "2x1" or "1x2"', f"{type(cluster).__name__} {cluster!r}",
                                'pass cluster=2 (2x1, along M) or cluster="1x2", or leave it out')
    warps = options.get("tdm_warps")
    if warps is not None and not isinstance(warps, TdmWarps):
        raise ArgumentTypeError("tdm_warps", "a warploom.planning.options.TdmWarps or None",
                                f"{type(warps).__name__} {warps!r}", "pass e.g. tdm_warps=TdmWarps.SPLIT")


class TdmWarps(enum.Enum):
    """Rule 20's choice of the warps that issue each TDM copy (seed 004; ir/warps.py). The value is the reason.

    EVERY: every warp its share of both copies (no hint: Triton 3.6 and 3.7 have none). SPLIT: warp 0 issues A's
    whole block and warp 1 B's, so each issuing warp has one copy per block in flight and the other warps only
    compute. ONE: warp 0 issues both. FUSED: SPLIT's warps, each k-block's two copies issued as one fused copy."""

    EVERY = ("every warp issues its share of A's and B's copies: the default, and all Triton < 3.8 can express; no "
             "gfx1250 is at hand to measure a split against it")
    SPLIT = "warp 0 issues A's copies and warp 1 B's (one wave each), the other warps only compute"
    ONE = "warp 0 issues both copies, the other warps only compute"
    FUSED = ("warp 0 loads A's block and warp 1 B's through one fused copy (tdm.async_load_fused), the other warps "
             "only compute")

    def masks(self) -> tuple[int, int]:
        """(A's, B's) issuing-warp bitmasks; 0: every warp."""
        return {TdmWarps.EVERY: (0, 0), TdmWarps.SPLIT: (0b0001, 0b0010), TdmWarps.ONE: (0b0001, 0b0001),
                TdmWarps.FUSED: (0b0001, 0b0010)}[self]



@dataclass(frozen=True)
class PlanOptions:
    """What `plan_schedule` was asked to force (None, or the value that means "none": the rules decide).

    Attributes:
        bm, bn, stages, group_m: the tile, the ring's depth and the raster's group (every target's rule).
        consumer_partitions, partial_blocks, hoist_rows, scalar_columns, prefetch_operands, pingpong,
            scale_partition, split_k, tail_split, swap_ab, stream_k, cluster, n_blocks: sm_90a's schedule options
            (`warploom.planner.plan_schedule` says what each does); sm_100a's rule takes swap_ab, prefetch_operands
            and scalar_columns too.
        tdm_warps: gfx1250's: the warps that issue each TDM copy.
    """

    bm: int | None = None
    bn: int | None = None
    stages: int | None = None
    group_m: int = 8
    consumer_partitions: int | None = None
    partial_blocks: int | None = None
    hoist_rows: bool | None = None
    scalar_columns: bool = True
    prefetch_operands: bool | None = None
    pingpong: bool = False
    scale_partition: bool | None = None
    split_k: int | None = None
    tail_split: int | None = None
    swap_ab: bool | None = None
    stream_k: int | None = None
    tdm_warps: TdmWarps | None = None
    cluster: int | str | None = None
    n_blocks: tuple[int, ...] | None = None

    def refuse_sm90_options(self, target: Target, rule: str, takes: frozenset[str] = frozenset()) -> None:
        """Refuse, by name, each sm_90a schedule option forced on `target`'s `rule` that it does not take too
        (never ignored: a 2-CTA cluster was once planned as one CTA per tile there)."""
        given = {"consumer_partitions": self.consumer_partitions, "partial_blocks": self.partial_blocks,
                 "pingpong": self.pingpong or None, "scale_partition": self.scale_partition,
                 "split_k": None if self.split_k == 1 else self.split_k,
                 "tail_split": None if self.tail_split == 1 else self.tail_split,
                 "hoist_rows": self.hoist_rows, "stream_k": self.stream_k or None,
                 "cluster": None if self.cluster == 1 else self.cluster, "swap_ab": self.swap_ab or None,
                 "prefetch_operands": self.prefetch_operands,
                 "scalar_columns": None if self.scalar_columns else False, "n_blocks": self.n_blocks or None}
        forced_here = {k: v for k, v in given.items() if v is not None and k not in takes}
        if forced_here:
            names = ", ".join(f"{k}={v}" for k, v in forced_here.items())
            raise UnsupportedError(f"{names}: sm_90a schedule options; the {target} schedule ({rule}) has none "
                                   "of them. Fix: drop them, or plan for an sm_90a device")
