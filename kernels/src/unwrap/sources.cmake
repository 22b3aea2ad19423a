# Phase unwrapping: Goldstein branch cuts (CPU reference + CUDA, bit-exact) and least squares
# (kissfft's header-only double FFT on the CPU, cuFFT on CUDA).
list(APPEND FRESNEL_KERNEL_SOURCES
  src/unwrap/unwrap.cc
  src/unwrap/goldstein_cpu.cc
  src/unwrap/least_squares_cpu.cc
)
list(APPEND FRESNEL_KERNEL_CUDA_SOURCES
  src/unwrap/goldstein_cuda.cu
  src/unwrap/least_squares_cuda.cu
)
list(APPEND FRESNEL_KERNEL_LINK_LIBS absl::str_format)
if(FRESNEL_WITH_CUDA)
  list(APPEND FRESNEL_KERNEL_CUDA_LINK_LIBS CUDA::cufft)
endif()
