list(APPEND FRESNEL_KERNEL_SOURCES
  src/interp/estimates.cc
  src/interp/firwin.cc
  src/interp/interp.cc
  src/interp/interp_cpu.cc
  src/interp/into.cc
  src/interp/resample.cc
  src/interp/streaming.cc
  src/interp/window.cc
)
list(APPEND FRESNEL_KERNEL_CUDA_SOURCES
  src/interp/interp_cuda.cu
  src/interp/phase_groups_cuda.cu
  src/interp/resample_cuda.cu
  src/interp/tensor_tf32_cuda.cu
  src/interp/window_cuda.cu
)
list(APPEND FRESNEL_KERNEL_CUDA_LINK_LIBS CUDA::cufft)
# The CPU back end is the test oracle and must round as its scalar path does in every
# target_clones version (AVX-512 has FMA instructions; no product may be fused into a sum).
set_source_files_properties(src/interp/interp_cpu.cc PROPERTIES COMPILE_OPTIONS -ffp-contract=off)
