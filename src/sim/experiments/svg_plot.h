// A small SVG plotting helper for experiment reports: line charts (plain or
// step) and empirical CDFs, with axes, ticks, labels, a title and a legend.
// No dependencies; the output is a standalone, well-formed SVG document whose
// text is a pure function of the input (same data, same bytes).
// Pure functions: thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace gandiva::sim::experiments {

// One line: points (x[i], y[i]) drawn in order. x and y have equal length.
struct PlotSeries {
  std::string name;  // shown in the legend
  std::vector<double> x;
  std::vector<double> y;
};

struct PlotOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  int width = 720;
  int height = 420;
  // Logarithmic x axis (base 10); points with x <= 0 are dropped.
  bool log_x = false;
  // Draw each series as a step function (horizontal then vertical), as a CDF
  // or a sampled count is drawn.
  bool step = false;
  // Axis ranges; unset: from the data (y starts at 0 when all y >= 0).
  std::optional<double> x_min, x_max, y_min, y_max;
};

// The chart as an SVG document. Series without points still appear in the
// legend. Names and labels are XML-escaped.
std::string LineChartSvg(const std::vector<PlotSeries>& series,
                         const PlotOptions& options);

// The empirical CDF of `values` as a series: x sorted ascending, y = the
// share of values <= x (0..1), one point per distinct value.
PlotSeries CdfSeries(std::string name, std::vector<double> values);

// At most `max_points` points, each the mean of a run of consecutive points
// (x and y averaged); the series unchanged if it is already small enough.
PlotSeries Downsample(const PlotSeries& series, size_t max_points);

// Round tick values covering [lo, hi] (the first at or below lo, the last
// at or above hi): steps of 1, 2 or 5 x 10^k, about `target` of them. For a log
// axis: the powers of ten in [lo, hi] (and 2 and 5 times them when there are
// few decades).
std::vector<double> NiceTicks(double lo, double hi, int target);
std::vector<double> LogTicks(double lo, double hi);

// `text` with &, <, >, " and ' escaped for XML.
std::string XmlEscape(const std::string& text);

}  // namespace gandiva::sim::experiments
