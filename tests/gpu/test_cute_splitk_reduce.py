"""The split-K reduction (kernels/splitk_reduce.py) on a GPU: every lane count, against a float64 sum.

Each output is the float32 sum of its slices rounded once to the output's
dtype; the order of the float32 additions is the kernel's own, so the
float64 sum is met within the float32 bound for any order of that many
terms, then the output's rounding. Run twice, the result must not change.
Skips without a GPU, torch, nvidia-cutlass-dsl or sm_90.
"""

from __future__ import annotations

import pytest
from cute_skip import skip_unless_sm90

pytestmark = pytest.mark.gpu

skip_unless_sm90("the CuTe split-K reduction")
torch = pytest.importorskip("torch")

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize(
    ("splits", "total"),
    [(2, 36864), (3, 388), (5, 4), (7, 4 * 2311), (19, 1028), (43, 36864), (64, 260)],  # lanes 1 1 2 2 8 16 16
)
def test_the_reduction_adds_every_slice_once(dtype: str, splits: int, total: int) -> None:
    from sigdnn.plan_builders.cute.kernels.splitk_reduce import SplitKReduceLaunch

    gen = torch.Generator(device="cuda").manual_seed(splits * 1000 + total)
    parts = torch.randn(splits, total, device="cuda", generator=gen) * torch.rand(total, device="cuda", generator=gen)
    out = torch.full((total + 4,), float("nan"), device="cuda", dtype=DTYPES[dtype])  # 4 past the end: untouched
    launch = SplitKReduceLaunch(dtype, total, splits)
    stream = torch.cuda.current_stream().cuda_stream
    launch(parts.data_ptr(), out.data_ptr(), stream)
    first = out.clone()
    launch(parts.data_ptr(), out.data_ptr(), stream)
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.uint8), first.view(torch.uint8))  # the same bits every run
    assert out[total:].isnan().all()
    want = parts.double().sum(0)
    bound = splits * 2.0**-24 * parts.double().abs().sum(0)  # float32 additions in any order
    if dtype != "float32":  # the output's rounding: half an ulp, or half the subnormal spacing
        unit, tiny = {"bfloat16": (2.0**-8, 2.0**-134), "float16": (2.0**-11, 2.0**-25)}[dtype]
        bound += torch.maximum((want.abs() + bound) * unit, torch.full_like(bound, tiny))
    err = (out[:total].double() - want).abs()
    assert (err <= bound).all(), f"worst {float((err - bound).max())} past the bound"


def test_a_total_off_the_vector_is_declined() -> None:
    from sigdnn.plan_builders.cute.kernels.splitk_reduce import SplitKReduceLaunch

    with pytest.raises(ValueError, match="multiple of 4"):
        SplitKReduceLaunch("float32", 6, 2)
