"""Epilogue operand names that the generated kernel uses itself are refused by name (issue 28 #3), and the list of
generated names (warploom/epilogue/names.py) covers what the emitters write: every backend's kernels regenerated."""

from __future__ import annotations

import io
import keyword
import re
import tokenize
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import warploom
from warploom import InputError
from warploom.device import B200, GFX1250, H100_SXM
from warploom.epilogue import names

BF16, E4 = torch.bfloat16, torch.float8_e4m3fn
OPERANDS = ("zz", "yy", "xx")  # names no emitter writes, so every identifier containing one is derived from it
INTERNAL = ("scale_a", "scale_b", "bias")  # scaled_mm's own graph operands: derived names like the user's


def m(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


def identifiers(src: str) -> set[str]:
    """The bare names of Python source: not attributes (`gl.load`), not keyword arguments (`mask=`)."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(src).readline)
            if t.type not in (tokenize.NL, tokenize.COMMENT)]
    out, depth = set(), 0
    for i, t in enumerate(toks):
        if t.type == tokenize.OP:
            depth += (t.string in "([{") - (t.string in ")]}")
        elif t.type == tokenize.NAME and not (i and toks[i - 1].string == ".") and not (
                depth and i + 1 < len(toks) and toks[i + 1].string == "="):
            out.add(t.string)
    return out


def kernels() -> Iterator[Any]:
    """Kernels of every backend: decode (swapped), small, large, split-K; one and two outputs; fp8 recipes."""
    one = lambda acc, zz, yy, xx: torch.relu(acc * zz + yy + xx)  # noqa: E731
    two = lambda acc, zz, yy, xx: (acc * zz + yy, (acc + xx).float())  # noqa: E731
    for dev in (H100_SXM, B200, GFX1250):
        for mm, n, k in ((16, 256, 256), (512, 256, 256), (128, 128, 16384)):
            ops = dict(zz=m(mm, n), yy=m(mm, 1), xx=m(n))
            for fn in (one, two):
                yield warploom.plan(m(mm, k), m(k, n), device=dev, epilogue=fn, **ops)
            if dev is GFX1250:
                continue
            for sa, sb in ((torch.ones((), device="meta"), torch.ones((), device="meta")),
                           (torch.ones(mm, 1, device="meta"), torch.ones(1, n, device="meta")),
                           (torch.ones(mm, k // 128, device="meta"), torch.ones(k // 128, n // 128, device="meta"))):
                try:
                    yield warploom.plan(m(mm, k, dtype=E4), m(n, k, dtype=E4).t(), sa, sb, bias=m(n), device=dev,
                                        use_fast_accum=dev is B200, epilogue=one, **ops)
                except warploom.UnsupportedError:  # (sm_100a plans no blockwise scales yet)
                    pass


def test_the_generated_names_cover_every_backends_kernels() -> None:
    seen: set[str] = set()
    for k in kernels():
        seen |= identifiers(k.source)
        if k.tail is not None:
            seen |= identifiers(k.tail_gluon.source)
    assert len(seen) > 100
    derived = [i for i in seen if i.startswith(OPERANDS + INTERNAL)]
    fixed = {i for i in seen if i not in derived and not i.startswith("warploom_") and not keyword.iskeyword(i)}
    missing = sorted(i for i in fixed if i not in names.GENERATED and not names._NUMBERED.fullmatch(i))
    assert missing == [], f"add these generated names to warploom/epilogue/names.py: {missing}"
    forms = {re.sub(r"\d+", "0", d) for d in names.DERIVED}
    suffixes = {re.sub(r"\d+", "0", re.sub(rf"^({'|'.join(OPERANDS + INTERNAL)})", "", i)) for i in derived}
    assert suffixes - {""} <= forms, f"add these operand-derived forms to names.DERIVED: {suffixes - forms}"


@pytest.mark.parametrize("name", ["c", "ep_cols", "c1", "sa", "sb", "workspace"])
def test_an_operand_named_like_a_generated_name_is_refused_by_name(name: str) -> None:
    a, b = torch.randn(48, 64).to(BF16), torch.randn(64, 64).to(BF16)
    fn = eval(f"lambda acc, {name}: acc + 0.5 * {name}")  # noqa: S307 - the parameter's name is the point
    with pytest.raises(InputError) as ei:
        warploom.matmul(a, b, epilogue=fn, **{name: torch.randn(48, 64).to(BF16)})
    msg = str(ei.value)
    assert msg.startswith(f"{name}: ") and "Fix: rename the operand" in msg and ei.value.arg == name
    suggested = re.search(r"e\.g\. (\w+)=", msg)
    assert suggested and not names.generated(suggested.group(1))


@pytest.mark.parametrize("name", ["s", "row", "col", "gl", "res", "scale", "x"])
def test_other_short_names_still_work(name: str) -> None:
    # The name itself is never written bare in a kernel: only what is derived from it must stay clear.
    torch.manual_seed(0)
    a, b, r = torch.randn(48, 64).to(BF16), torch.randn(64, 64).to(BF16), torch.randn(48, 64).to(BF16)
    fn = eval(f"lambda acc, {name}: acc + 0.5 * {name}")  # noqa: S307
    out = warploom.matmul(a, b, epilogue=fn, **{name: r})
    torch.testing.assert_close(out.float(), a.float() @ b.float() + 0.5 * r.float(), atol=0.1, rtol=0.02)
    for dev in (H100_SXM, B200, GFX1250):
        assert warploom.plan(m(48, 64), m(64, 64), device=dev, epilogue=fn, **{name: m(48, 64)}).source


def test_the_generated_names_cover_rule_29s_first_pass() -> None:
    """Rule 29's first pass (a rowwise quantization with N > 256) takes the amax workspace as `amax_ptr` beside the
    operands' pointers: its names are generated ones. (Its cast kernel, after it in the module, takes no operand.)"""
    k = warploom.plan(m(200, 256), m(256, 600), zz=m(200, 1), yy=m(600),
                      epilogue=lambda acc, zz, yy: warploom.quantize(acc * zz + yy, recipe="rowwise"))
    assert k.module.amax_pass is not None and k.gluon.cast_kernel is not None
    seen = identifiers(k.source[:k.source.index(f"def {k.gluon.cast_kernel}(")])
    fixed = {i for i in seen if not i.startswith(OPERANDS + INTERNAL + ("warploom_",)) and not keyword.iskeyword(i)}
    missing = sorted(i for i in fixed if i not in names.GENERATED and not names._NUMBERED.fullmatch(i))
    assert missing == [], f"add these generated names to warploom/epilogue/names.py: {missing}"


def test_an_operand_named_amax_is_refused_by_name() -> None:
    """An operand `amax` would be `amax_ptr` twice in rule 29's first pass (the kernel would not load: a duplicate
    argument), and the launcher would pass the amax workspace for both."""
    fn = lambda acc, amax: warploom.quantize(acc * amax, recipe="rowwise")  # noqa: E731
    with pytest.raises(InputError) as ei:
        warploom.plan(m(200, 256), m(256, 600), amax=m(200, 1), epilogue=fn)
    assert ei.value.arg == "amax" and "Fix: rename the operand" in str(ei.value)


def grouped_kernels() -> Iterator[str]:
    """Grouped kernels' sources with fused epilogues (M-grouped, masked, K-grouped bf16, rowwise and blockwise fp8),
    operands zz dense, yy per group, xx per row."""
    from warploom.checks_grouped import grouped_call
    from warploom.grouped import _fused
    from warploom.kernel import build

    fn = lambda acc, zz, yy, xx: acc * yy + zz * xx  # noqa: E731
    g, mm, n, k = 4, 256, 256, 512
    offs = torch.tensor([64, 64, 200, mm], dtype=torch.int32)
    kw8 = dict(scale_a=torch.ones(mm), scale_b=torch.ones(g, n))
    for a, b, sc, ops in (
            (torch.empty(mm, k, dtype=BF16), torch.empty(g, n, k, dtype=BF16).transpose(-2, -1), {},
             dict(zz=torch.empty(mm, n), yy=torch.empty(g, n), xx=torch.empty(mm, 1))),
            (torch.empty(mm, k, dtype=E4), torch.empty(g, n, k, dtype=E4).transpose(-2, -1), kw8,
             dict(zz=torch.empty(mm, n), yy=torch.empty(g, n), xx=torch.empty(mm, 1)))):
        call = grouped_call(a, b, offs, None, None, sc.get("scale_a"), sc.get("scale_b"))
        sa, sb = (sc["scale_a"][:, None], sc["scale_b"]) if sc else (None, None)
        yield build(_fused(call, fn, ops, scale_a=sa, scale_b=sb)[0].spec, H100_SXM).gluon.text
    koffs = torch.tensor([100, 100, 300, k], dtype=torch.int32)
    kops = dict(zz=torch.empty(g, mm, n), yy=torch.empty(g), xx=torch.empty(g, mm, 1))
    for dt, sa, sb in ((BF16, None, None), (E4, torch.ones(g * mm), torch.ones(g * n)),
                       (E4, torch.ones(mm, k // 128), torch.ones(k // 128, n // 128))):
        a, b = torch.empty(mm, k, dtype=dt), torch.empty(n, k, dtype=dt).t()
        offs_k = torch.tensor([128, 128, 384, k], dtype=torch.int32) if sa is not None and sa.dim() == 2 else koffs
        call = grouped_call(a, b, offs_k, None, None, sa, sb)
        if sa is not None and sa.dim() == 1:
            sa, sb = sa[:, None], sb.reshape(g, 1, n)
        yield build(_fused(call, fn, kops, scale_a=sa, scale_b=sb)[0].spec, H100_SXM).gluon.text


def test_the_generated_names_cover_grouped_kernels() -> None:
    """A grouped kernel's own names (group_ptr, grp, row_end, the K-grouped K range and A-tail names, the clipped
    store's) are generated ones: an operand `group` would be `group_ptr` twice (a kernel that does not load, on the
    GPU only) or, dense by TMA, the launcher would pass the operand as the group bounds."""
    seen: set[str] = set()
    for src in grouped_kernels():
        seen |= identifiers(src)
    fixed = {i for i in seen if not i.startswith(OPERANDS + INTERNAL + ("warploom_",)) and not keyword.iskeyword(i)}
    missing = sorted(i for i in fixed if i not in names.GENERATED and not names._NUMBERED.fullmatch(i))
    assert missing == [], f"add these generated names to warploom/epilogue/names.py: {missing}"


@pytest.mark.parametrize("shape", [(4, 32, 48), (4,)])
def test_an_operand_named_group_is_refused_in_a_k_grouped_call(shape: tuple[int, ...]) -> None:
    a, b = torch.randn(32, 64).to(BF16), torch.randn(48, 64).to(BF16).t()
    fn = lambda acc, group: acc * group  # noqa: E731
    with pytest.raises(InputError) as ei:
        warploom.grouped_mm(a, b, torch.tensor([16, 16, 40, 64], dtype=torch.int32), out_dtype=torch.float32,
                            epilogue=fn, group=torch.ones(*shape))
    assert ei.value.arg == "group" and "Fix: rename the operand" in str(ei.value)
