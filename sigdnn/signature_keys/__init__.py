"""Signature keys: frozen, hashable, readable identities of a node's kind."""

from sigdnn.signature_keys.base import SignatureKey
from sigdnn.signature_keys.keys import ConvFpropKey, MatmulKey, PointwiseKey, key_for

__all__ = ["ConvFpropKey", "MatmulKey", "PointwiseKey", "SignatureKey", "key_for"]
