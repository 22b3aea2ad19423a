// NumPy .npy files (format versions 1.0-3.0, little-endian, C order) for the dtypes of
// fresnel::DType. Used by the CLI, the tests (SciPy golden files) and the benchmarks.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "fresnel/core/array.h"

namespace fresnel {

// Parses the bytes of a .npy file. InvalidArgument for malformed headers, big-endian or
// Fortran-order data, unsupported dtypes, or a payload of the wrong length.
absl::StatusOr<HostArray> ParseNpy(absl::string_view file_bytes);
// Serialises as format 1.0 (2.0 when the header would not fit).
std::string SerializeNpy(const HostArray& array);

absl::StatusOr<HostArray> ReadNpy(const std::string& path);
absl::Status WriteNpy(const std::string& path, const HostArray& array);

}  // namespace fresnel
