"""The zoo shapes whose plan a planner change moves, as `scripts/sweep_plans.py --specs` lines (no GPU needed).

    python3 scripts/plan_changes.py --against HEAD --ops scaled_mm_fp8_blockwise --out changes.txt
    python3 scripts/sweep_plans.py --specs changes.txt --rounds 3 --out sweep.json     # (on the GPU machine)

Plans every zoo shape of each op (`warploom bench --suite zoo`'s shapes, as `for_op` sizes them) for the H200 twice:
with the planner of git revision `--against` (checked out in a temporary worktree) and with the work tree's. Each
shape whose plan differs becomes one line, `case|MxNxK|[old, {}]`: the old plan as the Plan fields that differ,
replaced after planning (sweep_plans' "plan" entry, so it is exactly the revision's plan), then the new planner's.
This is how a planner rule is measured before it lands: every zoo plan it changes, old against new
(docs/decisions/*: "at every zoo shape whose plan it changes").
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

# op -> sweep_plans' case (the ops whose cases sweep_plans builds)
CASES = {"matmul_bf16": "bf16", "scaled_mm_fp8_rowwise_fast": "fp8", "scaled_mm_fp8_rowwise_exact": "fp8-exact",
         "scaled_mm_fp8_blockwise": "blockwise"}

# Run in either tree (only APIs both keep; `record` from this file, which needs nothing of warploom): every zoo
# shape's plan for each op, as {op|MxNxK: record}.
_DUMP = """
import json, sys
sys.path.insert(0, sys.argv[2])
from plan_changes import record
from warploom.benchsuite.shapes import Op, for_op, zoo_shapes
from warploom.device import H200
from warploom.dtypes import DType
from warploom.planner import plan_schedule
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

def spec(s, op):
    if op is Op.MATMUL_BF16:
        return GemmSpec(s.m, s.n, s.k)
    scale = ScaleRecipe.BLOCKWISE_1X128_128X128 if op is Op.SCALED_MM_FP8_BLOCKWISE else ScaleRecipe.ROWWISE
    acc = Accumulation.NATIVE if op is Op.SCALED_MM_FP8_ROWWISE_FAST else Accumulation.PROMOTED
    return GemmSpec(s.m, s.n, s.k, DType.E4M3, DType.E4M3, DType.BF16, scale=scale, accumulation=acc)

out = {}
for name in sys.argv[1].split(","):
    op = Op(name)
    for shape in zoo_shapes():
        s = for_op(shape, op)
        out[f"{name}|{s.m}x{s.n}x{s.k}"] = record(plan_schedule(spec(s, op), H200))
json.dump(out, sys.stdout)
"""


def record(plan: Any) -> dict[str, Any]:
    """A plan as JSON: its name and its fields (enums by value, tuples as lists), what `spec_lines` compares and
    forces."""
    def plain(v: Any) -> Any:
        return v.value if isinstance(v, enum.Enum) else list(v) if isinstance(v, tuple) else v

    return {"short": plan.short(), "fields": {f.name: plain(getattr(plan, f.name)) for f in dataclasses.fields(plan)}}


def plans(tree: str, ops: list[str]) -> dict[str, Any]:
    """The plans `_DUMP` gives with the warploom of `tree`."""
    env = {**os.environ, "PYTHONPATH": tree}
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", _DUMP, ",".join(ops), here], cwd=tree, env=env, capture_output=True,
                          text=True)
    if done.returncode:
        raise SystemExit(f"planning in {tree} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def spec_lines(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One sweep line for each key whose plan differs: the old plan's differing fields forced, then the new plan."""
    lines = []
    for key, was in old.items():
        now = new[key]
        if was["short"] == now["short"] and was["fields"] == now["fields"]:
            continue
        op, size = key.split("|")
        forced = {f: v for f, v in was["fields"].items() if now["fields"].get(f) != v}
        lines.append(f"# {was['short']} -> {now['short']}")  # (sweep_plans skips comment lines)
        lines.append(f"{CASES[op]}|{size}|{json.dumps([{'plan': forced}, {}])}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", default="HEAD", help="the git revision whose planner the work tree's is compared to")
    ap.add_argument("--ops", default=",".join(CASES), help=f"comma-separated zoo ops among {', '.join(CASES)}")
    ap.add_argument("--out", help="write the lines here (default: print them)")
    args = ap.parse_args()
    ops = args.ops.split(",")
    unknown = [o for o in ops if o not in CASES]
    if unknown:
        ap.error(f"--ops {','.join(unknown)}: expected some of {', '.join(CASES)}")
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "tree")
        subprocess.run(["git", "worktree", "add", "--detach", "-q", tree, args.against], cwd=root, check=True)
        try:
            old = plans(tree, ops)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=root, check=True)
    lines = spec_lines(old, plans(root, ops))
    changed = sum(not line.startswith("#") for line in lines)
    text = "".join(line + "\n" for line in lines)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    print(f"{changed} of {len(old)} plans change against {args.against}", file=sys.stderr)


if __name__ == "__main__":
    main()
