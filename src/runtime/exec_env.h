// ExecEnv: the environment for a child that is about to be exec'd: this
// process's environment, less the names in `unset`, with `set` applied on
// top. Build it before fork(): the child of a threaded process (gRPC's) may
// only make async-signal-safe calls before exec, and envp() needs none.
// Holds its own strings; envp() stays valid while the ExecEnv lives.
// Thread-compatible (reads `environ` once, in the constructor).
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace gandiva::runtime {

class ExecEnv {
 public:
  explicit ExecEnv(const std::map<std::string, std::string>& set,
                   std::initializer_list<const char*> unset = {}) {
    std::map<std::string, std::string> vars;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq != nullptr) {
        vars[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
      }
    }
    for (const char* name : unset) vars.erase(name);
    for (const auto& [k, v] : set) vars[k] = v;
    strings_.reserve(vars.size());
    for (const auto& [k, v] : vars) strings_.push_back(k + "=" + v);
    for (std::string& s : strings_) ptrs_.push_back(s.data());
    ptrs_.push_back(nullptr);
  }
  ExecEnv(const ExecEnv&) = delete;
  ExecEnv& operator=(const ExecEnv&) = delete;

  // NULL-terminated, for execve and posix_spawn.
  char** envp() { return ptrs_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> ptrs_;
};

// posix_spawn attributes for a child in a session of its own (setsid in the
// child: it leads its session and its process group), with no signal blocked
// and every signal at its default action, whatever this process's threads
// block or handle. Its own session keeps what it runs off any terminal of
// ours, and lets CRIU dump it where our session's leader is outside our PID
// namespace (a sandbox started without a new session). Its group is
// orphaned, so SIGTSTP at its default action is ignored there: only a
// process whose library handles SIGTSTP is sent one; every other stop is
// SIGSTOP.
class ChildSpawnAttr {
 public:
  ChildSpawnAttr() {
    posix_spawnattr_init(&attr_);
    posix_spawnattr_setflags(&attr_, POSIX_SPAWN_SETSID |
                                         POSIX_SPAWN_SETSIGMASK |
                                         POSIX_SPAWN_SETSIGDEF);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr_, &none);
    sigset_t all;
    sigfillset(&all);
    posix_spawnattr_setsigdefault(&attr_, &all);
  }
  ~ChildSpawnAttr() { posix_spawnattr_destroy(&attr_); }
  ChildSpawnAttr(const ChildSpawnAttr&) = delete;
  ChildSpawnAttr& operator=(const ChildSpawnAttr&) = delete;

  const posix_spawnattr_t* get() const { return &attr_; }

 private:
  posix_spawnattr_t attr_;
};

// Reaps, without waiting, every child of ours in process group `pgid` that
// has ended: what a child spawned with ChildSpawnAttr (leading its own
// group) left there that outlived it and so became ours (a child
// subreaper's).
inline void ReapEndedInGroup(pid_t pgid) {
  while (waitpid(-pgid, nullptr, WNOHANG) > 0) {
  }
}

// The full path of `name` on $PATH (executable), or "" if not found; with
// no $PATH, /usr/local/bin:/usr/bin:/bin.
inline std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::istringstream in(p);
  for (std::string dir; std::getline(in, dir, ':');) {
    if (dir.empty()) continue;
    const std::string full = dir + "/" + name;
    struct stat st;
    if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(full.c_str(), X_OK) == 0) {
      return full;
    }
  }
  return "";
}

}  // namespace gandiva::runtime
