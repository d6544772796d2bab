// A test harness for end-to-end runs of the real runtime binaries on
// loopback: child processes with their output in files, a scheduler daemon
// and agents on ports chosen at run time, job specs that run the PyTorch
// examples, and polling helpers with generous deadlines (failure guards for
// a loaded 2-core machine, never timing assertions).
//
// Paths come from compile definitions set by tests/runtime/CMakeLists.txt.
// Thread-compatible: use from the test's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/tls/tls.h"

namespace gandiva::e2e {

namespace fs = std::filesystem;

// A child process; stdout and stderr go to `log`. The destructor stops it
// (SIGTERM, SIGKILL after 10 s) if it still runs.
class Process {
 public:
  static std::unique_ptr<Process> Start(
      const std::vector<std::string>& argv, const fs::path& log,
      const std::map<std::string, std::string>& env = {});
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  const fs::path& log() const { return log_; }
  bool Alive();
  void Signal(int sig);
  // Waits until it exits (true) or `timeout` passes (false).
  bool Wait(std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL after `grace`; waits for the exit.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(10));
  int status() const { return status_; }  // waitpid status once exited

 private:
  Process(pid_t pid, fs::path log) : pid_(pid), log_(std::move(log)) {}
  pid_t pid_;
  fs::path log_;
  bool exited_ = false;
  int status_ = 0;
};

std::string Slurp(const fs::path& p);
// The last `lines` lines of a file, for failure messages.
std::string TailOf(const fs::path& p, size_t lines = 30);

// Polls `pred` every `period` until it is true (returns true) or `timeout`
// passes (returns false).
bool WaitUntil(
    const std::function<bool()>& pred, std::chrono::milliseconds timeout,
    std::chrono::milliseconds period = std::chrono::milliseconds(100));

// True when /usr/bin/python3 (GANDIVA_PYTHON) imports torch.
bool HaveTorch();

// Options of a local test cluster.
struct ClusterOptions {
  std::string policy = "gandiva";
  // Time runs faster here than in a cluster: a 2 s quantum (not 60 s),
  // ticks every 200 ms, agents report every 200 ms (not 500 ms) and every
  // report's rates go to the core (not every 2 s).
  double quantum_s = 2;
  int tick_ms = 200;
  double profile_interval_s = 0.2;
  int agents = 2;
  int gpus_per_agent = 2;
  // Extra command-line arguments of the daemon and of every agent.
  std::vector<std::string> scheduler_args;
  std::vector<std::string> agent_args;
  // Mutual TLS (PEM files) for the daemon, the agents, the harness's stubs
  // and the CLI ($GANDIVA_TLS_*); empty: plain connections.
  runtime::TlsFiles tls;
  // The host the daemon listens on; "0.0.0.0" serves every loopback
  // address (the harness and the CLI still reach it at 127.0.0.1).
  std::string scheduler_host = "127.0.0.1";
  // Agents (by name) that listen on another loopback address and reach the
  // daemon at it (with the daemon's port), e.g. {"agent-0", "127.0.0.2"}
  // with scheduler_host "0.0.0.0": a test can then drop that agent's
  // traffic alone. The others use 127.0.0.1.
  std::map<std::string, std::string> agent_hosts;
  // A pair of daemons sharing etcd at this endpoint (started by the test,
  // runtime::EtcdForTest) rather than one on SQLite: each on a port fixed
  // at the start, leading in turn (`--lease-ttl-s`); the agents and the CLI
  // are given both addresses, and the harness's calls go to the one that
  // answers (after a call fails, the other is tried next).
  std::string etcd_endpoint;
  double lease_ttl_s = 2;
};

// A scheduler daemon and agents in a temporary directory, as separate
// processes. Everything is stopped and the directory removed at the end.
class TestCluster {
 public:
  explicit TestCluster(ClusterOptions options);
  ~TestCluster();

  const fs::path& dir() const { return dir_; }
  const std::string& address() const { return address_; }
  rpc::Scheduler::Stub& stub() { return *stub_; }
  // The daemon (with a pair: the one the harness's calls go to now).
  Process* scheduler() { return daemons_[current_].get(); }
  // With etcd_endpoint: daemon `i` of the pair (0 or 1).
  Process* daemon(int i) { return daemons_[i].get(); }
  bool ha() const { return !options_.etcd_endpoint.empty(); }
  // The agent named `name` ("agent-0", ...); null if there is none.
  Process* agent(const std::string& name);

  // Starts the daemon on `port` (0: any free port; the address file tells
  // which); returns false (with the reason in *error) when it does not
  // serve within the deadline.
  bool StartScheduler(int port, std::string* error);
  // With etcd_endpoint: starts daemon `i` of the pair on its port; with
  // `lead`, waits until it serves (it leads) and sends the harness's calls
  // to it; without, returns once it started (it stands by while the other
  // leads).
  bool StartDaemon(int i, bool lead, std::string* error);
  // Starts every agent and waits until all are registered and up.
  bool StartAgents(std::string* error);
  // Stops the agent (SIGTERM, as Process::Stop; nothing if it has exited)
  // and starts it again with the same name, work and checkpoint
  // directories (its log in a new file); waits until it is registered and
  // up.
  bool RestartAgent(const std::string& name, std::string* error);
  // The two halves of RestartAgent.
  bool StopAgent(const std::string& name, std::string* error);
  bool StartAgent(const std::string& name, std::string* error);
  // Both.
  bool Start(std::string* error);
  // The daemon's and agents' logs, for failure messages.
  std::string Logs() const;

  // Runs the gandiva CLI against this cluster; returns its exit status and
  // puts its stdout and stderr in *output.
  int Cli(const std::vector<std::string>& args, std::string* output);
  // The job's history entries with this action, oldest first.
  std::vector<rpc::HistoryEntry> History(int64_t id, const std::string& action);

  // A one-GPU spec running `GANDIVA_PYTHON args` with the gandiva package
  // and library on its paths, one intra-op thread.
  rpc::JobSpec PythonSpec(const std::string& name,
                          const std::string& args) const;
  // A spec running examples/train_<model>.py for `steps` mini-batches.
  rpc::JobSpec TrainSpec(const std::string& name, const std::string& model,
                         int steps, int seed, int min_step_ms) const;
  // Submits; returns the job id (0 on failure, with the reason in *error).
  int64_t Submit(const rpc::JobSpec& spec, std::string* error);
  // ListJobs(all) as a map by id; empty on an RPC failure.
  std::map<int64_t, rpc::JobInfo> Jobs(bool* ok = nullptr);
  // GetJob: everything about one job, with its history (ListJobs may leave
  // the history out). An empty JobInfo on an RPC failure.
  rpc::JobInfo Job(int64_t id);
  // A job's log: the file at JobInfo.log_path when readable, else what
  // every agent's TailLog has for it (in server order).
  std::string JobLog(const rpc::JobInfo& job);

 private:
  ClusterOptions options_;
  fs::path dir_;
  std::string address_;
  std::unique_ptr<rpc::Scheduler::Stub> stub_;
  std::optional<runtime::TlsConfig> tls_;
  std::unique_ptr<Process> daemons_[2];
  int ports_[2] = {0, 0};  // with etcd_endpoint
  int current_ = 0;        // the daemon the harness's calls go to
  std::vector<std::unique_ptr<Process>> agents_;
  int scheduler_starts_ = 0;
  int agent_restarts_ = 0;

  std::vector<std::string> AgentArgv(int i) const;
  // A daemon's command line: listening on `port`, writing `addr_file`
  // once it serves, with `store`'s arguments (--db, or --etcd ...).
  std::vector<std::string> DaemonArgv(
      int port, const fs::path& addr_file,
      const std::vector<std::string>& store) const;
  // Every daemon's address, comma-separated, as the agents and the CLI
  // take them; `host` for the host part (the default: 127.0.0.1).
  std::string SchedulerList(const std::string& host = "127.0.0.1") const;
  // The harness's calls go to daemon `i` from now on.
  void UseDaemon(int i);
  // A call to the daemon failed: with a pair, the next goes to the other.
  void CallFailed();
  // Waits until the daemon lists these agents as up.
  bool AgentsUp(const std::set<std::string>& names, std::string* error);
};

// TestCluster::PythonSpec and TrainSpec for jobs working in `dir`.
rpc::JobSpec PythonSpecIn(const fs::path& dir, const std::string& name,
                          const std::string& args);
rpc::JobSpec TrainSpecIn(const fs::path& dir, const std::string& name,
                         const std::string& model, int steps, int seed,
                         int min_step_ms);

// FINISHED, FAILED or KILLED.
bool IsEnded(rpc::JobState s);

// A job's state, server, progress, exit code and history, for failure
// messages.
std::string Describe(TestCluster& c, int64_t id);
// Waits until the job has ended (true) or `timeout` passes (false).
bool WaitEnded(TestCluster& c, int64_t id, std::chrono::seconds timeout);
// Processes of this machine whose command line mentions `needle` (not
// counting the shells that run them).
int ProcessesRunning(const std::string& needle);
// Their pids, ascending.
std::vector<int> PidsRunning(const std::string& needle);
// The pid of the one process of a job TrainSpec made with these steps and
// seed (not its reference run's: that pads no mini-batch); -1 unless
// exactly one runs.
int TrainingPid(int steps, int seed);
// The step of the last "step N at T" line (TrainSpec's --log-steps 1) of
// `log` before `end`; -1 if none.
int LastStepBefore(const std::string& log, size_t end);

// Lines of `text` that contain `needle`.
int CountLines(const std::string& text, const std::string& needle);

// The last "parameters sha256 ..." of a training example's log (the
// fingerprint of its final parameters); "" when there is none.
std::string Fingerprint(const std::string& log);

// A reference run: examples/train_cnn.py for `steps` mini-batches from
// `seed`, outside gandiva, with `spec`'s environment (that of a TrainSpec),
// its output in `log`; its Fingerprint is what a job of the same steps and
// seed must end with, whatever happened to it. Null if it cannot start.
std::unique_ptr<Process> StartReferenceRun(const rpc::JobSpec& spec, int steps,
                                           int seed, const fs::path& log);

}  // namespace gandiva::e2e
