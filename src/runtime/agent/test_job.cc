// A training job for the agent's tests that uses the job-side library:
// `gandiva_agent_test_job STEPS [STEP_MS] [FLAGS]` trains until STEPS
// mini-batches of STEP_MS milliseconds each (default 5) have passed, calling
// gandiva_step() at every boundary, prints "minibatches N resumed R" and
// exits 0. Single-threaded. Flags:
//   --worker     first fork a child that idles in the same process group (a
//                stand-in for a data-loader worker or another rank);
//   --state      save/load hooks: the save hook writes "minibatches N" to
//                PATH/state (and PATH/weights with --big); gandiva_restore()
//                runs at start (a warm start waits there for its checkpoint),
//                the load hook prints "restored N" (and "weights ok") and
//                continues the count from N;
//   --big KIB    with --state: also a KIB KiB file of a known pattern;
//   --fail-save  the save hook fails (the job trains on);
//   --hold-exit PATH  at exit (after the library announced it), wait up to
//                30 s for PATH to exist: a process slow to go away.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "client/gandiva_client.h"

namespace {

struct Options {
  long big_kib = 0;
  bool fail_save = false;
};

const char* g_hold_exit = nullptr;  // --hold-exit

void HoldExit() {
  for (int i = 0; i < 3000 && access(g_hold_exit, F_OK) != 0; ++i) {
    timespec ts{0, 10 * 1000000L};
    nanosleep(&ts, nullptr);
  }
}

void SleepMs(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

unsigned char Pattern(size_t i) {
  return static_cast<unsigned char>((i * 131u + 7u) & 0xFFu);
}

int Save(const char* path, void* user) {
  const Options& o = *static_cast<Options*>(user);
  if (o.fail_save) return 1;
  std::string file = std::string(path) + "/state";
  FILE* f = std::fopen(file.c_str(), "w");
  if (f == nullptr) return 1;
  std::fprintf(f, "minibatches %llu\n",
               static_cast<unsigned long long>(gandiva_minibatches()));
  if (std::fclose(f) != 0) return 1;
  if (o.big_kib > 0) {
    std::vector<unsigned char> data(static_cast<size_t>(o.big_kib) * 1024);
    for (size_t i = 0; i < data.size(); ++i) data[i] = Pattern(i);
    f = std::fopen((std::string(path) + "/weights").c_str(), "wb");
    if (f == nullptr) return 1;
    const size_t n = std::fwrite(data.data(), 1, data.size(), f);
    if (std::fclose(f) != 0 || n != data.size()) return 1;
  }
  return 0;
}

int Load(const char* path, void* user) {
  const Options& o = *static_cast<Options*>(user);
  FILE* f = std::fopen((std::string(path) + "/state").c_str(), "r");
  if (f == nullptr) {
    std::printf("no state in %s\n", path);
    return 1;
  }
  unsigned long long n = 0;
  const int got = std::fscanf(f, "minibatches %llu", &n);
  std::fclose(f);
  if (got != 1) return 1;
  std::printf("restored %llu\n", n);
  if (o.big_kib > 0) {
    f = std::fopen((std::string(path) + "/weights").c_str(), "rb");
    if (f == nullptr) return 1;
    std::vector<unsigned char> data(static_cast<size_t>(o.big_kib) * 1024 + 1);
    const size_t len = std::fread(data.data(), 1, data.size(), f);
    std::fclose(f);
    bool ok = len + 1 == data.size();
    for (size_t i = 0; ok && i < len; ++i) ok = data[i] == Pattern(i);
    std::printf("weights %s\n", ok ? "ok" : "BAD");
    if (!ok) return 1;
  }
  std::fflush(stdout);
  gandiva_set_minibatches(n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s STEPS [STEP_MS] [--worker] [--state] [--big KIB] "
                 "[--fail-save] [--hold-exit PATH]\n",
                 argv[0]);
    return 2;
  }
  const unsigned long long steps = std::strtoull(argv[1], nullptr, 10);
  long step_ms = 5;
  bool worker = false, state = false;
  Options o;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--worker") == 0) {
      worker = true;
    } else if (std::strcmp(argv[i], "--state") == 0) {
      state = true;
    } else if (std::strcmp(argv[i], "--fail-save") == 0) {
      o.fail_save = true;
    } else if (std::strcmp(argv[i], "--big") == 0 && i + 1 < argc) {
      o.big_kib = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--hold-exit") == 0 && i + 1 < argc) {
      g_hold_exit = argv[++i];
      std::atexit(HoldExit);
    } else if (i == 2) {
      step_ms = std::atol(argv[i]);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (worker) {
    const pid_t child = fork();
    if (child == 0) {
      for (;;) pause();
    }
  }
  const int rc = gandiva_init();
  std::printf("init %s pid %d\n", gandiva_strerror(rc),
              static_cast<int>(getpid()));
  std::fflush(stdout);
  if (state) {
    gandiva_set_hooks(nullptr, nullptr, Save, Load, &o);
    const int restored = gandiva_restore();
    std::printf("restore %d\n", restored);
    std::fflush(stdout);
    if (restored < 0) return 3;
  }
  long resumed = 0;
  while (gandiva_minibatches() < steps) {
    SleepMs(step_ms);  // the mini-batch
    if (gandiva_step() == GANDIVA_STEP_RESUMED) ++resumed;
  }
  std::printf("minibatches %llu resumed %ld\n",
              static_cast<unsigned long long>(gandiva_minibatches()), resumed);
  std::fflush(stdout);
  gandiva_shutdown();
  return 0;
}
