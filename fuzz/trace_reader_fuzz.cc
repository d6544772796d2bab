// Fuzzes the trace readers (sim/workload/trace_reader.h). The first byte of
// an input picks the reader, the rest is the file it reads:
//   'P' Philly, default options     'p' Philly, Pollux's filters
//   'G' Gavel                       'g' Gavel, skip_unknown
//   'T' Tiresias
// (any other byte: one of them by its value). A file is either refused
// with INVALID_ARGUMENT naming it, or read into a workload as the header
// promises: jobs sorted by submit time from 0, within kMaxTraceSeconds,
// on a power of two of GPUs, of a model in the catalog; anything else (and
// any crash, exception or sanitizer report) stops the run.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "sim/workload/catalog.h"
#include "sim/workload/trace_reader.h"

namespace {

using gandiva::sim::Catalog;
using gandiva::sim::Workload;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_trace_reader: %s\n", what.c_str());
  std::abort();
}

const Catalog& TheCatalog() {
  static const Catalog catalog = [] {
    auto c = Catalog::Load(GANDIVA_FUZZ_DATA_DIR);
    if (!c.ok()) Fail("cannot load the catalog: " + c.status().ToString());
    return std::move(*c);
  }();
  return catalog;
}

// A directory of this process's own, under $TMPDIR; removed at exit.
const std::string& Dir() {
  static const std::string dir = [] {
    std::string name =
        (std::filesystem::temp_directory_path() / "gandiva-fuzz-XXXXXX")
            .string();
    if (::mkdtemp(name.data()) == nullptr) {
      Fail("cannot make a directory like " + name);
    }
    return name;
  }();
  static const bool removed_at_exit = [] {
    return std::atexit([] {
             std::error_code ec;
             std::filesystem::remove_all(Dir(), ec);
           }) == 0;
  }();
  (void)removed_at_exit;
  return dir;
}

// The file a reader reads, named `name` in Dir(): a link to a file in
// memory, which each input replaces (writing each input to a file on disk
// made a run many times slower).
class Input {
 public:
  explicit Input(const std::string& name)
      : fd_(::memfd_create(name.c_str(), 0)), path_(Dir() + "/" + name) {
    if (fd_ < 0) Fail("memfd_create: " + std::string(std::strerror(errno)));
    const std::string target = "/proc/self/fd/" + std::to_string(fd_);
    if (::symlink(target.c_str(), path_.c_str()) != 0) {
      Fail("symlink " + path_ + ": " + std::strerror(errno));
    }
  }

  // The path of a file that holds `data` now.
  const std::string& Hold(const uint8_t* data, size_t size) {
    for (size_t done = 0; done < size;) {
      const ssize_t n =
          ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) Fail("write " + path_ + ": " + std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      Fail("truncate " + path_ + ": " + std::strerror(errno));
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

void Check(const std::string& path,
           const gandiva::core::StatusOr<Workload>& w) {
  if (!w.ok()) {
    if (w.status().code() != gandiva::core::StatusCode::kInvalidArgument) {
      Fail("refused with other than INVALID_ARGUMENT: " +
           w.status().ToString());
    }
    if (w.status().message().rfind(path, 0) != 0) {
      Fail("message does not start with the file: " + w.status().message());
    }
    return;
  }
  constexpr int64_t kMaxMicros =
      static_cast<int64_t>(gandiva::sim::kMaxTraceSeconds * 1e6);
  const Catalog& catalog = TheCatalog();
  for (size_t i = 0; i < w->jobs.size(); ++i) {
    const gandiva::sim::TraceJob& j = w->jobs[i];
    const std::string row = "job " + std::to_string(i) + " (" + j.name + "): ";
    if (i == 0 && j.submit.micros() != 0) Fail(row + "first not at 0");
    if (i > 0 && j.submit < w->jobs[i - 1].submit) Fail(row + "out of order");
    if (j.submit.micros() < 0 || j.submit.micros() > kMaxMicros) {
      Fail(row + "submit " + std::to_string(j.submit.micros()) + " us");
    }
    if (j.duration.micros() < 0 || j.duration.micros() > kMaxMicros) {
      Fail(row + "duration " + std::to_string(j.duration.micros()) + " us");
    }
    if (j.gpus < 1 || j.gpus > Catalog::kMaxGpus || (j.gpus & (j.gpus - 1))) {
      Fail(row + std::to_string(j.gpus) + " GPUs");
    }
    if (j.model < 0 || j.model >= catalog.size()) {
      Fail(row + "model " + std::to_string(j.model));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Catalog& catalog = TheCatalog();
  static constexpr char kReaders[] = {'P', 'p', 'G', 'g', 'T'};
  char reader = static_cast<char>(data[0]);
  bool known = false;
  for (char r : kReaders) known = known || r == reader;
  if (!known) reader = kReaders[data[0] % sizeof kReaders];
  ++data;
  --size;
  switch (reader) {
    case 'P':
    case 'p': {
      static Input file("philly.csv");
      const std::string& path = file.Hold(data, size);
      gandiva::sim::PhillyOptions options;
      if (reader == 'p') {
        options.min_duration = gandiva::core::Duration::Seconds(60);
        options.max_gpu_hours = 1000;
        options.max_jobs = 5;
      }
      Check(path, gandiva::sim::ReadPhillyTrace(path, catalog, options));
      break;
    }
    case 'G':
    case 'g': {
      static Input file("vc.trace");
      const std::string& path = file.Hold(data, size);
      gandiva::sim::GavelOptions options;
      options.skip_unknown = reader == 'g';
      Check(path, gandiva::sim::ReadGavelTrace(path, catalog, options));
      break;
    }
    default: {
      static Input file("tiresias.csv");
      const std::string& path = file.Hold(data, size);
      Check(path, gandiva::sim::ReadTiresiasTrace(path, catalog));
      break;
    }
  }
  return 0;
}
