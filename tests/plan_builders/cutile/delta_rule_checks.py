"""Checks the emulated delta-rule tests share: validation on the emulator, and bugs planted in a kernel's text."""

from __future__ import annotations

from emulated import emulated_executor

import sigdnn
from sigdnn.plan_builders.cutile import delta_rule, delta_rule_kernel


def check(graph, inputs, builder: str) -> sigdnn.validation.ValidationReport:
    report = sigdnn.validate(graph, inputs, executor=emulated_executor(), truth="cpu")
    assert report.builders == {"n": builder}
    return report


def plant(monkeypatch, name: str, right: str, wrong: str) -> None:
    """``delta_rule``'s source function ``name`` with ``right`` replaced by ``wrong`` in its text."""
    real = getattr(delta_rule_kernel, name)

    def planted(shape, **options):
        source = real(shape, **options)
        assert right in source.text
        return delta_rule_kernel.KernelSource(source.prefix, source.text.replace(right, wrong))

    monkeypatch.setattr(delta_rule, name, planted)
