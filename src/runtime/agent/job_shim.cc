// gandiva-job-shim: the parent of one job's process, so that the job
// outlives its agent and its exit status is not lost with it.
//
//   gandiva-job-shim EXIT_FILE PROGRAM ARGV0 [ARG...]
//
// The agent spawns it in a session of its own, with a pipe on fd 3. It
// forks; the child starts a session of its own (the job's process group:
// the agent's signals reach the job, never the shim), takes default signal
// dispositions and runs PROGRAM, named ARGV0, with ARGs and the environment
// given. Once the exec succeeded or failed, the shim writes the child's pid on
// fd 3 (four bytes) and, should the exec have failed, its errno (four more; the
// child exits 127), then closes fd 3: its end of file tells the agent.
//
// When the child ends, the shim writes "<code>\n" to EXIT_FILE (through
// EXIT_FILE.tmp, renamed): the exit status, or -N for a child killed by
// signal N. Then it ends as its child did (the same status; the same
// signal, without a core dump), which is what its parent, the agent, reaps.
// An agent that died meanwhile leaves the shim to init; the agent that
// takes the job back reads EXIT_FILE instead.
//
// The shim ignores SIGHUP, SIGINT, SIGTERM, SIGQUIT and SIGTSTP: only
// SIGKILL ends it before its child.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr int kPidFd = 3;
constexpr int kIgnored[] = {SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGTSTP};

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void WriteExitFile(const char* path, int code) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= static_cast<int>(sizeof tmp))
    return;
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  char text[32];
  const int n = snprintf(text, sizeof text, "%d\n", code);
  const bool ok = WriteAll(fd, text, static_cast<size_t>(n)) && fsync(fd) == 0;
  close(fd);
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr,
            "usage: gandiva-job-shim EXIT_FILE PROGRAM ARGV0 [ARG...]\n");
    return 2;
  }
  for (int sig : kIgnored) signal(sig, SIG_IGN);
  fcntl(kPidFd, F_SETFD, FD_CLOEXEC);
  // The child's exec error, if any, comes back on this pipe (closed on a
  // successful exec).
  int exec_error[2];
  if (pipe2(exec_error, O_CLOEXEC) != 0) return 127;
  const pid_t child = fork();
  if (child < 0) {
    const int err = errno;
    const pid_t none = 0;
    (void)!WriteAll(kPidFd, &none, sizeof none);
    (void)!WriteAll(kPidFd, &err, sizeof err);
    return 127;
  }
  if (child == 0) {
    close(exec_error[0]);
    setsid();
    for (int sig : kIgnored) signal(sig, SIG_DFL);
    execv(argv[2], argv + 3);
    const int err = errno;
    (void)!WriteAll(exec_error[1], &err, sizeof err);
    _exit(127);
  }
  close(exec_error[1]);
  int err = 0;
  ssize_t got;
  do {
    got = read(exec_error[0], &err, sizeof err);
  } while (got < 0 && errno == EINTR);
  close(exec_error[0]);
  (void)!WriteAll(kPidFd, &child, sizeof child);
  if (got == static_cast<ssize_t>(sizeof err)) {
    (void)!WriteAll(kPidFd, &err, sizeof err);
  }
  close(kPidFd);
  int status = 0;
  pid_t r;
  do {
    r = waitpid(child, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r != child) return 127;
  if (WIFEXITED(status)) {
    WriteExitFile(argv[1], WEXITSTATUS(status));
    return WEXITSTATUS(status);
  }
  const int sig = WTERMSIG(status);
  WriteExitFile(argv[1], -sig);
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
  return 128 + sig;
}
