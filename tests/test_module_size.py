"""No module of the package over 500 lines, except kernel text (issue #33's house rule).

A module that grows past it holds several jobs; cut it along its seams (the emulator's loads and dtype
conversions, the importers' per-family mappings). Kernel files are exempt: a kernel reads best whole.
"""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "sigdnn"
LIMIT = 500
KERNEL_TEXT = {  # a kernel's own text, or device functions copied into generated kernels
    "plan_builders/cute/kernels/fmha_bwd_sm90.py",
    "plan_builders/cute/kernels/fmha_sm90.py",
    "plan_builders/cute/kernels/gemm_sm90.py",
    "plan_builders/cutile/_f32math.py",
    "plan_builders/cutile/delta_rule_kernel.py",
}


def _long_modules() -> dict[str, int]:
    lengths = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name.startswith("schemas/"):  # flatc's generated readers
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > LIMIT:
            lengths[name] = lines
    return lengths


def test_no_module_outside_kernel_text_is_over_500_lines() -> None:
    over = {name: n for name, n in _long_modules().items() if name not in KERNEL_TEXT}
    assert not over, f"modules over {LIMIT} lines (cut them along their seams): {over}"


def test_every_exempt_kernel_file_exists() -> None:
    """An exemption outliving its file would let a new module of that name through unchecked."""
    missing = [name for name in KERNEL_TEXT if not (PACKAGE / name).is_file()]
    assert not missing
