# GEMM kernels compiled for the "avx2" instruction set (setup.py: GEMM_ISAS). The source is
# shared by every instruction set; only the compiler flags differ.
include "_gemm_kernel.pxi"
