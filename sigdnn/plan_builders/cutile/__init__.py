"""cuTile builders (engine ids 2000-2999), one module per op family.

Importing this package imports no GPU code: kernels live in the ``kernels``
subpackage, which imports ``cuda.tile`` and is loaded on first launch;
``available()`` reports why a builder cannot run on this machine.
"""
