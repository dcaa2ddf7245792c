"""The normalization methods of Graph's frontend (batchnorm, layernorm, rmsnorm and their backward), mixed into Frontend."""

from __future__ import annotations

from sigdnn.graph.arguments import DTypeLike
from sigdnn.graph.frontend_arguments import (
    parameter_value,
)
from sigdnn.graph.frontend_base import FrontendBase, Maybe, Scalar
from sigdnn.graph.ops.batchnorm import Batchnorm
from sigdnn.graph.ops.batchnorm_backward import BatchnormBackward
from sigdnn.graph.ops.batchnorm_inference import BatchnormInference
from sigdnn.graph.ops.layernorm import Layernorm
from sigdnn.graph.ops.layernorm_backward import LayernormBackward
from sigdnn.graph.ops.rmsnorm import Rmsnorm
from sigdnn.graph.ops.rmsnorm_backward import RmsnormBackward
from sigdnn.graph.tensor import Tensor


class NormFrontend(FrontendBase):
    """Batchnorm, layernorm, rmsnorm and their backward passes."""

    __slots__ = ()

    def batchnorm_inference(
        self,
        x: Tensor,
        mean: Tensor,
        inv_variance: Tensor,
        scale: Tensor,
        bias: Tensor,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """y = (x - mean) * inv_variance * scale + bias; the parameters are [1, C, 1, ...]."""
        inputs = {"x": x, "mean": mean, "inv_variance": inv_variance, "scale": scale, "bias": bias}
        return self._single(self.add_node(BatchnormInference, inputs, name=name, compute_dtype=compute_dtype))

    def batchnorm(
        self,
        x: Tensor,
        scale: Tensor,
        bias: Tensor,
        in_running_mean: Maybe = None,
        in_running_var: Maybe = None,
        epsilon: Scalar = 1e-5,
        momentum: Scalar = 0.1,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Tensor, Tensor, Maybe, Maybe]:
        """Training batchnorm -> (y, mean, inv_variance, next_running_mean, next_running_var).

        Statistics are per channel ([1, C, 1, ...], float32 unless set) over
        N and the spatial dims. The running outputs exist when both running
        inputs are given (None otherwise); ``momentum`` applies to them only.
        epsilon and momentum are numbers or pass-by-value scalar tensors.
        """
        where = f"node '{name or 'batchnorm'}'"
        attributes = {"epsilon": parameter_value(epsilon, f"{where} epsilon")}
        if in_running_mean is not None or in_running_var is not None:
            attributes["momentum"] = parameter_value(momentum, f"{where} momentum")
        inputs = {"x": x, "scale": scale, "bias": bias, "in_running_mean": in_running_mean}
        inputs["in_running_var"] = in_running_var
        node = self.add_node(Batchnorm, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def batchnorm_backward(
        self,
        dy: Tensor,
        x: Tensor,
        scale: Tensor,
        mean: Tensor,
        inv_variance: Tensor,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Batchnorm gradients from the saved statistics -> (dx, dscale, dbias)."""
        inputs = {"dy": dy, "x": x, "scale": scale, "mean": mean, "inv_variance": inv_variance}
        node = self.add_node(BatchnormBackward, inputs, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def layernorm(
        self,
        phase: str,
        x: Tensor,
        scale: Tensor,
        bias: Tensor,
        epsilon: Scalar = 1e-5,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Maybe, Maybe]:
        """Layer normalization over the axes the scale spans -> (y, mean, inv_variance).

        ``phase`` is "training" (statistics written, a 1 in every normalized
        dim, float32 unless set) or "inference" (they are None). Normalized
        axes are those where scale's dim equals x's; the others are batch dims.
        """
        where = f"node '{name or 'layernorm'}'"
        attributes = {"phase": phase, "epsilon": parameter_value(epsilon, f"{where} epsilon")}
        inputs = {"x": x, "scale": scale, "bias": bias}
        node = self.add_node(Layernorm, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def layernorm_backward(
        self,
        dy: Tensor,
        x: Tensor,
        scale: Tensor,
        mean: Tensor,
        inv_variance: Tensor,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Layernorm gradients from the saved statistics -> (dx, dscale, dbias)."""
        inputs = {"dy": dy, "x": x, "scale": scale, "mean": mean, "inv_variance": inv_variance}
        node = self.add_node(LayernormBackward, inputs, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def rmsnorm(
        self,
        phase: str,
        x: Tensor,
        scale: Tensor,
        bias: Maybe = None,
        epsilon: Scalar = 1e-5,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Maybe]:
        """RMS normalization over the axes the scale spans -> (y, inv_variance); bias optional.

        inv_variance is written in the "training" phase only (None in "inference").
        """
        where = f"node '{name or 'rmsnorm'}'"
        attributes = {"phase": phase, "epsilon": parameter_value(epsilon, f"{where} epsilon")}
        inputs = {"x": x, "scale": scale, "bias": bias}
        node = self.add_node(Rmsnorm, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def rmsnorm_backward(
        self,
        dy: Tensor,
        x: Tensor,
        scale: Tensor,
        inv_variance: Tensor,
        has_dbias: bool = False,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Tensor, Maybe]:
        """RMSnorm gradients from the saved inv_variance -> (dx, dscale, dbias); dbias only with has_dbias."""
        inputs = {"dy": dy, "x": x, "scale": scale, "inv_variance": inv_variance}
        attributes = {"has_dbias": bool(has_dbias)}
        node = self.add_node(RmsnormBackward, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]
