# Volume rendering of tetrahedral meshes: mesh, VTK reader/writer and generators; CPU ray caster
# (TBB; the test oracle); CUDA cell projection (hash blocks, CUB radix sort, compositing).
find_package(OpenSSL REQUIRED)
list(APPEND FRESNEL_KERNEL_SOURCES
  src/volume/mesh.cc
  src/volume/vtk_io.cc
  src/volume/render.cc
  src/volume/render_cpu.cc
)
if(FRESNEL_WITH_CUDA)
  list(APPEND FRESNEL_KERNEL_CUDA_SOURCES src/volume/render_cuda.cu)
  # No contracted multiply-adds: the CPU oracle runs the same float32 operations (volume_math.h).
  set_source_files_properties(src/volume/render_cuda.cu PROPERTIES COMPILE_OPTIONS "--fmad=false")
else()
  list(APPEND FRESNEL_KERNEL_SOURCES src/volume/render_cuda_none.cc)
endif()
list(APPEND FRESNEL_KERNEL_LINK_LIBS OpenSSL::Crypto absl::strings)
