#include "config/job_spec_check.h"

#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>

#include "core/job.h"

namespace gandiva::config {
namespace {

std::string Field(std::string_view field, const std::string& why) {
  return "field '" + std::string(field) + "': " + why;
}

// owner, group and queue.
std::string CheckLabel(std::string_view field, std::string_view s) {
  return CheckText(field, s, kMaxLabelBytes);
}

}  // namespace

std::string CheckText(std::string_view field, std::string_view s, size_t max) {
  if (s.size() > max) {
    return Field(field, "must be at most " + std::to_string(max) +
                            " bytes, got " + std::to_string(s.size()));
  }
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      return Field(field, "holds a control character: " + Shown(s));
    }
  }
  return "";
}

bool OnlyNameChars(std::string_view s) {
  for (unsigned char c : s) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       (c >= '0' && c <= '9');
    if (!alnum && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

std::string Shown(std::string_view s) {
  constexpr size_t kShown = 64;
  std::string out;
  for (char c : s.substr(0, kShown)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? '?' : c;
  }
  return "'" + out + (s.size() > kShown ? "...'" : "'");
}

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // cut short
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

std::string CheckJobName(std::string_view name) {
  if (name.empty()) return "must not be empty";
  if (name.size() > 64) return "must be at most 64 characters";
  if (!OnlyNameChars(name)) {
    return "may hold only letters, digits, '.', '_' and '-', got " +
           Shown(name);
  }
  return "";
}

bool ValidEnvName(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  for (unsigned char c : name) {
    if (!std::isalnum(c) && c != '_') return false;
  }
  return true;
}

std::string CheckCheckpointEvery(int64_t minibatches, int64_t us) {
  if (minibatches != 0 && us != 0) {
    return "gives both mini-batches (" + std::to_string(minibatches) +
           ") and a time (" + std::to_string(us) + " us); give one";
  }
  if (minibatches < 0 || minibatches > kMaxCheckpointEveryMinibatches) {
    return "must be 1 to " + std::to_string(kMaxCheckpointEveryMinibatches) +
           " mini-batches (0: none), got " + std::to_string(minibatches);
  }
  if (us != 0 && (us < kMinCheckpointEveryUs || us > kMaxCheckpointEveryUs)) {
    return "must be a time from 1 s to 30 days (0: none), got " +
           std::to_string(us) + " us";
  }
  return "";
}

std::string ParseCheckpointEvery(std::string_view text, int64_t* minibatches,
                                 int64_t* us) {
  *minibatches = 0;
  *us = 0;
  if (text.empty()) return "expected a count of mini-batches or a time, got ''";
  const char unit = text.back();
  if (unit >= '0' && unit <= '9') {
    int64_t v = 0;
    const auto [ptr, ec] =
        std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || ptr != text.data() + text.size()) {
      return "expected a count of mini-batches or a time (90s, 10m, 1.5h), "
             "got '" +
             std::string(text) + "'";
    }
    *minibatches = v;
    return "";
  }
  const double scale = unit == 's'   ? 1e6
                       : unit == 'm' ? 60e6
                       : unit == 'h' ? 3600e6
                                     : 0;
  const std::string_view number = text.substr(0, text.size() - 1);
  double v = 0;
  const auto [ptr, ec] =
      std::from_chars(number.data(), number.data() + number.size(), v,
                      std::chars_format::fixed);
  if (scale == 0 || number.empty() || ec != std::errc() ||
      ptr != number.data() + number.size() || !std::isfinite(v) || v < 0) {
    return "expected a count of mini-batches or a time (90s, 10m, 1.5h), "
           "got '" +
           std::string(text) + "'";
  }
  const double t = v * scale;
  // Past the bound: CheckJobSpec names the range.
  *us = t > static_cast<double>(kMaxCheckpointEveryUs)
            ? kMaxCheckpointEveryUs + 1
            : static_cast<int64_t>(std::llround(t));
  if (*us == 0 && v > 0) *us = 1;
  return "";
}

std::string CheckJobSpec(const rpc::JobSpec& spec) {
  for (const auto& [field, s] :
       {std::pair<std::string_view, const std::string*>{"name", &spec.name()},
        {"command", &spec.command()},
        {"owner", &spec.owner()},
        {"group", &spec.group()},
        {"queue", &spec.queue()},
        {"workdir", &spec.workdir()}}) {
    if (!ValidUtf8(*s)) return Field(field, "is not valid UTF-8");
  }
  if (!spec.name().empty()) {
    if (std::string why = CheckJobName(spec.name()); !why.empty()) {
      return Field("name", why);
    }
  }
  const std::string& command = spec.command();
  if (command.find_first_not_of(" \t\n\r") == std::string::npos) {
    return Field("command", "must not be empty");
  }
  if (command.find('\0') != std::string::npos) {
    return Field("command", "holds a NUL byte");
  }
  if (command.size() >= kMaxArgBytes) {
    return Field("command", std::to_string(command.size()) +
                                " bytes, more than one argument to execve "
                                "may hold (" +
                                std::to_string(kMaxArgBytes - 1) +
                                "); run a script instead");
  }
  core::JobSpec core;
  core.gpus = spec.gpus();
  core.total_minibatches = spec.total_minibatches();
  core.retries = spec.retries();
  if (std::string err = core::ValidateJobSpec(core); !err.empty()) return err;
  if (std::string why = CheckCheckpointEvery(
          spec.checkpoint_every_minibatches(), spec.checkpoint_every_us());
      !why.empty()) {
    return Field("checkpoint_every", why);
  }
  for (const auto& [field, s] :
       {std::pair<std::string_view, const std::string*>{"owner", &spec.owner()},
        {"group", &spec.group()},
        {"queue", &spec.queue()}}) {
    if (std::string err = CheckLabel(field, *s); !err.empty()) return err;
  }
  const std::string& workdir = spec.workdir();
  if (!workdir.empty()) {
    if (workdir[0] != '/') {
      return Field("workdir",
                   "must be an absolute path, got " + Shown(workdir));
    }
    if (workdir.size() > kMaxPathBytes) {
      return Field("workdir",
                   "must be at most " + std::to_string(kMaxPathBytes) +
                       " bytes, got " + std::to_string(workdir.size()));
    }
    if (workdir.find('\0') != std::string::npos) {
      return Field("workdir", "holds a NUL byte");
    }
  }
  if (static_cast<size_t>(spec.env_size()) > kMaxEnvVars) {
    return Field("env", std::to_string(spec.env_size()) +
                            " variables, more than " +
                            std::to_string(kMaxEnvVars));
  }
  size_t total = 0;
  for (const auto& [name, value] : spec.env()) {
    if (!ValidUtf8(name) || !ValidUtf8(value)) {
      return Field("env", "variable " + Shown(name) + " is not valid UTF-8");
    }
    if (!ValidEnvName(name) || name.size() > kMaxLabelBytes) {
      return Field("env", Shown(name) +
                              " is not a variable name "
                              "([A-Za-z_][A-Za-z0-9_]*, at most " +
                              std::to_string(kMaxLabelBytes) + ")");
    }
    if (value.find('\0') != std::string::npos) {
      return Field("env", "the value of " + name + " holds a NUL byte");
    }
    const size_t bytes = name.size() + 1 + value.size() + 1;
    if (bytes > kMaxArgBytes) {
      return Field("env", name + "=... is " + std::to_string(bytes) +
                              " bytes, more than execve takes in one (" +
                              std::to_string(kMaxArgBytes) + ")");
    }
    total += bytes;
  }
  if (total > kMaxEnvBytes) {
    return Field("env", std::to_string(total) + " bytes together, more than " +
                            std::to_string(kMaxEnvBytes));
  }
  return "";
}

}  // namespace gandiva::config
