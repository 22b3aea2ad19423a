#include "plot.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fresnel/core/png.h"

namespace fresnel::cli {
namespace {

constexpr Rgb kBlack{0, 0, 0};
constexpr Rgb kGrid{225, 225, 225};
constexpr Rgb kText{40, 40, 40};
constexpr Rgb kLegendBorder{160, 160, 160};

// 5x7 glyphs, one byte per row, bit 4 = leftmost column, plus two descender rows (g j p q y).
// Upper-case letters are drawn in lower case; characters without a glyph are left blank.
struct Glyph {
  char c;
  uint8_t rows[9];
};
constexpr Glyph kFont[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}},
    {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
    {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {',', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C, 0x04, 0x08}},
    {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}},
    {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
    {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}},
    {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'[', {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E}},
    {']', {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E}},
    {'a', {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F}},
    {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}},
    {'c', {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E}},
    {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'e', {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E}},
    {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0x00, 0x00, 0x0F, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E}},
    {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E}},
    {'j', {0x02, 0x00, 0x06, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}},
    {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'m', {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11}},
    {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'o', {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E}},
    {'p', {0x00, 0x00, 0x1E, 0x11, 0x11, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0x00, 0x00, 0x0F, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x01}},
    {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E}},
    {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D}},
    {'v', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A}},
    {'x', {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0x00, 0x00, 0x11, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E}},
    {'z', {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
};

const Glyph* FindGlyph(char c) {
  c = absl::ascii_tolower(static_cast<unsigned char>(c));
  for (const Glyph& g : kFont) {
    if (g.c == c) return &g;
  }
  return nullptr;
}

constexpr int kFontScale = 2;
constexpr int kCharAdvance = 6 * kFontScale;
constexpr int kCharHeight = 7 * kFontScale;

int TextWidth(const std::string& s) {
  return s.empty() ? 0 : static_cast<int>(s.size()) * kCharAdvance - kFontScale;
}

struct Rect {
  int x0, y0, x1, y1;  // inclusive
  bool Contains(int x, int y) const { return x >= x0 && x <= x1 && y >= y0 && y <= y1; }
};

class Canvas {
 public:
  Canvas(int width, int height) : width_(width), height_(height),
        image_(DType::kUint8, {height, width, 3}) {
    uint8_t* p = image_.data<uint8_t>();
    for (int64_t i = 0; i < static_cast<int64_t>(width) * height; ++i) {
      p[3 * i] = kPlotBackground.r;
      p[3 * i + 1] = kPlotBackground.g;
      p[3 * i + 2] = kPlotBackground.b;
    }
  }

  void Set(int x, int y, Rgb c, const Rect* clip = nullptr) {
    if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
    if (clip != nullptr && !clip->Contains(x, y)) return;
    uint8_t* p = image_.data<uint8_t>() + 3 * (static_cast<int64_t>(y) * width_ + x);
    p[0] = c.r;
    p[1] = c.g;
    p[2] = c.b;
  }

  void Fill(Rect r, Rgb c) {
    for (int y = r.y0; y <= r.y1; ++y) {
      for (int x = r.x0; x <= r.x1; ++x) Set(x, y, c);
    }
  }

  void Frame(Rect r, Rgb c) {
    for (int x = r.x0; x <= r.x1; ++x) {
      Set(x, r.y0, c);
      Set(x, r.y1, c);
    }
    for (int y = r.y0; y <= r.y1; ++y) {
      Set(r.x0, y, c);
      Set(r.x1, y, c);
    }
  }

  // Bresenham with a square brush of `thickness` pixels.
  void Line(int x0, int y0, int x1, int y1, Rgb c, int thickness, const Rect* clip) {
    const int dx = std::abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
    const int dy = -std::abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
    const int lo = -(thickness - 1) / 2, hi = thickness / 2;
    int err = dx + dy;
    while (true) {
      for (int oy = lo; oy <= hi; ++oy) {
        for (int ox = lo; ox <= hi; ++ox) Set(x0 + ox, y0 + oy, c, clip);
      }
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) {
        err += dy;
        x0 += sx;
      }
      if (e2 <= dx) {
        err += dx;
        y0 += sy;
      }
    }
  }

  // Text with its top-left corner at (x, y).
  void Text(int x, int y, const std::string& s, Rgb c) {
    for (char ch : s) {
      if (const Glyph* g = FindGlyph(ch)) {
        for (int row = 0; row < 9; ++row) {
          for (int col = 0; col < 5; ++col) {
            if ((g->rows[row] >> (4 - col)) & 1) {
              for (int sy = 0; sy < kFontScale; ++sy) {
                for (int sx = 0; sx < kFontScale; ++sx) {
                  Set(x + col * kFontScale + sx, y + row * kFontScale + sy, c);
                }
              }
            }
          }
        }
      }
      x += kCharAdvance;
    }
  }

  HostArray Take() && { return std::move(image_); }

 private:
  int width_, height_;
  HostArray image_;
};

// Tick labels with as many decimals as the step needs ("0.25", "-1.5", "1200", "2e-05").
std::string TickLabel(double value, double step) {
  if (std::fabs(value) < step * 1e-9) value = 0;
  const double a = std::fabs(value);
  if (a != 0 && (a >= 1e6 || a < 1e-4)) return absl::StrFormat("%.3g", value);
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  return absl::StrFormat("%.*f", std::min(decimals, 6), value);
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void Add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // Adds a margin; a degenerate range becomes lo +- 1.
  void Finish(double margin) {
    if (!(lo <= hi)) {
      lo = -1;
      hi = 1;
    } else if (hi - lo <= std::fabs(hi) * 1e-12 || hi == lo) {
      const double d = lo == 0 ? 1 : std::fabs(lo) * 0.1;
      lo -= d;
      hi += d;
    } else {
      const double d = (hi - lo) * margin;
      lo -= d;
      hi += d;
    }
  }
};

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi) || target < 1) return ticks;
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (double t = first; t <= hi + step * 1e-9; t += step) ticks.push_back(t);
  return ticks;
}

absl::StatusOr<HostArray> RenderPlot(const std::vector<PlotTrace>& traces,
                                     const PlotOptions& options) {
  const int w = options.width_px, h = options.height_px;
  if (w < 64 || w > 8192 || h < 64 || h > 8192) {
    return absl::InvalidArgumentError(
        absl::StrCat("plot size ", w, "x", h, " is outside 64..8192 pixels"));
  }
  Range xr, yr;
  for (size_t i = 0; i < traces.size(); ++i) {
    if (traces[i].x.size() != traces[i].y.size()) {
      return absl::InvalidArgumentError(absl::StrCat("trace ", i, ": ", traces[i].x.size(),
                                                     " x values but ", traces[i].y.size(),
                                                     " y values"));
    }
    for (double v : traces[i].x) xr.Add(v);
    for (double v : traces[i].y) yr.Add(v);
  }
  xr.Finish(0);
  yr.Finish(0.05);
  const std::vector<double> xticks = NiceTicks(xr.lo, xr.hi, std::max(2, w / 160));
  const std::vector<double> yticks = NiceTicks(yr.lo, yr.hi, std::max(3, h / 60));
  const double xstep = xticks.size() > 1 ? xticks[1] - xticks[0] : 1;
  const double ystep = yticks.size() > 1 ? yticks[1] - yticks[0] : 1;

  int label_width = 0;
  for (double t : yticks) label_width = std::max(label_width, TextWidth(TickLabel(t, ystep)));
  const int top = options.title.empty() ? 12 : 12 + kCharHeight + 10;
  const int bottom = 12 + kCharHeight + (options.x_label.empty() ? 0 : kCharHeight + 10);
  Rect area{label_width + 18, top, w - 16, h - 1 - bottom};
  if (area.x1 - area.x0 < 16 || area.y1 - area.y0 < 16) {
    return absl::InvalidArgumentError("plot too small for its labels");
  }
  auto px = [&](double x) {
    return area.x0 + static_cast<int>(std::lround((x - xr.lo) / (xr.hi - xr.lo) *
                                                  (area.x1 - area.x0)));
  };
  auto py = [&](double y) {
    return area.y1 - static_cast<int>(std::lround((y - yr.lo) / (yr.hi - yr.lo) *
                                                  (area.y1 - area.y0)));
  };

  Canvas canvas(w, h);
  // Grid and tick labels.
  for (double t : xticks) {
    const int x = px(t);
    for (int y = area.y0; y <= area.y1; ++y) canvas.Set(x, y, kGrid);
    for (int y = area.y1; y <= area.y1 + 4; ++y) canvas.Set(x, y, kBlack);
    const std::string label = TickLabel(t, xstep);
    canvas.Text(x - TextWidth(label) / 2, area.y1 + 8, label, kText);
  }
  for (double t : yticks) {
    const int y = py(t);
    for (int x = area.x0; x <= area.x1; ++x) canvas.Set(x, y, kGrid);
    for (int x = area.x0 - 4; x <= area.x0; ++x) canvas.Set(x, y, kBlack);
    const std::string label = TickLabel(t, ystep);
    canvas.Text(area.x0 - 8 - TextWidth(label), y - kCharHeight / 2, label, kText);
  }
  if (!options.x_label.empty()) {
    canvas.Text((area.x0 + area.x1 - TextWidth(options.x_label)) / 2,
                area.y1 + 8 + kCharHeight + 10, options.x_label, kText);
  }
  if (!options.title.empty()) canvas.Text(area.x0, 10, options.title, kText);

  // Traces, clipped to the plot area; a non-finite point breaks the line.
  const Rect clip{area.x0 + 1, area.y0 + 1, area.x1 - 1, area.y1 - 1};
  for (const PlotTrace& trace : traces) {
    bool have_prev = false;
    int prev_x = 0, prev_y = 0;
    for (size_t i = 0; i < trace.x.size(); ++i) {
      if (!std::isfinite(trace.x[i]) || !std::isfinite(trace.y[i])) {
        have_prev = false;
        continue;
      }
      const int x = px(trace.x[i]), y = py(trace.y[i]);
      if (trace.marker_px > 0) {
        const int lo = -(trace.marker_px - 1) / 2;
        for (int oy = lo; oy < lo + trace.marker_px; ++oy) {
          for (int ox = lo; ox < lo + trace.marker_px; ++ox) {
            canvas.Set(x + ox, y + oy, trace.color, &clip);
          }
        }
      }
      if (have_prev) {
        canvas.Line(prev_x, prev_y, x, y, trace.color, std::max(1, trace.thickness_px), &clip);
      } else {
        canvas.Line(x, y, x, y, trace.color, std::max(1, trace.thickness_px), &clip);
      }
      prev_x = x;
      prev_y = y;
      have_prev = true;
    }
  }
  canvas.Frame(area, kBlack);

  // Legend in the top-right corner.
  std::vector<const PlotTrace*> labelled;
  int legend_text = 0;
  for (const PlotTrace& t : traces) {
    if (t.label.empty()) continue;
    labelled.push_back(&t);
    legend_text = std::max(legend_text, TextWidth(t.label));
  }
  if (!labelled.empty()) {
    const int row_h = kCharHeight + 8;
    const int box_w = 10 + 28 + 8 + legend_text + 10;
    const int box_h = 8 + static_cast<int>(labelled.size()) * row_h;
    Rect box{area.x1 - 10 - box_w, area.y0 + 10, area.x1 - 10, area.y0 + 10 + box_h};
    canvas.Fill(box, kPlotBackground);
    canvas.Frame(box, kLegendBorder);
    for (size_t i = 0; i < labelled.size(); ++i) {
      const int y = box.y0 + 8 + static_cast<int>(i) * row_h;
      const int mid = y + kCharHeight / 2;
      canvas.Line(box.x0 + 10, mid, box.x0 + 38, mid, labelled[i]->color,
                  std::max(2, labelled[i]->thickness_px), nullptr);
      canvas.Text(box.x0 + 46, y, labelled[i]->label, kText);
    }
  }
  return std::move(canvas).Take();
}

absl::Status WritePlotPng(const std::string& path, const std::vector<PlotTrace>& traces,
                          const PlotOptions& options) {
  absl::StatusOr<HostArray> image = RenderPlot(traces, options);
  if (!image.ok()) return image.status();
  return WritePng(path, *image);
}

}  // namespace fresnel::cli
