"""Recognizing the importable formats from a file's first bytes (and its name), cheaply and without parsing.

Pure byte checks with no sigdnn imports, so ``sigdnn.io`` can call them on
every graph file it reads. A positive answer only routes the bytes to that
format's reader, which judges them fully (and raises SchemaError / GraphError).
"""

from __future__ import annotations

import struct

SDG_IDENTIFIER = b"SDG1"


def is_onnx(data: bytes, path: str) -> bool:
    """An ONNX ModelProto: ``.onnx``, or protobuf field 1 (ir_version, a small varint) followed by another field."""
    if data[4:8] == SDG_IDENTIFIER:
        return False
    if path.lower().endswith(".onnx"):
        return True
    return len(data) >= 4 and data[0] == 0x08 and 0 < data[1] < 32 and data[2] in (0x12, 0x1A, 0x22, 0x2A, 0x3A, 0x42)


def is_cudnn_json(data: bytes, path: str) -> bool:
    """cuDNN-frontend graph JSON: a JSON object naming its ``json_version`` (or a ``.json`` file with nodes)."""
    head = data[:4096].lstrip()
    if not head.startswith(b"{"):
        return False
    return b'"json_version"' in data[: 1 << 20] or (path.lower().endswith(".json") and b'"nodes"' in head)


def is_hipdnn(data: bytes, path: str) -> bool:
    """A hipDNN graph buffer: FlatBuffers without an identifier whose root table has hipDNN's Graph shape.

    hipDNN's schema declares no file_identifier, so the shape decides: a root
    table whose vtable is in bounds, with at most a dozen fields, and a
    vector at the tensors (slot 4) and nodes (slot 5) positions.
    """
    if path.lower().endswith((".hipdnn", ".hdg")):
        return True
    if len(data) < 16 or data[4:8] == SDG_IDENTIFIER:
        return False
    try:
        root = struct.unpack_from("<I", data, 0)[0]
        vtable = root - struct.unpack_from("<i", data, root)[0]
        vt_size, _ = struct.unpack_from("<HH", data, vtable)
        if vt_size % 2 or not 4 <= vt_size <= 4 + 2 * 12 or vtable + vt_size > len(data):
            return False
        slots = struct.unpack_from(f"<{(vt_size - 4) // 2}H", data, vtable + 4)
        if len(slots) < 6 or not slots[5]:
            return False
        for slot in (4, 5):
            if not slots[slot]:
                continue
            field = root + slots[slot]
            target = field + struct.unpack_from("<I", data, field)[0]
            count = struct.unpack_from("<I", data, target)[0]
            if target + 4 + 4 * count > len(data):
                return False
        return True
    except struct.error:
        return False
