#include "sim/experiments/svg_plot.h"

#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

namespace gandiva::sim::experiments {
namespace {

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos;
       p = s.find(what, p + 1)) {
    ++n;
  }
  return n;
}

// A minimal XML well-formedness check: tags nest and close, attributes are
// quoted, no stray '&' or '<' in text.
bool WellFormed(const std::string& s, std::string& why) {
  std::vector<std::string> stack;
  size_t i = 0;
  if (s.rfind("<?xml", 0) == 0) i = s.find("?>") + 2;
  bool root_seen = false;
  while (i < s.size()) {
    if (s[i] == '<') {
      const size_t end = s.find('>', i);
      if (end == std::string::npos) return why = "unclosed tag", false;
      std::string tag = s.substr(i + 1, end - i - 1);
      if (tag.empty()) return why = "empty tag", false;
      if (tag[0] == '/') {
        const std::string name = tag.substr(1);
        if (stack.empty() || stack.back() != name) {
          return why = "mismatched </" + name + ">", false;
        }
        stack.pop_back();
      } else {
        const bool self = tag.back() == '/';
        const std::string name = tag.substr(0, tag.find_first_of(" /"));
        if (Count(tag, "\"") % 2 != 0)
          return why = "odd quotes in " + name, false;
        if (stack.empty() && root_seen) return why = "two roots", false;
        root_seen = true;
        if (!self) stack.push_back(name);
      }
      i = end + 1;
    } else {
      if (s[i] == '&') {
        const size_t semi = s.find(';', i);
        if (semi == std::string::npos || semi - i > 6) {
          return why = "bare &", false;
        }
      }
      if (s[i] == '>') return why = "bare >", false;
      if (stack.empty() && !std::isspace(static_cast<unsigned char>(s[i]))) {
        return why = "text outside the root", false;
      }
      ++i;
    }
  }
  if (!stack.empty()) return why = "unclosed <" + stack.back() + ">", false;
  return root_seen;
}

TEST(SvgPlot, LineChartIsWellFormedWithEverySeries) {
  std::vector<PlotSeries> series = {
      {"fifo", {0, 1, 2, 3}, {10, 40, 80, 90}},
      {"gandiva <all> & \"more\"", {0, 1, 2, 3}, {20, 60, 95, 99}},
      {"empty", {}, {}},
  };
  PlotOptions o;
  o.title = "GPUs training";
  o.x_label = "time (hours)";
  o.y_label = "% of GPUs";
  const std::string svg = LineChartSvg(series, o);
  std::string why;
  EXPECT_TRUE(WellFormed(svg, why)) << why << "\n" << svg;
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""),
            std::string::npos);
  EXPECT_EQ(Count(svg, "<polyline class=\"series\""), 3u);
  EXPECT_NE(svg.find("data-name=\"fifo\""), std::string::npos);
  EXPECT_NE(svg.find("gandiva &lt;all&gt; &amp; &quot;more&quot;"),
            std::string::npos);
  EXPECT_NE(svg.find(">GPUs training</text>"), std::string::npos);
  EXPECT_NE(svg.find(">time (hours)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">% of GPUs</text>"), std::string::npos);
  // Legend: one entry per series.
  const size_t legend = svg.find("<g class=\"legend\">");
  ASSERT_NE(legend, std::string::npos);
  EXPECT_EQ(Count(svg.substr(legend), "<text"), 3u);
  // Ticks: some labels on both axes.
  EXPECT_NE(svg.find(">100</text>"), std::string::npos);
  EXPECT_NE(svg.find(">3</text>"), std::string::npos);
  // Deterministic.
  EXPECT_EQ(svg, LineChartSvg(series, o));
}

TEST(SvgPlot, CdfOnLogAxis) {
  PlotSeries cdf = CdfSeries("jct", {5, 1, 100, 5, 30});
  ASSERT_EQ(cdf.x.size(), 4u);
  EXPECT_DOUBLE_EQ(cdf.x[0], 1);
  EXPECT_DOUBLE_EQ(cdf.y[0], 0.2);
  EXPECT_DOUBLE_EQ(cdf.x[1], 5);
  EXPECT_DOUBLE_EQ(cdf.y[1], 0.6);
  EXPECT_DOUBLE_EQ(cdf.y.back(), 1.0);
  PlotOptions o;
  o.log_x = true;
  o.step = true;
  const std::string svg = LineChartSvg({cdf}, o);
  std::string why;
  EXPECT_TRUE(WellFormed(svg, why)) << why;
  EXPECT_NE(svg.find(">1</text>"), std::string::npos);
  EXPECT_NE(svg.find(">10</text>"), std::string::npos);
  EXPECT_NE(svg.find(">100</text>"), std::string::npos);
}

TEST(SvgPlot, EmptyChartIsStillWellFormed) {
  std::string why;
  EXPECT_TRUE(WellFormed(LineChartSvg({}, PlotOptions()), why)) << why;
}

TEST(SvgPlot, NiceTicksAndDownsample) {
  EXPECT_EQ(NiceTicks(0, 100, 5),
            (std::vector<double>{0, 20, 40, 60, 80, 100}));
  const std::vector<double> t = NiceTicks(0, 1, 5);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_DOUBLE_EQ(t[1], 0.2);
  EXPECT_NEAR(t.back(), 1, 1e-12);
  EXPECT_EQ(LogTicks(1, 1000), (std::vector<double>{1, 10, 100, 1000}));
  PlotSeries s{"s", {}, {}};
  for (int i = 0; i < 100; ++i) {
    s.x.push_back(i);
    s.y.push_back(1);
  }
  PlotSeries d = Downsample(s, 10);
  ASSERT_EQ(d.x.size(), 10u);
  EXPECT_DOUBLE_EQ(d.x[0], 4.5);
  EXPECT_DOUBLE_EQ(d.y[9], 1);
  EXPECT_EQ(Downsample(s, 1000).x.size(), 100u);
}

}  // namespace
}  // namespace gandiva::sim::experiments
