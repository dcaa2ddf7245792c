"""CuTe DSL kernels: these modules import ``cutlass`` at the top, so import them lazily.

- :mod:`.gemm_sm90`: the Hopper GEMM (TMA + wgmma, warp-specialized, persistent);
- :mod:`.compile_cache`: compiled specializations in process and on disk, one cache per
  kernel family (imports the DSL only to load a stored object);
- :mod:`.launch`: compile once per specialization and launch the GEMM through the
  compiled handle;
- :mod:`.im2col`: the conv's im2col matrix, gathered from NHWC x into the workspace
  (the im2col fprop, engine 3001, and the wgrad's B);
- :mod:`.conv_sm90`: conv fprop as an implicit GEMM (TMA im2col loads into the Hopper GEMM);
- :mod:`.conv_launch`: its compile cache and launch, as :mod:`.launch` for the GEMM;
- :mod:`.filter_flip`: the flipped, transposed filter the dgrad runs its fprop with;
- :mod:`.phase_dgrad`: a strided dgrad's sub-filter gather and the interleave of its phases into dx;
- :mod:`.splitk_reduce`: the sum of split-K partial products (the wgrad's).
"""
