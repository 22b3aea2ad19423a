# Volume rendering of tetrahedral meshes: mesh, VTK reader/writer and generators; CPU ray caster
# (TBB; the test oracle); CUDA cell projection (hash blocks, CUB radix sort, compositing) and
# ray walk (the CPU's walk, a thread per pixel).
find_package(OpenSSL REQUIRED)
list(APPEND FRESNEL_KERNEL_SOURCES
  src/volume/mesh.cc
  src/volume/vtk_io.cc
  src/volume/render.cc
  src/volume/render_cpu.cc
)
if(FRESNEL_WITH_CUDA)
  list(APPEND FRESNEL_KERNEL_CUDA_SOURCES src/volume/render_cuda.cu src/volume/walk_cuda.cu)
  # No contracted multiply-adds: the CPU oracle runs the same float32 operations (volume_math.h,
  # walk_math.h).
  set_source_files_properties(src/volume/render_cuda.cu src/volume/walk_cuda.cu PROPERTIES
                              COMPILE_OPTIONS "--fmad=false")
  # Screen-space pre-filter of the count pass and hit masks for the chunks of big tetrahedra:
  # CHUNKS (default: measured fastest), ALL (slower on small tetrahedra), OFF, or CANDIDATES
  # (not run on a GPU yet).
  # render_cuda.cu and docs/volume.md say what each does and measured.
  set(FRESNEL_VOLUME_SCAN_FILTER CHUNKS CACHE STRING
      "volume CUDA scan-conversion filter: CHUNKS (default), ALL, OFF or CANDIDATES")
  set_property(CACHE FRESNEL_VOLUME_SCAN_FILTER PROPERTY STRINGS OFF ALL CHUNKS CANDIDATES)
  if(FRESNEL_VOLUME_SCAN_FILTER STREQUAL "ALL")
    set(_fresnel_volume_filter 1)
  elseif(FRESNEL_VOLUME_SCAN_FILTER STREQUAL "CHUNKS")
    set(_fresnel_volume_filter 2)
  elseif(FRESNEL_VOLUME_SCAN_FILTER STREQUAL "CANDIDATES")
    set(_fresnel_volume_filter 3)
  elseif(NOT FRESNEL_VOLUME_SCAN_FILTER)
    set(_fresnel_volume_filter 0)
  else()
    message(FATAL_ERROR "FRESNEL_VOLUME_SCAN_FILTER must be OFF, ALL, CHUNKS or CANDIDATES, got "
                        "'${FRESNEL_VOLUME_SCAN_FILTER}'")
  endif()
  set_property(SOURCE src/volume/render_cuda.cu APPEND PROPERTY COMPILE_DEFINITIONS
               FRESNEL_VOLUME_SCAN_FILTER=${_fresnel_volume_filter})
  # What CudaMethod::kAuto renders with: WALK (default: the ray walk whenever the mesh's
  # bounding box lies in front of the eye, else cell projection; measured 2.0-2.9x faster on
  # the H200, docs/volume.md) or CELL (cell projection always).
  set(FRESNEL_VOLUME_AUTO_METHOD WALK CACHE STRING
      "volume CUDA method of CudaMethod::kAuto: WALK (default) or CELL")
  set_property(CACHE FRESNEL_VOLUME_AUTO_METHOD PROPERTY STRINGS CELL WALK)
  if(FRESNEL_VOLUME_AUTO_METHOD STREQUAL "WALK")
    set(_fresnel_volume_auto_walk 1)
  elseif(FRESNEL_VOLUME_AUTO_METHOD STREQUAL "CELL")
    set(_fresnel_volume_auto_walk 0)
  else()
    message(FATAL_ERROR "FRESNEL_VOLUME_AUTO_METHOD must be CELL or WALK, got "
                        "'${FRESNEL_VOLUME_AUTO_METHOD}'")
  endif()
  set_property(SOURCE src/volume/render_cuda.cu APPEND PROPERTY COMPILE_DEFINITIONS
               FRESNEL_VOLUME_AUTO_WALK=${_fresnel_volume_auto_walk})
else()
  list(APPEND FRESNEL_KERNEL_SOURCES src/volume/render_cuda_none.cc)
endif()
list(APPEND FRESNEL_KERNEL_LINK_LIBS OpenSSL::Crypto absl::strings)
