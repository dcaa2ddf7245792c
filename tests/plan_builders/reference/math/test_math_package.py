"""The math package exports what its __all__ names: each name a function of its submodules."""

from __future__ import annotations

import inspect

import sigdnn.plan_builders.reference.math as math_package


def test_every_exported_name_is_a_function_of_the_package() -> None:
    assert len(math_package.__all__) == len(set(math_package.__all__)) == 20
    for name in math_package.__all__:
        fn = getattr(math_package, name)
        assert inspect.isfunction(inspect.unwrap(fn)), name
        assert fn.__module__.startswith("sigdnn.plan_builders.reference.math."), name


def test_star_import_gives_exactly_the_exported_names() -> None:
    scope: dict = {}
    exec("from sigdnn.plan_builders.reference.math import *", scope)
    assert sorted(k for k in scope if k != "__builtins__") == sorted(math_package.__all__)
