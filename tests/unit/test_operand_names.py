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
