# Point-cloud holography (docs/hologram.md): CPU oracle and fixed-point emulation, CUDA float /
# TA / PA kernels, tensor-core path (cuBLASLt), ASM reconstruction (kissfft / cuFFT), PLY input.
list(APPEND FRESNEL_KERNEL_SOURCES
  src/hologram/asm_cpu.cc
  src/hologram/hologram.cc
  src/hologram/hologram_cpu.cc
  src/hologram/point_cloud.cc
  src/hologram/prepare.cc
)
list(APPEND FRESNEL_KERNEL_CUDA_SOURCES
  src/hologram/hologram_cuda.cu
  src/hologram/hologram_tensor.cu
)
list(APPEND FRESNEL_KERNEL_CUDA_LINK_LIBS CUDA::cublasLt CUDA::cufft)
list(APPEND FRESNEL_KERNEL_LINK_LIBS absl::flat_hash_map)
