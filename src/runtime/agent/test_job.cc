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
//                30 s for PATH to exist: a process slow to go away;
//   --stream-ok NAME  with --state: before the restore, say it can take its
//                checkpoint file NAME ("state") from the source's socket
//                (GANDIVA_STREAM_OK_FILE); when the agent offers it
//                (GANDIVA_STREAM_OFFER_FILE) the load hook receives it and
//                prints "restored N (streamed)";
//   --stream-fail  take the offered stream's first byte, then exit 9.
#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "client/gandiva_client.h"
#include "client/progress_page.h"

namespace {

struct Options {
  long big_kib = 0;
  bool fail_save = false;
  bool stream_fail = false;
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

bool ReadAll(int fd, char* data, size_t n) {
  while (n > 0) {
    const ssize_t got = recv(fd, data, n, 0);
    if (got <= 0) return false;
    data += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// The offered file's bytes from the source (GANDIVA_STREAM_OFFER_FILE in
// `dir`); false with a message when it fails.
bool ReceiveOffered(const std::string& dir, const Options& o,
                    std::string* data) {
  std::ifstream in(dir + "/" GANDIVA_STREAM_OFFER_FILE);
  std::map<std::string, std::string> offer;
  std::string line;
  while (std::getline(in, line)) {
    const size_t sp = line.find(' ');
    if (sp != std::string::npos)
      offer[line.substr(0, sp)] = line.substr(sp + 1);
  }
  if (offer["streams"] != "1") {
    std::printf("stream: takes one stream, offered %s\n",
                offer["streams"].c_str());
    return false;
  }
  std::string token;
  const std::string& hex = offer["token"];
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    token += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  std::string host = offer["host"];
  if (host.size() > 1 && host.front() == '[') host = host.substr(1);
  if (!host.empty() && host.back() == ']') host.pop_back();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (getaddrinfo(host.c_str(), offer["port"].c_str(), &hints, &ai) != 0) {
    std::printf("stream: no address %s\n", host.c_str());
    return false;
  }
  const int fd = socket(ai->ai_family, SOCK_STREAM, 0);
  const bool connected =
      fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
  freeaddrinfo(ai);
  char accepted[8];
  if (!connected ||
      send(fd, token.data(), token.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(token.size()) ||
      !ReadAll(fd, accepted, sizeof accepted) ||
      std::memcmp(accepted, "GNDVBLK1", sizeof accepted) != 0) {
    std::printf("stream: not accepted\n");
    if (fd >= 0) close(fd);
    return false;
  }
  data->resize(std::stoull(offer["size"]));
  if (o.stream_fail) {
    ReadAll(fd, data->data(), 1);
    std::printf("stream: failing on purpose\n");
    std::fflush(stdout);
    _exit(9);
  }
  const bool ok = ReadAll(fd, data->data(), data->size());
  close(fd);
  if (!ok) std::printf("stream: ended early\n");
  return ok;
}

int Load(const char* path, void* user) {
  const Options& o = *static_cast<Options*>(user);
  const std::string offer = std::string(path) + "/" GANDIVA_STREAM_OFFER_FILE;
  if (access(offer.c_str(), F_OK) == 0) {
    std::string data;
    unsigned long long n = 0;
    if (!ReceiveOffered(path, o, &data) ||
        std::sscanf(data.c_str(), "minibatches %llu", &n) != 1) {
      return 1;
    }
    std::printf("restored %llu (streamed)\n", n);
    std::fflush(stdout);
    gandiva_set_minibatches(n);
    return 0;
  }
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
                 "[--fail-save] [--hold-exit PATH] [--stream-ok NAME] "
                 "[--stream-fail]\n",
                 argv[0]);
    return 2;
  }
  const unsigned long long steps = std::strtoull(argv[1], nullptr, 10);
  long step_ms = 5;
  bool worker = false, state = false;
  const char* stream_ok = nullptr;
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
    } else if (std::strcmp(argv[i], "--stream-ok") == 0 && i + 1 < argc) {
      stream_ok = argv[++i];
    } else if (std::strcmp(argv[i], "--stream-fail") == 0) {
      o.stream_fail = true;
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
    const char* resume = gandiva_resume_from();
    if (stream_ok != nullptr && resume != nullptr) {
      std::ofstream(std::string(resume) + "/" GANDIVA_STREAM_OK_FILE)
          << stream_ok << "\n";
    }
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
