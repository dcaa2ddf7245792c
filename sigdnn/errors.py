"""The error hierarchy: every failure sigdnn reports derives from SigdnnError.

Messages name the node and tensor involved, so a user can find the culprit in
a graph of thousands of nodes without a debugger.
"""

from __future__ import annotations


class SigdnnError(Exception):
    """Base class of every error sigdnn raises on purpose."""


class SchemaError(SigdnnError):
    """The bytes are not a well-formed sigdnn graph buffer."""


class GraphError(SigdnnError):
    """The graph is well-formed bytes but breaks a graph rule."""


class GraphFrozenError(GraphError):
    """A planned graph (or one of its tensors or nodes) was asked to change; it is read-only once planned."""


class NotSupported(NotImplementedError, SigdnnError):
    """A plan builder declines a node; the reason says why."""


class NoPlanError(SigdnnError):
    """No builder accepted a node; the message lists each decline."""


class VariantPackError(SigdnnError):
    """The buffers handed to execute() do not match the graph."""


class ExecutionError(SigdnnError):
    """A node failed while running."""


class RegistryError(SigdnnError):
    """A builder could not be registered (engine id taken or out of range)."""


class UsageError(SigdnnError, TypeError, ValueError):
    """An API call got an argument it does not take (a wrong type or an unknown choice).

    Also a TypeError and ValueError, so code written against Python's
    conventions still catches it.
    """
