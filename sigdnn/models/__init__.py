"""Whole-model graphs built with sigdnn's graph API, sizes as parameters.

Each function returns a ``Graph`` whose inputs are the model's activations and
parameters (named after torch's modules: ``layer1.0.conv1.w``) and whose
outputs are its results (and, for the training graphs, every parameter's
gradient as ``d.<parameter>``). They are what ``benchmarks/models.py`` times
and what ``tests/models`` checks against torch; a user can run, validate or
serialize them like any graph. Data movement is declared as views where the
strides allow (``sigdnn.graph.views``), so the executor runs no step for it.

- ``resnet50`` / ``resnet50_training``: ResNet-50 (v1.5) inference with
  batchnorm folded into conv biases, and one training step's forward and
  backward from a given loss gradient;
- ``llama_layer``: a Llama-style decoder layer, forward or forward + backward;
- ``vit``: ViT-B/16 (any size) forward.

To validate them at full width, draw their inputs with ``sigdnn.validation.initialized_inputs`` (weights at
a model's initialization scale): validation's own draw grows activations layer by layer.
"""

from sigdnn.models.llama import llama_layer
from sigdnn.models.resnet50 import resnet50, resnet50_training
from sigdnn.models.vit import vit

__all__ = ["llama_layer", "resnet50", "resnet50_training", "vit"]
