// `gandiva up` and `gandiva down`: a local cluster in one command. `up`
// starts gandiva-scheduler and N gandiva-agents with virtual GPUs as
// background processes (the binaries next to this one), waits until every
// agent has registered, and records what it started in the state directory
// (see local_cluster.h); `down` stops exactly those processes.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/job_spec.h"
#include "cli/local_cluster.h"
#include "cli/scheduler_client.h"
#include "runtime/exec_env.h"

#ifndef GANDIVA_SOURCE_DIR
#define GANDIVA_SOURCE_DIR ""
#endif
#ifndef GANDIVA_CLIENT_LIB_PATH
#define GANDIVA_CLIENT_LIB_PATH ""
#endif

namespace gandiva::cli {
namespace {

namespace fs = std::filesystem;

// Where a local cluster's agents keep checkpoints: a ramdisk when there is
// one, named after the state directory so that two local clusters (or a
// cluster and a test) never share one; `down --purge` removes it.
std::string CheckpointRoot(const std::string& state_dir) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : state_dir) {
    h = (h ^ c) * 1099511628211ull;
  }
  char name[40];
  std::snprintf(name, sizeof name, "gandiva-up-%016llx",
                static_cast<unsigned long long>(h));
  std::error_code ec;
  const bool shm = fs::is_directory("/dev/shm", ec);
  return (shm ? std::string("/dev/shm") : state_dir + "/agents") + "/" + name;
}

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The quantum `up --demo` gives a new database unless --quantum-s says.
constexpr double kDemoQuantumS = 10;
// With that short quantum, rates reach the policy this often (the daemon's
// default is 2 s), so that packing shows within a slice or two.
constexpr const char* kDemoProfileIntervalS = "0.5";

struct UpFlags {
  std::string state_dir;
  // Unset: the cluster's shape (the state directory's), else 2 and 2.
  std::optional<int> agents;
  std::optional<int> gpus_per_agent;
  int port = 0;
  std::optional<std::string> policy;
  std::optional<std::string> queues;
  std::optional<double> quantum_s;
  std::optional<double> share_half_life_s;
  std::optional<int> tick_ms;
  bool demo = false;
  bool real_gpus = false;
  bool real_gpus_given = false;
  double timeout_s = 60;
  std::vector<std::string> scheduler_args;
  std::vector<std::string> agent_args;
};

struct DownFlags {
  std::string state_dir;
  bool purge = false;
  double grace_s = 10;
};

std::string Tail(const std::string& path, size_t lines) {
  std::ifstream f(path);
  std::vector<std::string> all;
  std::string line;
  while (std::getline(f, line)) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size();
       ++i) {
    out += "    " + all[i] + "\n";
  }
  return out;
}

// The first existing path among `candidates`, or "".
std::string FirstExisting(const std::vector<fs::path>& candidates) {
  for (const auto& p : candidates) {
    std::error_code ec;
    if (!p.empty() && fs::exists(p, ec)) {
      return fs::absolute(p).lexically_normal().string();
    }
  }
  return "";
}

// <repo>/python, <repo>/examples, libgandiva_client.so: next to the build
// tree this binary sits in, else where CMake said at configure time.
std::string FindPythonDir(const fs::path& bin) {
  const std::string init = FirstExisting(
      {bin / "../../python/gandiva/__init__.py",
       bin / "../share/gandiva/python/gandiva/__init__.py",
       fs::path(GANDIVA_SOURCE_DIR) / "python/gandiva/__init__.py"});
  return init.empty() ? ""
                      : fs::path(init).parent_path().parent_path().string();
}

std::string FindExamplesDir(const fs::path& bin) {
  const std::string demo = FirstExisting(
      {bin / "../../examples/demo", bin / "../share/gandiva/examples/demo",
       fs::path(GANDIVA_SOURCE_DIR) / "examples/demo"});
  return demo.empty() ? "" : fs::path(demo).parent_path().string();
}

// `file` as a user standing in the current directory types it: relative
// when it lies below, else absolute.
std::string PathFromHere(const fs::path& file) {
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(file, ec);
  const fs::path cwd = fs::current_path(ec);
  if (!ec && !cwd.empty()) {
    const fs::path rel = abs.lexically_relative(cwd);
    if (!rel.empty() && *rel.begin() != "..") return rel.string();
  }
  return abs.string();
}

std::string FindClientLib(const fs::path& bin) {
  return FirstExisting(
      {bin / "../lib/libgandiva_client.so", fs::path(GANDIVA_CLIENT_LIB_PATH)});
}

// Starts `argv` in the background: its own session (a Ctrl-C at the
// terminal does not reach it), stdin from /dev/null, stdout and stderr
// appended to `log`, `env` added to ours. Returns the pid or -1.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log,
            const std::map<std::string, std::string>& env, std::string* error) {
  const int out =
      ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) {
    *error = "cannot open " + log;
    return -1;
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  runtime::ExecEnv envp(env);  // before fork: see ExecEnv
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out);
    *error = "fork failed";
    return -1;
  }
  if (pid == 0) {
    ::setsid();
    const int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    for (int fd = 3; fd < 1024; ++fd) ::close(fd);
    ::execve(args[0], args.data(), envp.envp());
    static const char kMsg[] = "gandiva up: cannot exec the binary\n";
    (void)!::write(2, kMsg, sizeof kMsg - 1);
    ::_exit(127);
  }
  ::close(out);
  return pid;
}

// True while our child `pid` has not exited (reaps it when it has).
bool ChildAlive(pid_t pid, int* status) {
  return ::waitpid(pid, status, WNOHANG) == 0;
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) {
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status));
  }
  return "stopped";
}

// The live processes of a record (a recycled pid does not count).
std::vector<ClusterProcess> Alive(const ClusterRecord& record) {
  std::vector<ClusterProcess> out;
  for (const auto& p : record.processes) {
    if (ProcessRuns(p.pid, BinaryOf(p))) out.push_back(p);
  }
  return out;
}

// A job process an agent runs.
struct AgentJob {
  int64_t job_id = 0;
  std::string agent;  // the agent's name
};

// Job processes the agents run now (by pid), asked before they stop so that
// none outlives `down`.
std::map<pid_t, AgentJob> AgentJobs(const std::string& scheduler) {
  std::map<pid_t, AgentJob> out;
  auto stub = ConnectScheduler(scheduler);
  rpc::ListServersReply servers;
  if (!stub->ListServers(Context(milliseconds(3000)).get(), rpc::Empty(),
                         &servers)
           .ok()) {
    return out;
  }
  for (const auto& s : servers.servers()) {
    if (!s.up() || s.address().empty()) continue;
    auto agent = ConnectAgent(s.address());
    rpc::AgentStatusReply status;
    if (agent
            ->Status(Context(milliseconds(3000)).get(),
                     rpc::AgentStatusRequest(), &status)
            .ok()) {
      for (const auto& j : status.jobs()) {
        if (j.pid() > 0) {
          out[static_cast<pid_t>(j.pid())] = AgentJob{j.job_id(), s.name()};
        }
      }
    }
  }
  return out;
}

// True when `pid` is still the process of gandiva job `job_id`.
bool IsJobProcess(pid_t pid, int64_t job_id) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ",
                  std::ios::binary);
  if (!f) return false;
  const std::string want = "GANDIVA_JOB_ID=" + std::to_string(job_id);
  std::string var;
  while (std::getline(f, var, '\0')) {
    if (var == want) return true;
  }
  return false;
}

// SIGTERM to each, then SIGKILL to those alive after `grace`.
void Stop(const std::vector<ClusterProcess>& procs, double grace_s) {
  for (const auto& p : procs) ::kill(p.pid, SIGTERM);
  const auto deadline =
      Clock::now() + milliseconds(static_cast<int64_t>(grace_s * 1000));
  for (;;) {
    bool any = false;
    for (const auto& p : procs) any = any || ProcessRuns(p.pid, BinaryOf(p));
    if (!any) return;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  for (const auto& p : procs) {
    if (ProcessRuns(p.pid, BinaryOf(p))) {
      std::fprintf(stderr,
                   "gandiva down: %s (pid %d) still runs after %.0fs: "
                   "SIGKILL\n",
                   p.role.c_str(), static_cast<int>(p.pid), grace_s);
      ::kill(p.pid, SIGKILL);
    }
  }
  const auto hard = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < hard) {
    bool any = false;
    for (const auto& p : procs) any = any || ProcessRuns(p.pid, BinaryOf(p));
    if (!any) return;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

// How long a local cluster's agent may take to stop beyond the grace
// period: its jobs first save a checkpoint (gandiva-agent
// --stop-checkpoint-timeout-ms, 20 s by default).
constexpr double kAgentSaveS = 20;

// Stops the processes of `record` that are alive: the agents first, all at
// once, while the scheduler still runs (each has its jobs save a checkpoint
// where they can and stops the rest, having told the scheduler, which has
// a job spanning servers save through rank 0's agent), then the scheduler
// (its database keeps the jobs' state), then any job process that outlived
// its agent. Returns how many daemons it stopped; the jobs the agents ran
// go in *stopped_jobs (job id -> agent name).
size_t StopCluster(const ClusterRecord& record, double grace_s,
                   std::map<int64_t, std::string>* stopped_jobs = nullptr) {
  const std::vector<ClusterProcess> alive = Alive(record);
  std::map<pid_t, AgentJob> jobs;
  if (const ClusterProcess* s = record.scheduler();
      s != nullptr && ProcessRuns(s->pid, BinaryOf(*s))) {
    jobs = AgentJobs(s->name);
  }
  if (stopped_jobs != nullptr) {
    for (const auto& [pid, job] : jobs) {
      (*stopped_jobs)[job.job_id] = job.agent;
    }
  }
  std::vector<ClusterProcess> schedulers, agents;
  for (const auto& p : alive) {
    (p.role == "scheduler" ? schedulers : agents).push_back(p);
  }
  Stop(agents, grace_s + kAgentSaveS);
  Stop(schedulers, grace_s);
  for (const auto& [pid, job] : jobs) {
    if (IsJobProcess(pid, job.job_id)) {
      std::fprintf(stderr,
                   "gandiva down: job %lld (pid %d) outlived its agent: "
                   "SIGKILL\n",
                   static_cast<long long>(job.job_id), static_cast<int>(pid));
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
  }
  return alive.size();
}

// Where `down` keeps the agents' checkpoints while the cluster is down,
// when they are on a ramdisk (which does not outlive a reboot).
fs::path KeptCheckpoints(const std::string& state_dir) {
  return fs::path(state_dir) / "checkpoints";
}

// Bytes and files below `root`.
void Measure(const fs::path& root, uintmax_t* bytes, size_t* files) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code e;
    if (it->is_regular_file(e)) {
      *bytes += it->file_size(e);
      ++*files;
    }
  }
}

// Replaces `to` by a copy of `from` (through `to`.tmp, renamed when whole),
// then removes `from`; "" or what failed.
std::string MoveTree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  const fs::path tmp = to.string() + ".tmp";
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp.parent_path(), ec);
  fs::copy(from, tmp,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (ec) {
    const std::string why = "cannot copy " + from.string() + " to " +
                            tmp.string() + ": " + ec.message();
    fs::remove_all(tmp, ec);
    return why;
  }
  fs::remove_all(to, ec);
  fs::rename(tmp, to, ec);
  if (ec) {
    return "cannot rename " + tmp.string() + " to " + to.string() + ": " +
           ec.message();
  }
  // On disk before the source goes: a power loss right after `down` must
  // not lose what a reboot would keep.
  if (const int fd = ::open(to.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      fd >= 0) {
    (void)::syncfs(fd);
    ::close(fd);
  }
  fs::remove_all(from, ec);
  return "";
}

// After the agents stopped: their checkpoints move from the ramdisk to the
// state directory, so that the jobs that saved one go on from it at the
// next `up` even after a reboot. Nothing when they are not on a ramdisk.
void KeepCheckpointsOnDisk(const std::string& dir) {
  const fs::path ram = CheckpointRoot(dir);
  std::error_code ec;
  if (!fs::is_directory(ram, ec) ||
      ram.string().rfind(dir, 0) == 0) {  // already below the state dir
    return;
  }
  uintmax_t bytes = 0;
  size_t files = 0;
  Measure(ram, &bytes, &files);
  const auto t0 = Clock::now();
  if (std::string err = MoveTree(ram, KeptCheckpoints(dir)); !err.empty()) {
    std::fprintf(stderr,
                 "gandiva down: %s; the checkpoints stay in %s, which a "
                 "reboot empties\n",
                 err.c_str(), ram.c_str());
    return;
  }
  if (files > 0) {
    std::printf(
        "gandiva down: moved the agents' checkpoints (%zu files, %.1f MB) "
        "from the ramdisk to %s in %.2f s, so that they outlive a reboot\n",
        files, static_cast<double>(bytes) / 1e6, KeptCheckpoints(dir).c_str(),
        std::chrono::duration<double>(Clock::now() - t0).count());
  }
}

// Before the agents start: checkpoints `down` kept on disk go back where
// the agents look for them. False (with the reason said) when they cannot.
bool RestoreCheckpoints(const std::string& dir) {
  const fs::path kept = KeptCheckpoints(dir);
  std::error_code ec;
  if (!fs::is_directory(kept, ec)) return true;
  const fs::path ram = CheckpointRoot(dir);
  if (std::string err = MoveTree(kept, ram); !err.empty()) {
    std::fprintf(stderr, "gandiva up: %s\n", err.c_str());
    return false;
  }
  return true;
}

// How to call this binary in printed hints: relative to the current
// directory when it is below it ("build/bin/gandiva").
std::string SelfForHints() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "gandiva";
  const fs::path rel = fs::relative(exe, fs::current_path(ec), ec);
  if (!ec && !rel.empty() && rel.begin()->string() != "..") {
    return rel.string();
  }
  return exe.string();
}

bool IsDefaultStateDir(const std::string& flag) {
  return flag.empty() && std::getenv("GANDIVA_STATE_DIR") == nullptr;
}

// Submits every examples/demo/*.yaml; false on the first failure.
bool SubmitDemo(const std::string& address, const fs::path& bin) {
  const std::string examples = FindExamplesDir(bin);
  if (examples.empty()) {
    std::fprintf(stderr,
                 "gandiva up: --demo: no examples/demo directory "
                 "found next to this build\n");
    return false;
  }
  std::vector<fs::path> specs;
  for (const auto& e : fs::directory_iterator(examples + "/demo")) {
    if (e.path().extension() == ".yaml") specs.push_back(e.path());
  }
  std::sort(specs.begin(), specs.end());
  std::printf("demo: submitting %zu jobs from %s/demo\n", specs.size(),
              examples.c_str());
  // All at once (one request, their arrivals logged together).
  rpc::SubmitJobsRequest req;
  for (const auto& path : specs) {
    auto spec = LoadJobSpec(path.string());
    if (!spec.ok()) {
      std::fprintf(stderr, "gandiva up: --demo: %s\n",
                   spec.status().message().c_str());
      return false;
    }
    *req.add_specs() = std::move(*spec);
  }
  rpc::SubmitJobsReply reply;
  const grpc::Status st =
      ConnectScheduler(address)->SubmitJobs(Context().get(), req, &reply);
  if (!st.ok()) {
    std::fprintf(stderr, "gandiva up: --demo: submitting the jobs: %s\n",
                 DescribeRpcError(st, {address, true, ""}).c_str());
    return false;
  }
  for (int i = 0; i < reply.job_ids_size() && i < req.specs_size(); ++i) {
    std::printf("  job %lld: %s (%s)\n",
                static_cast<long long>(reply.job_ids(i)),
                req.specs(i).name().c_str(),
                specs[static_cast<size_t>(i)].filename().c_str());
  }
  return true;
}

// "a, b, c".
std::string Join(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// "1 GPU", "2 GPUs".
std::string Count(int n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// The agents to start: the flags, else the shape the state directory keeps
// from the last `up`, else the defaults. Refused (with the reason): GPUs per
// agent other than those of the servers the daemon's database knows. Fewer
// agents than before is a note: the others' servers are declared down.
core::StatusOr<ClusterShape> ResolveShape(const UpFlags& f,
                                          const std::string& dir) {
  auto recorded = ReadClusterShape(dir);
  if (!recorded.ok()) {
    return core::InvalidArgument(recorded.status().message() +
                                 " (remove it, or start afresh with "
                                 "`gandiva down --purge`)");
  }
  ClusterShape shape;
  if (*recorded) shape = **recorded;
  std::error_code ec;
  const bool known =
      recorded->has_value() && fs::exists(fs::path(dir) / "scheduler.db", ec);
  if (f.gpus_per_agent) {
    if (known && *f.gpus_per_agent != shape.gpus_per_agent) {
      return core::InvalidArgument(
          "--gpus-per-agent " + std::to_string(*f.gpus_per_agent) +
          ": the agents of the cluster in " + dir + " have " +
          Count(shape.gpus_per_agent, "GPU") +
          " each, and a server's GPUs cannot change (its scheduler's "
          "database keeps them); leave the flag out, or start afresh with "
          "`gandiva down --purge`");
    }
    shape.gpus_per_agent = *f.gpus_per_agent;
  }
  if (f.agents) {
    if (known && *f.agents < shape.agents) {
      std::printf(
          "gandiva up: agent-%d%s of this cluster %s not started: the "
          "scheduler declares %s down when it has waited for %s "
          "(--agent-timeout-s, then --agent-grace-s), and places %s jobs "
          "again\n",
          *f.agents,
          shape.agents - *f.agents > 1
              ? (" to agent-" + std::to_string(shape.agents - 1)).c_str()
              : "",
          shape.agents - *f.agents > 1 ? "are" : "is",
          shape.agents - *f.agents > 1 ? "their servers" : "its server",
          shape.agents - *f.agents > 1 ? "them" : "it",
          shape.agents - *f.agents > 1 ? "their" : "its");
    }
    shape.agents = *f.agents;
  }
  if (f.real_gpus_given) shape.real_gpus = f.real_gpus;
  return shape;
}

int RunUp(const UpFlags& f) {
  const std::string dir = ResolveStateDir(f.state_dir);
  UseLocalAdminCredential(dir);  // a running cluster's, if any
  const std::string self = SelfForHints();
  const std::string hint_dir =
      IsDefaultStateDir(f.state_dir) ? "" : " --state-dir " + dir;

  if (auto record = ReadClusterRecord(dir)) {
    const auto alive = Alive(*record);
    const ClusterProcess* s = record->scheduler();
    if (s != nullptr && ProcessRuns(s->pid, BinaryOf(*s))) {
      std::printf(
          "gandiva up: the local cluster is already up: scheduler at %s "
          "(pid %d), %zu of %zu processes running; state in %s\n"
          "  stop it with: %s down%s\n",
          s->name.c_str(), static_cast<int>(s->pid), alive.size(),
          record->processes.size(), dir.c_str(), self.c_str(),
          hint_dir.c_str());
      return 0;
    }
    // A stale record (crashed or killed daemons): clear what is left.
    if (!alive.empty()) {
      std::printf(
          "gandiva up: stopping %zu leftover processes of a previous "
          "cluster\n",
          alive.size());
    }
    StopCluster(*record, 5);
    std::error_code ec;
    fs::remove(ClusterRecordPath(dir), ec);
  }

  auto shape_or = ResolveShape(f, dir);
  if (!shape_or.ok()) {
    std::fprintf(stderr, "gandiva up: %s\n",
                 shape_or.status().message().c_str());
    return 1;
  }
  const ClusterShape shape = *shape_or;
  if (!RestoreCheckpoints(dir)) return 1;

  const fs::path bin = SelfDirectory();
  const std::string scheduler_bin = (bin / "gandiva-scheduler").string();
  const std::string agent_bin = (bin / "gandiva-agent").string();
  for (const auto& b : {scheduler_bin, agent_bin}) {
    if (::access(b.c_str(), X_OK) != 0) {
      std::fprintf(stderr,
                   "gandiva up: %s not found: build it (cmake --build build "
                   "--target gandiva-scheduler gandiva-agent)\n",
                   b.c_str());
      return 1;
    }
  }
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "logs", ec);
  if (ec) {
    std::fprintf(stderr, "gandiva up: cannot create %s/logs: %s\n", dir.c_str(),
                 ec.message().c_str());
    return 1;
  }

  // The agents' (hence the jobs') environment: the Python package and the
  // job-side library of this build, so that job specs need neither.
  std::map<std::string, std::string> agent_env;
  if (std::string py = FindPythonDir(bin); !py.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    agent_env["PYTHONPATH"] =
        py + (old != nullptr && *old ? ":" + std::string(old) : "");
  }
  if (std::string lib = FindClientLib(bin); !lib.empty()) {
    agent_env["GANDIVA_CLIENT_LIB"] = lib;
  }

  ClusterRecord record;
  auto fail = [&](const std::string& what, const std::string& log) {
    std::fprintf(stderr, "gandiva up: %s\n", what.c_str());
    if (!log.empty()) {
      std::fprintf(stderr, "  last lines of %s:\n%s", log.c_str(),
                   Tail(log, 15).c_str());
    }
    StopCluster(record, 3);
    for (const auto& p : record.processes) ::waitpid(p.pid, nullptr, WNOHANG);
    std::error_code ignored;
    fs::remove(ClusterRecordPath(dir), ignored);
    return 1;
  };

  // The scheduler.
  const std::string addr_file = dir + "/scheduler.addr";
  fs::remove(addr_file, ec);
  const std::string sched_log = dir + "/logs/scheduler.log";
  std::vector<std::string> sargv = {scheduler_bin,
                                    "--listen",
                                    "127.0.0.1:" + std::to_string(f.port),
                                    "--address-file",
                                    addr_file,
                                    "--db",
                                    dir + "/scheduler.db",
                                    "--credentials-dir",
                                    dir};
  if (f.policy) sargv.insert(sargv.end(), {"--policy", *f.policy});
  if (f.queues) {
    sargv.insert(sargv.end(),
                 {"--queues", fs::absolute(fs::path(*f.queues)).string()});
  }
  std::optional<double> quantum = f.quantum_s;
  if (!quantum && f.demo && !fs::exists(fs::path(dir) / "scheduler.db")) {
    quantum = kDemoQuantumS;  // a new database: let time-slicing show soon
  }
  if (quantum) {
    std::ostringstream q;
    q << *quantum;
    sargv.insert(sargv.end(), {"--quantum-s", q.str()});
  }
  if (f.share_half_life_s) {
    std::ostringstream h;
    h << *f.share_half_life_s;
    sargv.insert(sargv.end(), {"--share-half-life-s", h.str()});
  }
  if (f.tick_ms) {
    sargv.insert(sargv.end(), {"--tick-ms", std::to_string(*f.tick_ms)});
  }
  if (f.demo && std::find(f.scheduler_args.begin(), f.scheduler_args.end(),
                          "--profile-interval-s") == f.scheduler_args.end()) {
    sargv.insert(sargv.end(), {"--profile-interval-s", kDemoProfileIntervalS});
  }
  // With $GANDIVA_TLS_* set, the local cluster uses the same files: mutual
  // TLS between the CLI, the daemon and the agents.
  const std::vector<std::string> tls_args =
      ClientTls() ? runtime::TlsArgs(runtime::TlsFilesFromEnv())
                  : std::vector<std::string>{};
  sargv.insert(sargv.end(), tls_args.begin(), tls_args.end());
  sargv.insert(sargv.end(), f.scheduler_args.begin(), f.scheduler_args.end());
  std::string error;
  const pid_t spid = Spawn(sargv, sched_log, {}, &error);
  if (spid < 0) return fail(error, "");

  const auto deadline =
      Clock::now() + milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  std::string address;
  int status = 0;
  while (address.empty()) {
    if (!ChildAlive(spid, &status)) {
      return fail("gandiva-scheduler " + DescribeExit(status), sched_log);
    }
    if (Clock::now() > deadline) {
      ::kill(spid, SIGKILL);
      return fail("gandiva-scheduler did not write " + addr_file + " in " +
                      std::to_string(static_cast<int>(f.timeout_s)) + "s",
                  sched_log);
    }
    std::ifstream a(addr_file);
    std::getline(a, address);
    while (!address.empty() &&
           std::isspace(static_cast<unsigned char>(address.back()))) {
      address.pop_back();
    }
    if (address.empty()) std::this_thread::sleep_for(milliseconds(50));
  }
  UseLocalAdminCredential(dir);  // written by the scheduler before it serves
  record.processes.push_back({"scheduler", spid, address});
  if (auto st = WriteClusterRecord(dir, record); !st.ok()) {
    return fail(st.message(), "");
  }

  // The agents.
  for (int i = 0; i < shape.agents; ++i) {
    const std::string name = "agent-" + std::to_string(i);
    const std::string work = dir + "/agents/" + name;
    fs::create_directories(work, ec);
    std::vector<std::string> aargv = {agent_bin,
                                      "--scheduler",
                                      address,
                                      "--listen",
                                      "127.0.0.1:0",
                                      "--name",
                                      name,
                                      "--virtual-gpus",
                                      std::to_string(shape.gpus_per_agent),
                                      "--work-dir",
                                      work,
                                      "--checkpoint-dir",
                                      CheckpointRoot(dir) + "/" + name,
                                      "--credentials",
                                      dir + "/agent.cred"};
    if (!shape.real_gpus) aargv.push_back("--virtual-only");
    aargv.insert(aargv.end(), tls_args.begin(), tls_args.end());
    aargv.insert(aargv.end(), f.agent_args.begin(), f.agent_args.end());
    const pid_t apid =
        Spawn(aargv, dir + "/logs/" + name + ".log", agent_env, &error);
    if (apid < 0) return fail(error, "");
    record.processes.push_back({"agent", apid, name});
    if (auto st = WriteClusterRecord(dir, record); !st.ok()) {
      return fail(st.message(), "");
    }
  }

  // Wait until every agent has registered.
  auto stub = ConnectScheduler(address);
  std::set<std::string> want;
  for (int i = 0; i < shape.agents; ++i)
    want.insert("agent-" + std::to_string(i));
  for (;;) {
    for (const auto& p : record.processes) {
      if (!ChildAlive(p.pid, &status)) {
        return fail(BinaryOf(p) + " (" + p.role +
                        (p.role == "agent" ? " " + p.name : "") + ") " +
                        DescribeExit(status),
                    p.role == "scheduler" ? sched_log
                                          : dir + "/logs/" + p.name + ".log");
      }
    }
    rpc::ListServersReply servers;
    std::set<std::string> missing = want;
    if (stub->ListServers(Context(milliseconds(2000)).get(), rpc::Empty(),
                          &servers)
            .ok()) {
      for (const auto& s : servers.servers()) {
        if (s.up()) missing.erase(s.name());
      }
      if (missing.empty()) break;
    }
    if (Clock::now() > deadline) {
      return fail(std::string(missing.size() == 1 ? "agent " : "agents ") +
                      Join(missing) +
                      " did not register with the scheduler "
                      "in " +
                      std::to_string(static_cast<int>(f.timeout_s)) +
                      "s; see " + dir + "/logs/",
                  dir + "/logs/" + *missing.begin() + ".log");
    }
    std::this_thread::sleep_for(milliseconds(100));
  }

  std::printf(
      "gandiva up: local cluster up: scheduler at %s, %s x %s\n"
      "  state and logs: %s\n",
      address.c_str(), Count(shape.agents, "agent").c_str(),
      ((shape.real_gpus ? "the GPUs NVML finds, else " : "") +
       Count(shape.gpus_per_agent, "virtual GPU"))
          .c_str(),
      dir.c_str());
  if (auto st = WriteClusterShape(dir, shape); !st.ok()) {
    std::fprintf(stderr,
                 "gandiva up: %s (the next `up` needs the same "
                 "--agents and --gpus-per-agent)\n",
                 st.message().c_str());
  }
  if (!hint_dir.empty()) {
    std::printf("  point the CLI at it: export GANDIVA_STATE_DIR=%s\n",
                dir.c_str());
  }
  // The example job's spec, as found from where the user stands.
  const std::string examples = FindExamplesDir(bin);
  const std::string example =
      examples.empty() ? "JOB.yaml"
                       : PathFromHere(fs::path(examples) / "cnn.yaml");
  std::printf(
      "  submit a job:   %s submit %s\n"
      "  list jobs:      %s ls\n"
      "  see the GPUs:   %s servers\n"
      "  stop it all:    %s down%s\n",
      self.c_str(), example.c_str(), self.c_str(), self.c_str(), self.c_str(),
      hint_dir.c_str());
  if (f.demo) {
    if (!SubmitDemo(address, bin)) return 1;
    std::printf("watch it with: %s ls%s\n", self.c_str(), hint_dir.c_str());
  }
  return 0;
}

int RunDown(const DownFlags& f) {
  const std::string dir = ResolveStateDir(f.state_dir);
  UseLocalAdminCredential(dir);
  auto record = ReadClusterRecord(dir);
  size_t stopped = 0;
  std::map<int64_t, std::string> jobs;  // whose processes the agents ran
  if (record) stopped = StopCluster(*record, f.grace_s, &jobs);
  std::error_code ec;
  fs::remove(ClusterRecordPath(dir), ec);
  fs::remove(fs::path(dir) / "scheduler.addr", ec);
  if (stopped == 0) {
    std::printf(
        "gandiva down: the local cluster is not running (state in "
        "%s)\n",
        dir.c_str());
  } else {
    std::printf("gandiva down: stopped %zu processes (state in %s)\n", stopped,
                dir.c_str());
  }
  if (!jobs.empty() && !f.purge) {
    // Their processes went with the agents: say what becomes of them. An
    // agent records each checkpoint it keeps (held-checkpoint); that of a
    // job spanning servers is kept by rank 0's.
    std::set<std::string> agents;
    for (const auto& p : record->processes) {
      if (p.role == "agent") agents.insert(p.name);
    }
    std::vector<int64_t> saved, lost;
    for (const auto& [job, agent] : jobs) {
      agents.insert(agent);
      bool held = false;
      for (const std::string& a : agents) {
        held = held || fs::exists(fs::path(CheckpointRoot(dir)) / a / "jobs" /
                                      std::to_string(job) / "held-checkpoint",
                                  ec);
      }
      (held ? saved : lost).push_back(job);
    }
    auto list = [](const std::vector<int64_t>& ids) {
      std::string out = ids.size() == 1 ? "job " : "jobs ";
      for (size_t i = 0; i < ids.size(); ++i) {
        out += (i == 0 ? "" : ", ") + std::to_string(ids[i]);
      }
      return out;
    };
    if (!saved.empty()) {
      std::printf(
          "gandiva down: %zu job%s stopped mid-run after saving a "
          "checkpoint (%s): at the next `gandiva up` %s on from %s\n",
          saved.size(), saved.size() == 1 ? "" : "s", list(saved).c_str(),
          saved.size() == 1 ? "it goes" : "they go",
          saved.size() == 1 ? "it" : "them");
    }
    if (!lost.empty()) {
      std::printf(
          "gandiva down: %zu job%s stopped mid-run without a checkpoint "
          "(%s): at the next `gandiva up` %s started again from the "
          "beginning (a job that reads checkpoints it wrote itself goes on "
          "from those)\n",
          lost.size(), lost.size() == 1 ? "" : "s", list(lost).c_str(),
          lost.size() == 1 ? "it is" : "they are");
    }
  }
  if (!f.purge) KeepCheckpointsOnDisk(dir);
  if (f.purge) {
    // Only what `up` creates: never a whole directory a user pointed at.
    for (const char* name :
         {"cluster.tmp", "scheduler.addr.tmp", "shape", "shape.tmp",
          "scheduler.db", "scheduler.db-wal", "scheduler.db-shm",
          "scheduler.db-journal", "scheduler.db.lock", "logs", "agents",
          "checkpoints", "checkpoints.tmp", "admin.cred", "agent.cred"}) {
      fs::remove_all(fs::path(dir) / name, ec);
    }
    fs::remove_all(CheckpointRoot(dir), ec);
    fs::remove_all(CheckpointRoot(dir) + ".tmp", ec);
    fs::remove(dir, ec);  // only when empty now
    std::printf("gandiva down: purged the state%s\n",
                fs::exists(dir) ? " (other files left in place)" : "");
  }
  return 0;
}

}  // namespace

void AddClusterCommands(CLI::App& app, int& exit_code) {
  {
    auto f = std::make_shared<UpFlags>();
    CLI::App* up = app.add_subcommand(
        "up",
        "Start a local cluster: a scheduler daemon and agents with virtual "
        "GPUs, in the background");
    up->add_option("--agents", f->agents,
                   "Agents (servers) to start (default: as many as the last "
                   "`up` of this state directory, else 2)")
        ->check(CLI::Range(1, 64));
    up->add_option("--gpus-per-agent", f->gpus_per_agent,
                   "Virtual GPUs per agent (default: as the last `up` of this "
                   "state directory, which a server cannot change, else 2)")
        ->check(CLI::Range(1, 64));
    up->add_option("--state-dir", f->state_dir,
                   "Where the database, logs and the record of the processes "
                   "go (default: $GANDIVA_STATE_DIR, else ~/.gandiva)");
    up->add_option("--port", f->port,
                   "The scheduler's port on 127.0.0.1 (0: any free port)")
        ->capture_default_str()
        ->check(CLI::Range(0, 65535));
    up->add_option("--policy", f->policy,
                   "Scheduling policy (see `gandiva policies`; default: "
                   "the database's, else gandiva)");
    up->add_option("--queues", f->queues,
                   "YAML file of the queues (teams) and their GPU quotas "
                   "(see `gandiva-scheduler --help`; default: the "
                   "database's, else none; others than the database's are "
                   "applied as `gandiva queues apply` would)");
    up->add_option("--quantum-s", f->quantum_s,
                   "Time-slice in seconds (default: the database's, else 60)");
    up->add_option("--share-half-life-s", f->share_half_life_s,
                   "gandiva-fair: half-life in seconds of what a queue, or a "
                   "user within it, is owed or owes (default: the "
                   "database's, else 3600)");
    up->add_option("--tick-ms", f->tick_ms,
                   "Milliseconds between scheduling ticks (default: the "
                   "daemon's)");
    up->add_flag("--demo", f->demo,
                 "Then submit the demo workload (examples/demo/*.yaml); a new "
                 "state dir gets --quantum-s 10 unless given, and rates reach "
                 "the policy every 0.5 s");
    CLI::Option* real = up->add_flag(
        "--real-gpus", f->real_gpus,
        "Let agents use the GPUs NVML finds (default: as the last `up` of "
        "this state directory, else virtual GPUs only)");
    up->add_option("--timeout-s", f->timeout_s,
                   "How long to wait for the daemons to come up")
        ->capture_default_str();
    up->add_option("--scheduler-arg", f->scheduler_args,
                   "Extra argument for gandiva-scheduler (repeatable)")
        ->allow_extra_args(false);
    up->add_option("--agent-arg", f->agent_args,
                   "Extra argument for each gandiva-agent (repeatable)")
        ->allow_extra_args(false);
    up->callback([f, real, &exit_code] {
      f->real_gpus_given = real->count() > 0;
      exit_code = RunUp(*f);
    });
  }
  {
    auto f = std::make_shared<DownFlags>();
    CLI::App* down = app.add_subcommand(
        "down", "Stop the local cluster started by `gandiva up`");
    down->add_option("--state-dir", f->state_dir,
                     "The cluster's state directory (default: "
                     "$GANDIVA_STATE_DIR, else ~/.gandiva)");
    down->add_flag("--purge", f->purge,
                   "Also remove the state: database, logs, agents' work "
                   "directories");
    down->add_option("--grace-s", f->grace_s,
                     "Seconds between SIGTERM and SIGKILL (agents get 20 s "
                     "more: their jobs save a checkpoint first)")
        ->capture_default_str();
    down->callback([f, &exit_code] { exit_code = RunDown(*f); });
  }
}

}  // namespace gandiva::cli
