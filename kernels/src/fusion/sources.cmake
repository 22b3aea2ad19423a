# Dense RGB-D fusion (docs/fusion.md): voxel-hashed TSDF, ICP tracking, raycasting, meshes; TBB
# oracle and CUDA. fusion_cuda.cu is built with -fmad=false so that its float arithmetic rounds like
# the CPU's (the shared math in fusion_math.h then gives equal voxels on both).
list(APPEND FRESNEL_KERNEL_SOURCES
  src/fusion/dataset.cc
  src/fusion/fusion.cc
  src/fusion/fusion_cpu.cc
)
list(APPEND FRESNEL_KERNEL_CUDA_SOURCES
  src/fusion/fusion_cuda.cu
)
set_source_files_properties(src/fusion/fusion_cuda.cu PROPERTIES COMPILE_OPTIONS "-fmad=false")
