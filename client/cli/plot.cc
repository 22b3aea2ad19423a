#include "plot.h"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fresnel/io/png.h"
#include "fresnel/core/status.h"

namespace fresnel::cli {
namespace {

constexpr Rgb kBlack{0, 0, 0};
constexpr Rgb kGrid{225, 225, 225};
constexpr Rgb kText{40, 40, 40};
constexpr Rgb kLegendBorder{160, 160, 160};
constexpr double kFontSize = 13;  // pixels

struct Rect {
  double x0, y0, x1, y1;
};

// A cairo image surface and its context: antialiased lines, real fonts (fontconfig's sans).
class Canvas {
 public:
  Canvas(int width, int height)
      : surface_(cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height),
                 cairo_surface_destroy),
        cr_(cairo_create(surface_.get()), cairo_destroy) {
    Color(kPlotBackground);
    cairo_paint(cr_.get());
    cairo_select_font_face(cr_.get(), "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr_.get(), kFontSize);
  }

  absl::Status status() const {
    const cairo_status_t st = cairo_status(cr_.get());
    if (st == CAIRO_STATUS_SUCCESS) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("cairo: ", cairo_status_to_string(st)));
  }

  cairo_t* cr() const { return cr_.get(); }
  void Color(Rgb c) const { cairo_set_source_rgb(cr_.get(), c.r / 255.0, c.g / 255.0, c.b / 255.0); }

  // A crisp 1-px line between pixel centres (horizontal or vertical).
  void Rule(double x0, double y0, double x1, double y1, Rgb c) const {
    cairo_save(cr_.get());
    cairo_set_antialias(cr_.get(), CAIRO_ANTIALIAS_NONE);
    cairo_set_line_width(cr_.get(), 1);
    Color(c);
    cairo_move_to(cr_.get(), std::floor(x0) + 0.5, std::floor(y0) + 0.5);
    cairo_line_to(cr_.get(), std::floor(x1) + 0.5, std::floor(y1) + 0.5);
    cairo_stroke(cr_.get());
    cairo_restore(cr_.get());
  }

  void Frame(const Rect& r, Rgb c) const {
    cairo_save(cr_.get());
    cairo_set_antialias(cr_.get(), CAIRO_ANTIALIAS_NONE);
    cairo_set_line_width(cr_.get(), 1);
    Color(c);
    cairo_rectangle(cr_.get(), std::floor(r.x0) + 0.5, std::floor(r.y0) + 0.5,
                    std::floor(r.x1) - std::floor(r.x0), std::floor(r.y1) - std::floor(r.y0));
    cairo_stroke(cr_.get());
    cairo_restore(cr_.get());
  }

  double TextWidth(const std::string& s) const {
    cairo_text_extents_t e;
    cairo_text_extents(cr_.get(), s.c_str(), &e);
    return e.x_advance;
  }

  // Text whose top-left corner is (x, y).
  void Text(double x, double y, const std::string& s, Rgb c) const {
    cairo_font_extents_t f;
    cairo_font_extents(cr_.get(), &f);
    Color(c);
    cairo_move_to(cr_.get(), x, y + f.ascent);
    cairo_show_text(cr_.get(), s.c_str());
  }

  double TextHeight() const {
    cairo_font_extents_t f;
    cairo_font_extents(cr_.get(), &f);
    return f.ascent + f.descent;
  }

  // uint8 [height, width, 3] from the surface's xRGB words.
  HostArray Take(int width, int height) const {
    cairo_surface_flush(surface_.get());
    HostArray image(DType::kUint8, {height, width, 3});
    const unsigned char* data = cairo_image_surface_get_data(surface_.get());
    const int stride = cairo_image_surface_get_stride(surface_.get());
    uint8_t* out = image.data<uint8_t>();
    for (int y = 0; y < height; ++y) {
      for (int x = 0; x < width; ++x) {
        uint32_t v;
        std::memcpy(&v, data + static_cast<size_t>(y) * stride + 4 * x, 4);
        uint8_t* o = out + 3 * (static_cast<int64_t>(y) * width + x);
        o[0] = static_cast<uint8_t>(v >> 16);
        o[1] = static_cast<uint8_t>(v >> 8);
        o[2] = static_cast<uint8_t>(v);
      }
    }
    return image;
  }

 private:
  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> surface_;
  std::unique_ptr<cairo_t, void (*)(cairo_t*)> cr_;
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

  Canvas canvas(w, h);
  FRESNEL_RETURN_IF_ERROR(canvas.status());
  cairo_t* cr = canvas.cr();
  const double text_h = canvas.TextHeight();
  double label_width = 0;
  for (double t : yticks) label_width = std::max(label_width, canvas.TextWidth(TickLabel(t, ystep)));
  const double top = options.title.empty() ? 12 : 12 + text_h + 8;
  const double bottom = 12 + text_h + (options.x_label.empty() ? 0 : text_h + 8);
  const Rect area{std::ceil(label_width) + 18, top, w - 16.0, h - 1 - bottom};
  if (area.x1 - area.x0 < 16 || area.y1 - area.y0 < 16) {
    return absl::InvalidArgumentError("plot too small for its labels");
  }
  auto px = [&](double x) { return area.x0 + (x - xr.lo) / (xr.hi - xr.lo) * (area.x1 - area.x0); };
  auto py = [&](double y) { return area.y1 - (y - yr.lo) / (yr.hi - yr.lo) * (area.y1 - area.y0); };

  // Grid, ticks and their labels.
  for (double t : xticks) {
    const double x = px(t);
    canvas.Rule(x, area.y0, x, area.y1, kGrid);
    canvas.Rule(x, area.y1, x, area.y1 + 4, kBlack);
    const std::string label = TickLabel(t, xstep);
    canvas.Text(x - canvas.TextWidth(label) / 2, area.y1 + 7, label, kText);
  }
  for (double t : yticks) {
    const double y = py(t);
    canvas.Rule(area.x0, y, area.x1, y, kGrid);
    canvas.Rule(area.x0 - 4, y, area.x0, y, kBlack);
    const std::string label = TickLabel(t, ystep);
    canvas.Text(area.x0 - 8 - canvas.TextWidth(label), y - text_h / 2, label, kText);
  }
  if (!options.x_label.empty()) {
    canvas.Text((area.x0 + area.x1 - canvas.TextWidth(options.x_label)) / 2,
                area.y1 + 7 + text_h + 8, options.x_label, kText);
  }
  if (!options.title.empty()) canvas.Text(area.x0, 8, options.title, kText);

  // Traces, antialiased and clipped to the plot area; a non-finite point breaks the line.
  cairo_save(cr);
  cairo_rectangle(cr, area.x0 + 1, area.y0 + 1, area.x1 - area.x0 - 1, area.y1 - area.y0 - 1);
  cairo_clip(cr);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  for (const PlotTrace& trace : traces) {
    canvas.Color(trace.color);
    // At least 2 px: a 1-px antialiased line is all partial pixels.
    cairo_set_line_width(cr, std::max(2, trace.thickness_px + 1));
    bool open = false;
    for (size_t i = 0; i < trace.x.size(); ++i) {
      if (!std::isfinite(trace.x[i]) || !std::isfinite(trace.y[i])) {
        if (open) cairo_stroke(cr);
        open = false;
        continue;
      }
      const double x = px(trace.x[i]), y = py(trace.y[i]);
      if (open) {
        cairo_line_to(cr, x, y);
      } else {
        cairo_move_to(cr, x, y);
        cairo_line_to(cr, x, y);  // a lone point still shows (round cap)
        open = true;
      }
    }
    if (open) cairo_stroke(cr);
    if (trace.marker_px > 0) {
      for (size_t i = 0; i < trace.x.size(); ++i) {
        if (!std::isfinite(trace.x[i]) || !std::isfinite(trace.y[i])) continue;
        const double m = trace.marker_px;
        cairo_rectangle(cr, std::round(px(trace.x[i]) - m / 2), std::round(py(trace.y[i]) - m / 2),
                        m, m);
      }
      cairo_fill(cr);
    }
  }
  cairo_restore(cr);
  canvas.Frame(area, kBlack);

  // Legend in the top-right corner.
  std::vector<const PlotTrace*> labelled;
  double legend_text = 0;
  for (const PlotTrace& t : traces) {
    if (t.label.empty()) continue;
    labelled.push_back(&t);
    legend_text = std::max(legend_text, canvas.TextWidth(t.label));
  }
  if (!labelled.empty()) {
    const double row_h = text_h + 6;
    const double box_w = 10 + 28 + 8 + std::ceil(legend_text) + 10;
    const double box_h = 8 + labelled.size() * row_h;
    const Rect box{std::floor(area.x1 - 10 - box_w), area.y0 + 10, area.x1 - 10,
                   std::ceil(area.y0 + 10 + box_h)};
    canvas.Color(kPlotBackground);
    cairo_rectangle(cr, box.x0, box.y0, box.x1 - box.x0, box.y1 - box.y0);
    cairo_fill(cr);
    canvas.Frame(box, kLegendBorder);
    for (size_t i = 0; i < labelled.size(); ++i) {
      const double y = box.y0 + 6 + i * row_h;
      const double mid = std::floor(y + text_h / 2) + 0.5;
      canvas.Color(labelled[i]->color);
      cairo_set_line_width(cr, std::max(2, labelled[i]->thickness_px + 1));
      cairo_move_to(cr, box.x0 + 10, mid);
      cairo_line_to(cr, box.x0 + 38, mid);
      cairo_stroke(cr);
      canvas.Text(box.x0 + 46, y, labelled[i]->label, kText);
    }
  }
  FRESNEL_RETURN_IF_ERROR(canvas.status());
  return canvas.Take(w, h);
}

absl::Status WritePlotPng(const std::string& path, const std::vector<PlotTrace>& traces,
                          const PlotOptions& options) {
  absl::StatusOr<HostArray> image = RenderPlot(traces, options);
  if (!image.ok()) return image.status();
  return WritePng(path, *image);
}

}  // namespace fresnel::cli
