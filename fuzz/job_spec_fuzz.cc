// Fuzzes the job spec reader (ParseJobSpecs: YAML text, as `gandiva submit`
// reads a file) and, through it, the spec check it ends with. Any text is
// either refused with INVALID_ARGUMENT naming the file, or read into specs
// that pass config::CheckJobSpec, the daemon's own check; anything else
// (and any crash, exception or sanitizer report) stops the run.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli/job_spec.h"
#include "config/job_spec_check.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_job_spec: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Nothing is read from this path: it names the spec in messages and its
  // directory (which exists) is the default workdir, and where a relative
  // one is taken from.
  static const std::string path =
      (std::filesystem::temp_directory_path() / "job.yaml").string();
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto specs = gandiva::cli::ParseJobSpecs(text, path);
  if (!specs.ok()) {
    if (specs.status().code() != gandiva::core::StatusCode::kInvalidArgument) {
      Fail("refused with other than INVALID_ARGUMENT: " +
           specs.status().ToString());
    }
    if (specs.status().message().rfind(path, 0) != 0) {
      Fail("message does not start with the file: " + specs.status().message());
    }
    return 0;
  }
  if (specs->empty()) Fail("read no spec and no error");
  for (const gandiva::rpc::JobSpec& spec : *specs) {
    if (std::string err = gandiva::config::CheckJobSpec(spec); !err.empty()) {
      Fail("read a spec the daemon refuses: " + err);
    }
  }
  return 0;
}
