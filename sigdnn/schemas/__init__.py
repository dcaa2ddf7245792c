"""FlatBuffers bindings generated from schemas/*.fbs; do not edit."""
