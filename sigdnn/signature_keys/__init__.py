"""Signature keys: frozen, hashable, readable identities of a node's kind."""

from sigdnn.signature_keys.base import SignatureKey, key_for

__all__ = ["SignatureKey", "key_for"]
