// Helpers shared by the readers of fresnel_io (not installed, not for other targets).
#pragma once

#include <string>

namespace fresnel {

// The extension of the file name in `path` ("" when it has none), lower case, with its dot.
std::string LowerExtension(const std::string& path);

}  // namespace fresnel
