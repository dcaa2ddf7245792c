"""CuTe DSL kernels: these modules import ``cutlass`` at the top, so import them lazily.

- :mod:`.gemm_sm90`: the Hopper GEMM (TMA + wgmma, warp-specialized, persistent);
- :mod:`.launch`: compile once per specialization (in process and on disk) and
  launch through the compiled handle;
- :mod:`.im2col`: the conv fprop's A operand, gathered from NHWC x into the workspace.
"""
