#include "sim/experiments/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace gandiva::sim::experiments {
namespace {

// Colour-blind-friendly palette (Okabe-Ito), cycled.
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                   "#E69F00", "#56B4E9", "#000000", "#F0E442"};
constexpr size_t kNumColors = sizeof(kColors) / sizeof(kColors[0]);

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A tick label: short, without trailing zeros.
std::string TickLabel(double v) {
  if (std::fabs(v) < 1e-12) return "0";
  char buf[32];
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.0e", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.6g", v);
  }
  return buf;
}

}  // namespace

std::string XmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<double> NiceTicks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!(hi > lo) || target < 1) {
    ticks.push_back(lo);
    return ticks;
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  // From the last tick at or below lo to the first at or above hi.
  const double first = std::floor(lo / step + 1e-9);
  const double last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last + 0.5; k += 1) {
    const double t = k * step;
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::vector<double> LogTicks(double lo, double hi) {
  std::vector<double> ticks;
  if (!(lo > 0) || !(hi >= lo)) return ticks;
  const int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int e1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  const bool fine = e1 - e0 <= 2;
  for (int e = e0; e <= e1; ++e) {
    const double p = std::pow(10.0, e);
    for (double m : {1.0, 2.0, 5.0}) {
      if (m != 1.0 && !fine) continue;
      const double t = m * p;
      if (t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9)) ticks.push_back(t);
    }
  }
  return ticks;
}

PlotSeries CdfSeries(std::string name, std::vector<double> values) {
  PlotSeries s;
  s.name = std::move(name);
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (i + 1 < values.size() && values[i + 1] == values[i]) continue;
    s.x.push_back(values[i]);
    s.y.push_back(static_cast<double>(i + 1) / n);
  }
  return s;
}

PlotSeries Downsample(const PlotSeries& series, size_t max_points) {
  const size_t n = std::min(series.x.size(), series.y.size());
  if (max_points == 0 || n <= max_points) return series;
  PlotSeries out;
  out.name = series.name;
  for (size_t b = 0; b < max_points; ++b) {
    const size_t lo = b * n / max_points;
    const size_t hi = (b + 1) * n / max_points;
    if (hi <= lo) continue;
    double sx = 0, sy = 0;
    for (size_t i = lo; i < hi; ++i) {
      sx += series.x[i];
      sy += series.y[i];
    }
    const double k = static_cast<double>(hi - lo);
    out.x.push_back(sx / k);
    out.y.push_back(sy / k);
  }
  return out;
}

std::string LineChartSvg(const std::vector<PlotSeries>& series,
                         const PlotOptions& options) {
  const double width = std::max(200, options.width);
  const double height = std::max(150, options.height);
  // Plot area: room for the title, the axis labels and a legend on the right.
  const double left = 70, right = 170, top = 40, bottom = 55;
  const double pw = width - left - right;
  const double ph = height - top - bottom;

  auto tx = [&](double x) { return options.log_x ? std::log10(x) : x; };
  auto usable = [&](double x, double y) {
    return std::isfinite(x) && std::isfinite(y) && (!options.log_x || x > 0);
  };

  // Data ranges.
  double x_lo = std::numeric_limits<double>::infinity();
  double x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const PlotSeries& s : series) {
    const size_t n = std::min(s.x.size(), s.y.size());
    for (size_t i = 0; i < n; ++i) {
      if (!usable(s.x[i], s.y[i])) continue;
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
  }
  if (!std::isfinite(x_lo)) {
    x_lo = options.log_x ? 1 : 0;
    x_hi = options.log_x ? 10 : 1;
    y_lo = 0;
    y_hi = 1;
  }
  if (y_lo >= 0) y_lo = 0;
  if (options.x_min) x_lo = *options.x_min;
  if (options.x_max) x_hi = *options.x_max;
  if (options.y_min) y_lo = *options.y_min;
  if (options.y_max) y_hi = *options.y_max;
  if (options.log_x) {
    if (!(x_lo > 0)) x_lo = 1e-3;
    if (!(x_hi > x_lo)) x_hi = x_lo * 10;
  } else if (!(x_hi > x_lo)) {
    x_hi = x_lo + 1;
  }
  if (!(y_hi > y_lo)) y_hi = y_lo + 1;

  std::vector<double> xticks;
  if (options.log_x) {
    // Widen to whole decades so the axis starts and ends on a tick.
    x_lo = std::pow(10.0, std::floor(std::log10(x_lo) + 1e-9));
    x_hi = std::pow(10.0, std::ceil(std::log10(x_hi) - 1e-9));
    if (!(x_hi > x_lo)) x_hi = x_lo * 10;
    xticks = LogTicks(x_lo, x_hi);
  } else {
    xticks = NiceTicks(x_lo, x_hi, 6);
    if (!options.x_min) x_lo = std::min(x_lo, xticks.front());
    if (!options.x_max) x_hi = std::max(x_hi, xticks.back());
  }
  std::vector<double> yticks = NiceTicks(y_lo, y_hi, 5);
  if (!options.y_min) y_lo = std::min(y_lo, yticks.front());
  if (!options.y_max) y_hi = std::max(y_hi, yticks.back());

  const double tx_lo = tx(x_lo), tx_hi = tx(x_hi);
  auto px = [&](double x) {
    return left + (tx(x) - tx_lo) / (tx_hi - tx_lo) * pw;
  };
  auto py = [&](double y) {
    return top + ph - (y - y_lo) / (y_hi - y_lo) * ph;
  };

  std::string svg;
  svg += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(width) +
         "\" height=\"" + Num(height) + "\" viewBox=\"0 0 " + Num(width) + " " +
         Num(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"" + Num(width) + "\" height=\"" +
         Num(height) + "\" fill=\"white\"/>\n";
  svg += "<text class=\"title\" x=\"" + Num(left + pw / 2) +
         "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\" "
         "font-weight=\"bold\">" +
         XmlEscape(options.title) + "</text>\n";

  // Grid and ticks.
  svg += "<g class=\"grid\" stroke=\"#dddddd\" stroke-width=\"1\">\n";
  for (double t : xticks) {
    if (t < x_lo || t > x_hi) continue;
    svg += "<line x1=\"" + Num(px(t)) + "\" y1=\"" + Num(top) + "\" x2=\"" +
           Num(px(t)) + "\" y2=\"" + Num(top + ph) + "\"/>\n";
  }
  for (double t : yticks) {
    if (t < y_lo || t > y_hi) continue;
    svg += "<line x1=\"" + Num(left) + "\" y1=\"" + Num(py(t)) + "\" x2=\"" +
           Num(left + pw) + "\" y2=\"" + Num(py(t)) + "\"/>\n";
  }
  svg += "</g>\n";
  svg += "<g class=\"axes\" stroke=\"black\" stroke-width=\"1\">\n";
  svg += "<line x1=\"" + Num(left) + "\" y1=\"" + Num(top + ph) + "\" x2=\"" +
         Num(left + pw) + "\" y2=\"" + Num(top + ph) + "\"/>\n";
  svg += "<line x1=\"" + Num(left) + "\" y1=\"" + Num(top) + "\" x2=\"" +
         Num(left) + "\" y2=\"" + Num(top + ph) + "\"/>\n";
  for (double t : xticks) {
    if (t < x_lo || t > x_hi) continue;
    svg += "<line x1=\"" + Num(px(t)) + "\" y1=\"" + Num(top + ph) +
           "\" x2=\"" + Num(px(t)) + "\" y2=\"" + Num(top + ph + 5) + "\"/>\n";
  }
  for (double t : yticks) {
    if (t < y_lo || t > y_hi) continue;
    svg += "<line x1=\"" + Num(left - 5) + "\" y1=\"" + Num(py(t)) +
           "\" x2=\"" + Num(left) + "\" y2=\"" + Num(py(t)) + "\"/>\n";
  }
  svg += "</g>\n<g class=\"tick-labels\" fill=\"#333333\">\n";
  for (double t : xticks) {
    if (t < x_lo || t > x_hi) continue;
    svg += "<text x=\"" + Num(px(t)) + "\" y=\"" + Num(top + ph + 18) +
           "\" text-anchor=\"middle\">" + XmlEscape(TickLabel(t)) + "</text>\n";
  }
  for (double t : yticks) {
    if (t < y_lo || t > y_hi) continue;
    svg += "<text x=\"" + Num(left - 8) + "\" y=\"" + Num(py(t) + 4) +
           "\" text-anchor=\"end\">" + XmlEscape(TickLabel(t)) + "</text>\n";
  }
  svg += "</g>\n";
  svg += "<text class=\"x-label\" x=\"" + Num(left + pw / 2) + "\" y=\"" +
         Num(height - 12) + "\" text-anchor=\"middle\">" +
         XmlEscape(options.x_label) + "</text>\n";
  svg += "<text class=\"y-label\" x=\"16\" y=\"" + Num(top + ph / 2) +
         "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " +
         Num(top + ph / 2) + ")\">" + XmlEscape(options.y_label) + "</text>\n";

  // Series, clipped to the plot area.
  svg += "<defs><clipPath id=\"plot-area\"><rect x=\"" + Num(left) + "\" y=\"" +
         Num(top) + "\" width=\"" + Num(pw) + "\" height=\"" + Num(ph) +
         "\"/></clipPath></defs>\n";
  for (size_t k = 0; k < series.size(); ++k) {
    const PlotSeries& s = series[k];
    const char* color = kColors[k % kNumColors];
    std::string points;
    bool have_prev = false;
    double prev_y = 0;
    const size_t n = std::min(s.x.size(), s.y.size());
    for (size_t i = 0; i < n; ++i) {
      if (!usable(s.x[i], s.y[i])) continue;
      const double x = px(s.x[i]);
      const double y = py(s.y[i]);
      if (options.step && have_prev) {
        points += Num(x) + "," + Num(prev_y) + " ";
      }
      points += Num(x) + "," + Num(y) + " ";
      prev_y = y;
      have_prev = true;
    }
    if (!points.empty()) points.pop_back();
    svg += "<polyline class=\"series\" data-name=\"" + XmlEscape(s.name) +
           "\" clip-path=\"url(#plot-area)\" fill=\"none\" stroke=\"" + color +
           "\" stroke-width=\"1.8\" stroke-linejoin=\"round\" " + "points=\"" +
           points + "\"/>\n";
  }

  // Legend.
  svg += "<g class=\"legend\">\n";
  for (size_t k = 0; k < series.size(); ++k) {
    const double y = top + 10 + 20 * static_cast<double>(k);
    const double x = left + pw + 15;
    svg += "<line x1=\"" + Num(x) + "\" y1=\"" + Num(y) + "\" x2=\"" +
           Num(x + 24) + "\" y2=\"" + Num(y) + "\" stroke=\"" +
           kColors[k % kNumColors] + "\" stroke-width=\"3\"/>\n";
    svg += "<text x=\"" + Num(x + 30) + "\" y=\"" + Num(y + 4) + "\">" +
           XmlEscape(series[k].name) + "</text>\n";
  }
  svg += "</g>\n</svg>\n";
  return svg;
}

}  // namespace gandiva::sim::experiments
