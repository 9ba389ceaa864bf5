"""GemmSpec validates its own consistency in __post_init__: each broken combination fails at construction."""

from __future__ import annotations

import pytest

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe

E4, E5, BF16, FP16, FP32 = DType.E4M3, DType.E5M2, DType.BF16, DType.FP16, DType.FP32

# Every valid combination warploom plans, one of each kind: these must construct.
VALID = [
    dict(m=1, n=8, k=1),
    dict(m=0, n=0, k=0),
    dict(m=296, n=520, k=1000, b_layout=BLayout.N_MAJOR),
    dict(m=64, n=64, k=64, a_dtype=FP16, b_dtype=FP16, out_dtype=FP32),
    dict(m=64, n=64, k=64, a_dtype=E4, b_dtype=E4, scale=ScaleRecipe.TENSORWISE),
    dict(m=64, n=64, k=64, a_dtype=E5, b_dtype=E4, scale=ScaleRecipe.ROWWISE, bias_dtype=BF16),
    dict(m=64, n=64, k=64, a_dtype=E4, b_dtype=E5, scale=ScaleRecipe.ROWWISE, accumulation=Accumulation.PROMOTED),
]

# (fields, what the message must mention)
INVALID = [
    (dict(m=-1, n=8, k=8), "sizes must be >= 0"),
    (dict(m=8, n=-8, k=8), "sizes must be >= 0"),
    (dict(m=8, n=8, k=-1), "sizes must be >= 0"),
    (dict(m=8, n=8, k=8, a_dtype=E4, b_dtype=BF16, scale=ScaleRecipe.TENSORWISE), "mixes fp8 and 16-bit"),
    (dict(m=8, n=8, k=8, a_dtype=BF16, b_dtype=E4), "mixes fp8 and 16-bit"),
    (dict(m=8, n=8, k=8, a_dtype=BF16, b_dtype=FP16), "16-bit inputs must match"),
    (dict(m=8, n=8, k=8, a_dtype=FP32, b_dtype=FP32), "cannot be fp32"),
    (dict(m=8, n=8, k=8, a_dtype=E4, b_dtype=E4, scale=ScaleRecipe.ROWWISE, b_layout=BLayout.N_MAJOR),
     "K_MAJOR"),
    (dict(m=8, n=8, k=8, a_dtype=E4, b_dtype=E4), "need a scale recipe"),
    (dict(m=8, n=8, k=8, scale=ScaleRecipe.TENSORWISE), "need a scale recipe"),
    (dict(m=8, n=8, k=8, accumulation=Accumulation.PROMOTED), "PROMOTED"),
    # (no kernel stores e2m1 or e8m0, nor reads an fp8 bias: e2m1 once failed deep in the planner, e8m0 built)
    (dict(m=8, n=8, k=8, out_dtype=DType.E2M1), r"^out_dtype: expected bf16, fp16, fp32, e4m3 or e5m2, got e2m1"),
    (dict(m=8, n=8, k=8, out_dtype=DType.E8M0), r"^out_dtype: .*Fix: pass out_dtype=DType.BF16"),
    (dict(m=8, n=8, k=8, a_dtype=E4, b_dtype=E4, scale=ScaleRecipe.ROWWISE, bias_dtype=E4),
     r"^bias_dtype: expected None, bf16, fp16 or fp32, got e4m3"),
]


@pytest.mark.parametrize("fields", VALID, ids=lambda f: GemmSpec(**f).short())
def test_valid_specs_construct(fields: dict) -> None:
    spec = GemmSpec(**fields)
    assert spec.is_fp8 == fields.get("a_dtype", BF16).is_fp8
    assert spec.flops == 2 * fields["m"] * fields["n"] * fields["k"]


@pytest.mark.parametrize("fields,needle", INVALID, ids=[n + f"-{i}" for i, (_, n) in enumerate(INVALID)])
def test_invalid_specs_rejected(fields: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        GemmSpec(**fields)


def test_spec_is_frozen_and_hashable() -> None:
    a = GemmSpec(128, 256, 64)
    assert hash(a) == hash(GemmSpec(128, 256, 64))
    assert a != GemmSpec(128, 256, 64, b_layout=BLayout.N_MAJOR)
    with pytest.raises(AttributeError):
        a.m = 4  # type: ignore[misc]


def test_short_names_distinguish_recipe_dtype_and_size() -> None:
    base = GemmSpec(64, 64, 64, E4, E4, BF16, scale=ScaleRecipe.ROWWISE)
    variants = [
        base,
        GemmSpec(64, 64, 64, E4, E4, BF16, scale=ScaleRecipe.TENSORWISE),
        GemmSpec(64, 64, 64, E4, E4, BF16, scale=ScaleRecipe.ROWWISE, accumulation=Accumulation.PROMOTED),
        GemmSpec(64, 64, 64, E5, E4, BF16, scale=ScaleRecipe.ROWWISE),
        GemmSpec(64, 64, 64, E4, E4, FP32, scale=ScaleRecipe.ROWWISE),
        GemmSpec(64, 64, 128, E4, E4, BF16, scale=ScaleRecipe.ROWWISE),
    ]
    names = [v.short() for v in variants]
    assert len(set(names)) == len(names), names
    assert base.short() == "e4m3xe4m3->bf16 rowwise 64x64x64 b=k_major"


def test_hand_built_specs_are_checked_by_field() -> None:
    """warploom.GemmSpec is public: a field of the wrong kind is named with its fix (never an AttributeError), and
    a grouping's count must be at least one group."""
    import torch

    from warploom.errors import ArgumentTypeError, InputError
    from warploom.spec import Grouping

    with pytest.raises(ArgumentTypeError, match="^m: expected an int, got str '4096'. Fix:"):
        GemmSpec("4096", 8, 8)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="^a_dtype: expected a warploom DType.*Fix: pass e.g. a_dtype=DType"):
        GemmSpec(8, 8, 8, torch.bfloat16)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="^groups: expected a grouped spec has groups >= 1"):
        GemmSpec(8, 8, 8, grouping=Grouping.OFFSETS, groups=-1)
    # (a torch dtype as bias_dtype read `.value` in the refusal; a function as epilogue failed in the planner)
    for bias in (torch.bfloat16, "bf16"):
        with pytest.raises(ArgumentTypeError, match="^bias_dtype: expected None or a warploom DType.*Fix: pass "
                                                    "bias_dtype=DType.BF16"):
            GemmSpec(8, 8, 8, bias_dtype=bias)  # type: ignore[arg-type]
    for fn in (torch.relu, "relu", lambda acc: acc):
        with pytest.raises(ArgumentTypeError, match="^epilogue: expected None or a captured EpilogueGraph.*Fix: "
                                                    "pass the function as epilogue=fn"):
            GemmSpec(8, 8, 8, epilogue=fn)  # type: ignore[arg-type]
