#include "cli/job_spec.h"

#include <pwd.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "core/job.h"

namespace gandiva::cli {
namespace {

namespace fs = std::filesystem;

// Where a message points: "job.yaml:4" (1-based line) or "job.yaml".
std::string Where(const std::string& path, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return path;
  return path + ":" + std::to_string(mark.line + 1);
}

core::Status FieldError(const std::string& path, const YAML::Node& node,
                        std::string_view field, const std::string& why) {
  return core::InvalidArgument(Where(path, node) + ": field '" +
                               std::string(field) + "': " + why);
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min(
          {row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// " (did you mean 'gpus'?)" for a near miss, else "".
std::string Suggestion(std::string_view key) {
  std::string best;
  size_t best_d = 3;  // suggest only within an edit distance of 2
  for (std::string_view f : kJobSpecFields) {
    const size_t d = EditDistance(key, f);
    if (d < best_d) {
      best_d = d;
      best = std::string(f);
    }
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::string Describe(const YAML::Node& node) {
  if (node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "'" + node.Scalar() + "'";
}

core::StatusOr<std::string> AsString(const std::string& path,
                                     const YAML::Node& node,
                                     std::string_view field) {
  if (!node.IsScalar()) {
    return FieldError(path, node, field,
                      "expected a string, got " + Describe(node));
  }
  return node.Scalar();
}

core::StatusOr<int64_t> AsInt(const std::string& path, const YAML::Node& node,
                              std::string_view field, int64_t lo, int64_t hi) {
  if (!node.IsScalar()) {
    return FieldError(path, node, field,
                      "expected an integer, got " + Describe(node));
  }
  const std::string& s = node.Scalar();
  int64_t v = 0;
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (begin != end && *begin == '+') ++begin;
  const auto [ptr, ec] = std::from_chars(begin, end, v);
  if (s.empty() || ec != std::errc() || ptr != end) {
    return FieldError(path, node, field,
                      "expected an integer, got '" + s + "'");
  }
  if (v < lo || v > hi) {
    return FieldError(path, node, field,
                      "must be between " + std::to_string(lo) + " and " +
                          std::to_string(hi) + ", got " + s);
  }
  return v;
}

core::StatusOr<bool> AsBool(const std::string& path, const YAML::Node& node,
                            std::string_view field) {
  if (node.IsScalar()) {
    std::string s = node.Scalar();
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) {
      return static_cast<char>(std::tolower(c));
    });
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  return FieldError(path, node, field,
                    "expected true or false, got " + Describe(node));
}

std::string DefaultOwner() {
  if (const char* user = std::getenv("USER"); user != nullptr && *user) {
    return user;
  }
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr) {
    return pw->pw_name;
  }
  return "unknown";
}

}  // namespace

std::string ShellQuote(std::string_view word) {
  const bool plain =
      !word.empty() &&
      std::all_of(word.begin(), word.end(), [](unsigned char c) {
        return std::isalnum(c) ||
               std::string_view("@%_+=:,./-").find(static_cast<char>(c)) !=
                   std::string_view::npos;
      });
  if (plain) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

namespace {

// A quoted scalar of `node` (or under it) whose quote `text` never closes:
// yaml-cpp takes the rest of the file as its value. Ok when none.
core::Status CheckQuotes(const std::string& text, const YAML::Node& node,
                         const std::string& path) {
  if (node.IsMap() || node.IsSequence()) {
    for (const auto& kv : node) {
      const bool pair = node.IsMap();
      for (const YAML::Node& n :
           pair ? std::vector<YAML::Node>{kv.first, kv.second}
                : std::vector<YAML::Node>{kv}) {
        if (core::Status s = CheckQuotes(text, n, path); !s.ok()) return s;
      }
    }
    return core::Status::Ok();
  }
  const YAML::Mark m = node.Mark();
  if (!node.IsScalar() || m.pos < 0 ||
      static_cast<size_t>(m.pos) >= text.size()) {
    return core::Status::Ok();
  }
  const char quote = text[static_cast<size_t>(m.pos)];
  if (quote != '\'' && quote != '"') return core::Status::Ok();
  for (size_t i = static_cast<size_t>(m.pos) + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;  // an escaped character
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a quote inside single quotes
      } else {
        return core::Status::Ok();
      }
    }
  }
  return core::InvalidArgument(Where(path, node) + ": not valid YAML: the " +
                               (quote == '"' ? "double" : "single") +
                               " quote opened here is never closed");
}

// yaml-cpp 0.7's LoadAll never returns on a document that starts where no
// node may (a stray ',', jbeder/yaml-cpp#1040): it reads an empty document
// there again and again, a node more in memory each time. Reading the
// documents' events first finds that place: the start of a document that
// starts where the one before it did.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::optional<YAML::Mark> endless;

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (last_ && last_->pos == mark.pos) endless = mark;
    last_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  std::optional<YAML::Mark> last_;
};

// Where YAML::LoadAll(text) would never return, if anywhere; throws what
// LoadAll would throw.
std::optional<YAML::Mark> EndlessDocumentAt(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (!starts.endless && parser.HandleNextDocument(starts)) {
  }
  return starts.endless;
}

core::StatusOr<rpc::JobSpec> OnlyOne(
    core::StatusOr<std::vector<rpc::JobSpec>> specs, const std::string& path) {
  if (!specs.ok()) return specs.status();
  if (specs->size() != 1) {
    return core::InvalidArgument(path + ": holds " +
                                 std::to_string(specs->size()) +
                                 " job specs (YAML documents), not one");
  }
  return std::move((*specs)[0]);
}

// One document's spec; `default_name` when it names none.
core::StatusOr<rpc::JobSpec> SpecOf(const YAML::Node& root,
                                    const std::string& path,
                                    const fs::path& spec_dir,
                                    const std::string& default_name) {
  if (!root.IsMap()) {
    return core::InvalidArgument(
        Where(path, root) +
        ": a job spec is a map of fields (name, command, gpus, ...), got " +
        Describe(root));
  }

  rpc::JobSpec spec;
  spec.set_gpus(1);
  spec.set_owner(DefaultOwner());
  bool have_command = false;
  std::string workdir;
  bool have_workdir = false;

  std::map<std::string, YAML::Node> seen;
  for (const auto& kv : root) {
    const YAML::Node& key = kv.first;
    const YAML::Node& value = kv.second;
    if (!key.IsScalar()) {
      return core::InvalidArgument(Where(path, key) +
                                   ": field names must be plain strings");
    }
    const std::string field = key.Scalar();
    if (auto [it, fresh] = seen.emplace(field, key); !fresh) {
      return core::InvalidArgument(
          Where(path, key) + ": field '" + field + "' is given twice (first " +
          (it->second.Mark().line >= 0
               ? "on line " + std::to_string(it->second.Mark().line + 1)
               : std::string("above")) +
          ")");
    }
    if (field == "name") {
      auto s = AsString(path, value, field);
      if (!s.ok()) return s.status();
      if (std::string why = CheckJobName(*s); !why.empty()) {
        return FieldError(path, value, field, why);
      }
      spec.set_name(*s);
    } else if (field == "command") {
      std::string command;
      if (value.IsSequence()) {
        for (const auto& word : value) {
          if (!word.IsScalar()) {
            return FieldError(
                path, word, field,
                "list items must be strings, got " + Describe(word));
          }
          if (!command.empty()) command += ' ';
          command += ShellQuote(word.Scalar());
        }
      } else if (value.IsScalar()) {
        command = value.Scalar();
      } else {
        return FieldError(
            path, value, field,
            "expected a string or a list of words, got " + Describe(value));
      }
      if (command.find_first_not_of(" \t\n") == std::string::npos) {
        return FieldError(path, value, field, "must not be empty");
      }
      spec.set_command(command);
      have_command = true;
    } else if (field == "gpus") {
      auto v = AsInt(path, value, field, 1, 1 << 20);
      if (!v.ok()) return v.status();
      if ((*v & (*v - 1)) != 0) {
        return FieldError(path, value, field,
                          "must be a power of two >= 1 (1, 2, 4, 8, ...), "
                          "got " +
                              std::to_string(*v));
      }
      spec.set_gpus(static_cast<int32_t>(*v));
    } else if (field == "priority") {
      auto v = AsInt(path, value, field, std::numeric_limits<int32_t>::min(),
                     std::numeric_limits<int32_t>::max());
      if (!v.ok()) return v.status();
      spec.set_priority(static_cast<int32_t>(*v));
    } else if (field == "queue") {
      auto s = AsString(path, value, field);
      if (!s.ok()) return s.status();
      spec.set_queue(*s);
    } else if (field == "owner" || field == "group") {
      auto s = AsString(path, value, field);
      if (!s.ok()) return s.status();
      if (field == "owner") {
        if (s->empty()) return FieldError(path, value, field, "is empty");
        spec.set_owner(*s);
      } else {
        spec.set_group(*s);
      }
    } else if (field == "elastic" || field == "restartable") {
      auto b = AsBool(path, value, field);
      if (!b.ok()) return b.status();
      if (field == "elastic") {
        spec.set_elastic(*b);
      } else {
        spec.set_restartable(*b);
      }
    } else if (field == "workdir") {
      auto s = AsString(path, value, field);
      if (!s.ok()) return s.status();
      if (s->empty()) return FieldError(path, value, field, "is empty");
      std::string dir = *s;
      if (dir == "~" || dir.rfind("~/", 0) == 0) {
        const char* home = std::getenv("HOME");
        if (home == nullptr) {
          return FieldError(path, value, field, "'~' but HOME is not set");
        }
        dir = std::string(home) + dir.substr(1);
      }
      workdir = (spec_dir / dir).lexically_normal().string();
      have_workdir = true;
      std::error_code ec;
      if (!fs::is_directory(workdir, ec)) {
        return FieldError(path, value, field, "no such directory: " + workdir);
      }
    } else if (field == "env") {
      if (value.IsNull()) continue;
      if (!value.IsMap()) {
        return FieldError(
            path, value, field,
            "expected a map of NAME: value, got " + Describe(value));
      }
      for (const auto& e : value) {
        const std::string name = e.first.IsScalar() ? e.first.Scalar() : "";
        if (!config::ValidEnvName(name)) {
          return FieldError(path, e.first, field,
                            "'" + name +
                                "' is not a variable name "
                                "([A-Za-z_][A-Za-z0-9_]*)");
        }
        if (e.second.IsNull()) {
          (*spec.mutable_env())[name] = "";
        } else if (e.second.IsScalar()) {
          (*spec.mutable_env())[name] = e.second.Scalar();
        } else {
          return FieldError(path, e.second, field,
                            "value of " + name + " must be a string, got " +
                                Describe(e.second));
        }
      }
    } else if (field == "retries") {
      auto v = AsInt(path, value, field, 0, core::kMaxRetries);
      if (!v.ok()) return v.status();
      spec.set_retries(static_cast<int32_t>(*v));
    } else if (field == "checkpoint_every") {
      if (!value.IsScalar()) {
        return FieldError(path, value, field,
                          "expected a count of mini-batches or a time, got " +
                              Describe(value));
      }
      int64_t minibatches = 0;
      int64_t us = 0;
      if (std::string why =
              config::ParseCheckpointEvery(value.Scalar(), &minibatches, &us);
          !why.empty()) {
        return FieldError(path, value, field, why);
      }
      if (std::string why = config::CheckCheckpointEvery(minibatches, us);
          !why.empty()) {
        return FieldError(path, value, field, why);
      }
      spec.set_checkpoint_every_minibatches(minibatches);
      spec.set_checkpoint_every_us(us);
    } else if (field == "total_minibatches") {
      auto v =
          AsInt(path, value, field, 0, std::numeric_limits<int64_t>::max());
      if (!v.ok()) return v.status();
      spec.set_total_minibatches(*v);
    } else {
      return core::InvalidArgument(Where(path, key) + ": unknown field '" +
                                   field + "'" + Suggestion(field));
    }
  }

  if (!have_command) {
    return core::InvalidArgument(Where(path, root) +
                                 ": field 'command' is required");
  }
  if (spec.name().empty()) spec.set_name(default_name);
  if (!have_workdir) {
    std::error_code ec;
    if (!fs::is_directory(spec_dir, ec)) {
      return core::InvalidArgument(path + ": field 'workdir': default " +
                                   spec_dir.string() + " is not a directory");
    }
    workdir = spec_dir.string();
  }
  spec.set_workdir(workdir);
  // What the daemon checks too, for what the fields above leave.
  if (std::string err = config::CheckJobSpec(spec); !err.empty()) {
    return core::InvalidArgument(Where(path, root) + ": " + err);
  }
  return spec;
}

}  // namespace

core::StatusOr<std::vector<rpc::JobSpec>> ParseJobSpecs(
    const std::string& yaml_text, const std::string& path) {
  if (const size_t nul = yaml_text.find('\0'); nul != std::string::npos) {
    const auto line =
        1 + std::count(yaml_text.begin(),
                       yaml_text.begin() + static_cast<std::ptrdiff_t>(nul),
                       '\n');
    return core::InvalidArgument(path + ":" + std::to_string(line) +
                                 ": holds a NUL byte; a spec is text");
  }
  if (!config::ValidUtf8(yaml_text)) {
    return core::InvalidArgument(path + ": is not valid UTF-8");
  }
  std::vector<YAML::Node> docs;
  try {
    if (const auto at = EndlessDocumentAt(yaml_text)) {
      return core::InvalidArgument(
          path + ":" + std::to_string(at->line + 1) +
          ": not valid YAML: unexpected character at column " +
          std::to_string(at->column + 1));
    }
    for (YAML::Node& d : YAML::LoadAll(yaml_text)) {
      if (!d.IsNull()) docs.push_back(std::move(d));
    }
  } catch (const YAML::Exception& e) {
    std::string where = path;
    if (e.mark.line >= 0) where += ":" + std::to_string(e.mark.line + 1);
    return core::InvalidArgument(where + ": not valid YAML: " + e.msg);
  }
  if (docs.empty()) {
    return core::InvalidArgument(path +
                                 ": empty spec: field 'command' is required");
  }
  // The spec's directory: the default workdir, and what a relative one is
  // taken from (for standard input, the current directory).
  const fs::path spec_dir =
      path == kStdinName
          ? fs::current_path()
          : fs::absolute(fs::path(path)).lexically_normal().parent_path();
  std::string stem = fs::path(path).stem().string();
  if (!CheckJobName(stem).empty()) stem = "job";
  std::vector<rpc::JobSpec> specs;
  for (size_t i = 0; i < docs.size(); ++i) {
    // Several documents: the default names are STEM-1, STEM-2, ...
    if (core::Status q = CheckQuotes(yaml_text, docs[i], path); !q.ok()) {
      return q;
    }
    auto spec = SpecOf(docs[i], path, spec_dir,
                       docs.size() == 1
                           ? stem
                           : stem.substr(0, 60) + "-" + std::to_string(i + 1));
    if (!spec.ok()) return spec.status();
    specs.push_back(std::move(*spec));
  }
  return specs;
}

core::StatusOr<rpc::JobSpec> ParseJobSpec(const std::string& yaml_text,
                                          const std::string& path) {
  return OnlyOne(ParseJobSpecs(yaml_text, path), path);
}

core::StatusOr<std::vector<rpc::JobSpec>> LoadJobSpecs(
    const std::string& path) {
  if (path == "-") {
    std::stringstream in;
    in << std::cin.rdbuf();
    if (std::cin.bad()) return core::IoError("standard input: read error");
    return ParseJobSpecs(in.str(), kStdinName);
  }
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    return core::InvalidArgument(path + ": is a directory, not a job spec");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return core::IoError(path + ": cannot read the file");
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return core::IoError(path + ": read error");
  return ParseJobSpecs(ss.str(), path);
}

core::StatusOr<rpc::JobSpec> LoadJobSpec(const std::string& path) {
  return OnlyOne(LoadJobSpecs(path), path);
}

}  // namespace gandiva::cli
