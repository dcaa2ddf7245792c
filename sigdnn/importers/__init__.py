"""Importers: graphs from where users have them, turned into sigdnn graphs.

One mapping layer per source format, each op mapped in one place:
``sigdnn.importers.onnx`` (ONNX models, needs ``sigdnn[onnx]``),
``sigdnn.importers.hipdnn`` (hipDNN's serialized FlatBuffers graphs) and
``sigdnn.importers.cudnn_json`` (cuDNN-frontend graph JSON). Each exposes
``load(...) -> Graph`` and ``to_sdg(bytes) -> bytes``; ``sigdnn.io``'s graph
reader detects the three formats (``sigdnn.importers.detect``) so
``sigdnn run / inspect / validate`` take their files as they are.
"""
