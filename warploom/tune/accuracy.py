"""Whether a candidate's output is right: the check every candidate passes before it may be timed or win.

Outputs are compared with a float64 reference of the exact math (``a.float() @ b.float()``, scaled, biased,
through the epilogue), never with another candidate, so one wrong schedule cannot vouch for another:
- every element the reference has finite must be finite: outputs are filled with NaN before each candidate,
  so an element a schedule never wrote shows up here (where the reference itself is NaN or inf, e.g. a
  fused log of a negative, the element is not compared);
- 16-bit inputs: elementwise ``|out - ref| <= atol + rtol |ref|`` with rtol about two units in the last
  place of the output type (fp32 accumulation order is far below that) and atol = rtol x rms(ref), so
  values that cancel to near zero are judged on the output's scale, as the kernel's rounding is;
- fp8 inputs: the scale-free error ``1 - 2 sum(xy) / sum(x^2 + y^2)`` below 1e-3 (1e-2 for an fp8 output,
  whose own rounding is ~3%): fp8's fast accumulation keeps fewer mantissa bits, so an elementwise
  tolerance would be either too loose for bf16 or too tight here; a wrong scale or a swapped tile is far above.
"""

from __future__ import annotations

from typing import Any

FP8_MAX_ERROR = 1e-3
FP8_OUT_MAX_ERROR = 1e-2

# (rtol) per output dtype name: two units in the last place (bf16: 8 bits of mantissa -> 2^-7).
_RTOL = {"bfloat16": 2**-7, "float16": 2**-10, "float32": 1e-4, "float8_e4m3fn": 2**-3, "float8_e5m2": 2**-2}


def scale_free_error(x: Any, y: Any) -> float:
    """1 - 2 sum(xy) / sum(x^2 + y^2) in float64: 0 for equal tensors, blind to a common scale; 0 if both are 0."""
    x, y = x.double(), y.double()
    den = float((x * x + y * y).sum())
    return 0.0 if den == 0.0 else float(1 - 2 * (x * y).sum() / den)


def mismatch(out: Any, ref: Any, *, fp8_inputs: bool) -> str | None:
    """Why `out` is not an acceptable result for reference `ref`, or None when it is."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    o = out.detach().double()  # compared where the output lives: no device-to-host copy of a large tile
    r = ref.detach().to(device=o.device, dtype=torch.float64)
    finite = torch.isfinite(r)
    unwritten = int((finite & ~torch.isfinite(o)).sum())
    if unwritten:
        return (f"{unwritten} of {o.numel()} elements are NaN or inf where the reference is finite "
                "(never written, or overflowed)")
    o, r = o[finite], r[finite]
    if fp8_inputs:
        limit = FP8_OUT_MAX_ERROR if out.dtype.itemsize == 1 else FP8_MAX_ERROR
        err = scale_free_error(o, r)
        return None if err < limit else f"scale-free error {err:.3e} >= {limit:.0e}"
    name = str(out.dtype).removeprefix("torch.")
    rtol = _RTOL.get(name, 1e-4)
    atol = rtol * float(r.square().mean().sqrt()) if r.numel() else 0.0
    bad = (o - r).abs() > atol + rtol * r.abs()
    n_bad = int(bad.sum())
    if not n_bad:
        return None
    worst = float((o - r).abs().max())
    return f"{n_bad} of {o.numel()} elements off by more than {atol:.2e} + {rtol:.1e}|ref| (worst {worst:.3e})"
