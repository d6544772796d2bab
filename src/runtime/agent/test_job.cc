// A training job for the agent's tests that uses the job-side library:
// `gandiva_agent_test_job STEPS [STEP_MS] [--worker]` runs STEPS mini-batches
// of STEP_MS milliseconds each (default 5), calling gandiva_step() at every
// boundary, prints "minibatches N resumed R" and exits 0. With --worker it
// first forks a child that idles in the same process group (a stand-in for
// a data-loader worker). Single-threaded.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "client/gandiva_client.h"

namespace {

void SleepMs(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s STEPS [STEP_MS] [--worker]\n", argv[0]);
    return 2;
  }
  const long steps = std::atol(argv[1]);
  const long step_ms = argc > 2 ? std::atol(argv[2]) : 5;
  const bool worker = argc > 3 && std::strcmp(argv[3], "--worker") == 0;
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
  long resumed = 0;
  for (long i = 0; i < steps; ++i) {
    SleepMs(step_ms);  // the mini-batch
    if (gandiva_step() == GANDIVA_STEP_RESUMED) ++resumed;
  }
  std::printf("minibatches %llu resumed %ld\n",
              static_cast<unsigned long long>(gandiva_minibatches()), resumed);
  std::fflush(stdout);
  gandiva_shutdown();
  return 0;
}
