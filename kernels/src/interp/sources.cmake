list(APPEND FRESNEL_KERNEL_SOURCES
  src/interp/firwin.cc
  src/interp/interp.cc
  src/interp/interp_cpu.cc
  src/interp/into.cc
  src/interp/resample.cc
  src/interp/streaming.cc
)
list(APPEND FRESNEL_KERNEL_CUDA_SOURCES
  src/interp/interp_cuda.cu
  src/interp/resample_cuda.cu
)
list(APPEND FRESNEL_KERNEL_CUDA_LINK_LIBS CUDA::cufft)
