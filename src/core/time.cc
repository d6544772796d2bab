#include "core/time.h"

#include <cmath>
#include <cstdio>

namespace gandiva::core {

Duration Duration::FromSeconds(double s) {
  return Duration::Micros(static_cast<int64_t>(std::llround(s * 1e6)));
}

std::string FormatDuration(Duration d) {
  if (d.is_infinite()) return "inf";
  char buf[64];
  const int64_t us = d.micros();
  const int64_t abs_us = us < 0 ? -us : us;
  const char* sign = us < 0 ? "-" : "";
  if (abs_us < 1000) {
    std::snprintf(buf, sizeof buf, "%s%lldus", sign,
                  static_cast<long long>(abs_us));
  } else if (abs_us < 1000000) {
    std::snprintf(buf, sizeof buf, "%s%.1fms", sign,
                  static_cast<double>(abs_us) / 1e3);
  } else if (abs_us < 60 * 1000000LL) {
    std::snprintf(buf, sizeof buf, "%s%.3fs", sign,
                  static_cast<double>(abs_us) / 1e6);
  } else {
    const int64_t s = abs_us / 1000000;
    std::snprintf(buf, sizeof buf, "%s%lldh%02lldm%02llds", sign,
                  static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

}  // namespace gandiva::core
