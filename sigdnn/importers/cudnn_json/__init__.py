"""cuDNN-frontend graph JSON -> sigdnn graphs.

The format is what ``cudnn_frontend::graph::Graph::serialize(json&)`` writes
(``json_version`` "2.0"; NVIDIA/cudnn-frontend ``graph_interface.h``,
``graph_properties.h``, ``utils/serialize.h``): a ``context`` with the
graph's data types, ``tensors`` (uid, name, data_type, dim, stride,
is_virtual, is_pass_by_value, pass_by_value, reordering_type) and ``nodes``
(tag, name, compute_data_type, inputs and outputs as port -> uid, and the
op's attributes). As the frontend writes them, float attributes are the
hexadecimal bits of a float32 ("3F800000"; plain numbers are accepted too),
enums are their names, and a pass-by-value is ``{"index", "value"}`` over
(int64, int32, half, float, double, bfloat16).

Tags mapped: CONV_FPROP, CONV_DGRAD, CONV_WGRAD, POINTWISE, MATMUL,
REDUCTION, BATCHNORM, BATCHNORM_INFERENCE, DBN, LAYER_NORM,
LAYER_NORM_BPROP, RMS_NORM, RMS_NORM_BPROP, RESAMPLE (pooling modes),
RESHAPE, TRANSPOSE, SLICE, CONCATENATE, SDPA, SDPA_BWD. Any other tag is
collected into one error; a key a mapping does not understand, or a value
sigdnn cannot honour, is a GraphError naming the node. Device hints with no
effect on results are not carried: context ``sm_count``,
``is_dynamic_shape_enabled``, ``gid``, the version strings, tensor
``alignment``, reduction ``is_deterministic``, sdpa ``implementation``.

``reader`` reads the document (``json_values`` gives typed access to its
values) and hands each node to the one mapper registered for its tag
(``mapping.maps``); the mappers live one module per op family: ``conv``,
``matmul``, ``pointwise``, ``norms``, ``reduce_pool``, ``movement``,
``attention``.
"""

from sigdnn.importers.cudnn_json.reader import JSON_VERSION, JsonImporter, load, to_sdg

__all__ = ["JSON_VERSION", "JsonImporter", "load", "to_sdg"]
