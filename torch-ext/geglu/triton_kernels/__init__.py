"""The package's Triton kernels: `activation` (GeGLU / GELU, forward and backward) and
`gemm` (the gate/up GEMM with the GeGLU epilogue, launch table in `gemm_configs`)."""
