"""hipDNN serialized graphs (FlatBuffers) -> sigdnn graphs.

The specification is hipDNN's published schema, rocm-libraries
``projects/hipdnn/flatbuffers_sdk/schemas`` (namespace
``hipdnn_flatbuffers_sdk.data_objects``): ``graph.fbs`` with its 23-member
``NodeAttributes`` union, ``tensor_attributes.fbs``, ``data_types.fbs`` and
the attribute tables. Slot numbers (``schema.FIELDS``) are the field positions in those
tables (a union field takes two slots: its type, then its value). This is
the layout the ``data_sdk`` schemas already had for Graph, Node, tensors and
the pointwise / batchnorm / convolution / matmul tables; the oldest
``hipdnn_sdk`` schema (Node without ``compute_data_type``) is recognized
and refused. hipDNN declares no file_identifier and no schema version, so
the reader relies on the layout alone and checks every field it reads.

Read with sigdnn's bounds-checked FlatBuffers reader: malformed bytes are a
SchemaError, a well-formed graph sigdnn cannot express a GraphError naming
the node and field. Metadata with no effect on results is not carried
(Graph ``preferred_engine_id`` names a hipDNN engine; ``id``,
``min_required_engine_api_version``, tensor ``alignment``, reduction
``is_deterministic``, sdpa ``implementation``, the ``umd_flops`` /
``umd_bytes`` cost strings); every other field that is set and not mapped
is refused.

``reader`` reads the buffer and hands each node's attribute table to the one
mapper registered for it (``mapping.maps``); the mappers live one module per
op family: ``norms``, ``conv``, ``matmul``, ``pointwise``, ``attention``,
``reduce_pool``.
"""

from sigdnn.importers.hipdnn.reader import SCHEMA, HipdnnReader, load, to_sdg

__all__ = ["SCHEMA", "HipdnnReader", "load", "to_sdg"]
