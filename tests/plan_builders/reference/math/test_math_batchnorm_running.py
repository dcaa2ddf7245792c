"""batchnorm_train's running outputs exist only when running mean, running variance and momentum all come."""

from __future__ import annotations

import numpy as np

from sigdnn.plan_builders.reference.math import batchnorm_train


def test_running_outputs_need_all_three_inputs() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4))
    scale, bias, rm, rv = (rng.standard_normal((1, 3, 1)) for _ in range(4))
    given = [(rm, None, 0.1), (None, rv, 0.1), (rm, rv, None)]
    for running_mean, running_var, momentum in given:
        *_, next_mean, next_var = batchnorm_train(x, scale, bias, 1e-5, running_mean, running_var, momentum)
        assert next_mean is None and next_var is None
    *_, next_mean, next_var = batchnorm_train(x, scale, bias, 1e-5, rm, rv, 0.25)
    mean, var = x.mean(axis=(0, 2), keepdims=True), x.var(axis=(0, 2), keepdims=True, ddof=1)
    np.testing.assert_allclose(next_mean, 0.75 * rm + 0.25 * mean, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(next_var, 0.75 * rv + 0.25 * var, rtol=1e-14, atol=1e-15)
