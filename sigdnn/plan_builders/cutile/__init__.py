"""cuTile builders (engine ids 2000-2999): pointwise nodes and fused pointwise regions.

Kernels are generated: ``spec`` turns a node or a region into a KernelSpec
(``layout`` decides how each tensor is walked), ``codegen`` writes its cuTile
source (``_f32math`` holds the float32 formulas), ``plans`` launch it, and a
``backend`` compiles it, with cuTile (``kernels``, imported on first build,
never at ``import sigdnn``) or, in CPU tests, through ``emulator``.
``pointwise`` builds single nodes, ``fusion`` claims regions.

Row, channel and reduction ops are generated as text too (``row_kernel_source``,
``channel_kernel_source``, ``reduction_kernel_source``; a ``source.KernelSource`` each) from the
views ``views`` decides, and run as one or more launches (``steps``):
``softmax``, ``norms`` (layernorm / rmsnorm forward and backward),
``batchnorm`` (inference, training, backward), ``reduction``.
"""
