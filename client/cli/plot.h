// Line plots for `fresnel interp --png`, drawn with cairo: white background, a framed plot area
// with a light grid, numeric tick labels in fontconfig's sans font, one antialiased polyline per
// trace and a legend. Output is an RGB image for fresnel::WritePng.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"

namespace fresnel::cli {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb& o) const { return r == o.r && g == o.g && b == o.b; }
};

inline constexpr Rgb kPlotBackground{255, 255, 255};
inline constexpr Rgb kPlotBlue{31, 119, 180};    // first trace (input)
inline constexpr Rgb kPlotOrange{255, 127, 14};  // second trace (output)

struct PlotTrace {
  std::vector<double> x;  // same length as y; non-finite points break the line
  std::vector<double> y;
  Rgb color = kPlotBlue;
  int thickness_px = 1;
  int marker_px = 0;  // > 0: a filled square of this size at every point
  std::string label;  // shown in the legend when non-empty
};

struct PlotOptions {
  int width_px = 1200;
  int height_px = 500;
  std::string x_label;  // drawn under the x axis
  std::string title;    // drawn above the plot area
};

// Renders the traces (later ones on top) into uint8 [height, width, 3]. Axis ranges cover every
// finite point with a 5 % margin. InvalidArgument for sizes outside [64, 8192] or x/y length
// mismatches.
absl::StatusOr<HostArray> RenderPlot(const std::vector<PlotTrace>& traces,
                                     const PlotOptions& options);

// RenderPlot + fresnel::WritePng.
absl::Status WritePlotPng(const std::string& path, const std::vector<PlotTrace>& traces,
                          const PlotOptions& options);

// "Nice" tick positions (steps of 1, 2 or 5 times a power of ten) covering [lo, hi], about
// `target` of them. Exposed for tests.
std::vector<double> NiceTicks(double lo, double hi, int target);

}  // namespace fresnel::cli
