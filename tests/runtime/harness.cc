#include "tests/runtime/harness.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/exec_env.h"
#include "runtime/scheduler/etcd_test_util.h"

namespace gandiva::e2e {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::unique_ptr<Process> Process::Start(
    const std::vector<std::string>& argv, const fs::path& log,
    const std::map<std::string, std::string>& env) {
  const int out =
      ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) return nullptr;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  runtime::ExecEnv envp(env);  // before fork: see ExecEnv
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out);
    return nullptr;
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // a Ctrl-C at the terminal goes to the test only
    // A test that crashes takes its daemons and agents with it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    for (int fd = 3; fd < 1024; ++fd) ::close(fd);
    ::execve(args[0], args.data(), envp.envp());
    ::_exit(127);
  }
  ::close(out);
  return std::unique_ptr<Process>(new Process(pid, log));
}

Process::~Process() { Stop(); }

bool Process::Alive() {
  if (exited_) return false;
  if (::waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
  return !exited_;
}

void Process::Signal(int sig) {
  if (Alive()) ::kill(pid_, sig);
}

bool Process::Wait(milliseconds timeout) {
  return WaitUntil([this] { return !Alive(); }, timeout,
                   std::chrono::milliseconds(20));
}

void Process::Stop(milliseconds grace) {
  if (!Alive()) return;
  ::kill(pid_, SIGTERM);
  if (!Wait(grace)) {
    ::kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
}

std::string Slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string TailOf(const fs::path& p, size_t lines) {
  std::istringstream in(Slurp(p));
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size();
       ++i) {
    out += "  | " + all[i] + "\n";
  }
  return out;
}

bool WaitUntil(const std::function<bool()>& pred, milliseconds timeout,
               milliseconds period) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(period);
  }
}

bool HaveTorch() {
  static const bool have = [] {
    const std::string cmd =
        std::string(GANDIVA_PYTHON) + " -c 'import torch' >/dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
  }();
  return have;
}

int CountLines(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.find(needle) != std::string::npos) ++n;
  }
  return n;
}

std::string Fingerprint(const std::string& log) {
  const std::string key = "parameters sha256 ";
  const size_t at = log.rfind(key);
  return at == std::string::npos ? "" : log.substr(at + key.size(), 64);
}

std::unique_ptr<Process> StartReferenceRun(const rpc::JobSpec& spec, int steps,
                                           int seed, const fs::path& log) {
  const std::map<std::string, std::string> env(spec.env().begin(),
                                               spec.env().end());
  return Process::Start(
      {GANDIVA_PYTHON, std::string(GANDIVA_EXAMPLES_DIR) + "/train_cnn.py",
       "--steps", std::to_string(steps), "--seed", std::to_string(seed)},
      log, env);
}

TestCluster::TestCluster(ClusterOptions options)
    : options_(std::move(options)) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  dir_ = fs::temp_directory_path() /
         ("gandiva_e2e_" + std::to_string(::getpid()) + "_" +
          (info != nullptr ? info->name() : "cluster"));
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  auto tls = runtime::LoadTls(options_.tls, "tls.");
  EXPECT_TRUE(tls.ok()) << tls.status().ToString();
  if (tls.ok()) tls_ = std::move(*tls);
  if (ha()) {
    ports_[0] = runtime::FreeLoopbackPort();
    do {
      ports_[1] = runtime::FreeLoopbackPort();
    } while (ports_[1] == ports_[0]);
  }
}

TestCluster::~TestCluster() {
  // Agents first (they kill their jobs), then the daemons.
  for (auto& a : agents_) a->Stop();
  for (auto& d : daemons_) {
    if (d) d->Stop();
  }
  if (std::getenv("GANDIVA_E2E_KEEP") == nullptr) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::vector<std::string> TestCluster::DaemonArgv(
    int port, const fs::path& addr_file,
    const std::vector<std::string>& store) const {
  std::ostringstream q;
  q << options_.quantum_s;
  std::vector<std::string> argv = {
      GANDIVA_SCHEDULER_BIN, "--listen",
      options_.scheduler_host + ":" + std::to_string(port), "--address-file",
      addr_file.string()};
  argv.insert(argv.end(), store.begin(), store.end());
  const std::vector<std::string> rest = {
      "--policy", options_.policy, "--quantum-s", q.str(), "--tick-ms",
      std::to_string(options_.tick_ms), "--profile-interval-s",
      std::to_string(options_.profile_interval_s),
      // Aborts on a stale reused job info.
      "--verify-reused-job-info"};
  argv.insert(argv.end(), rest.begin(), rest.end());
  const std::vector<std::string> tls = runtime::TlsArgs(options_.tls);
  argv.insert(argv.end(), tls.begin(), tls.end());
  argv.insert(argv.end(), options_.scheduler_args.begin(),
              options_.scheduler_args.end());
  return argv;
}

namespace {

// The address a daemon wrote to `addr_file` once it served; "" when it
// exited first, or did not within a minute.
std::string ServedAddress(const fs::path& addr_file, Process& daemon) {
  std::string address;
  WaitUntil(
      [&] {
        std::ifstream f(addr_file);
        std::getline(f, address);
        return !address.empty() || !daemon.Alive();
      },
      std::chrono::seconds(60), milliseconds(50));
  return address;
}

}  // namespace

bool TestCluster::StartScheduler(int port, std::string* error) {
  if (ha()) return StartDaemon(0, /*lead=*/true, error);
  const fs::path addr_file = dir_ / "scheduler.addr";
  std::error_code ec;
  fs::remove(addr_file, ec);
  ++scheduler_starts_;
  daemons_[0] = Process::Start(
      DaemonArgv(port, addr_file, {"--db", (dir_ / "scheduler.db").string()}),
      dir_ / "scheduler.log");
  if (daemons_[0] == nullptr) {
    *error = "cannot start " GANDIVA_SCHEDULER_BIN;
    return false;
  }
  const std::string address = ServedAddress(addr_file, *daemons_[0]);
  if (address.empty()) {
    *error = "gandiva-scheduler did not serve (start " +
             std::to_string(scheduler_starts_) + "):\n" +
             TailOf(dir_ / "scheduler.log");
    return false;
  }
  address_ = address;
  stub_ = rpc::Scheduler::NewStub(runtime::MakeChannel(address_, tls_));
  return true;
}

bool TestCluster::StartDaemon(int i, bool lead, std::string* error) {
  if (!ha() || i < 0 || i > 1) {
    *error = "StartDaemon: no daemon pair (ClusterOptions.etcd_endpoint)";
    return false;
  }
  const std::string n = std::to_string(i);
  const fs::path addr_file = dir_ / ("scheduler-" + n + ".addr");
  std::error_code ec;
  fs::remove(addr_file, ec);
  std::ostringstream ttl;
  ttl << options_.lease_ttl_s;
  const fs::path log = dir_ / ("scheduler-" + n + "." +
                               std::to_string(++scheduler_starts_) + ".log");
  daemons_[i] = Process::Start(
      DaemonArgv(ports_[i], addr_file,
                 {"--etcd", options_.etcd_endpoint, "--etcd-prefix", "/e2e/",
                  "--lease-ttl-s", ttl.str()}),
      log);
  if (daemons_[i] == nullptr) {
    *error = "cannot start " GANDIVA_SCHEDULER_BIN;
    return false;
  }
  if (!lead) return true;
  if (ServedAddress(addr_file, *daemons_[i]).empty()) {
    *error = "gandiva-scheduler " + n + " did not lead:\n" + TailOf(log);
    return false;
  }
  UseDaemon(i);
  return true;
}

std::string TestCluster::SchedulerList(const std::string& host) const {
  if (!ha()) return host + address_.substr(address_.rfind(':'));
  return host + ":" + std::to_string(ports_[0]) + "," + host + ":" +
         std::to_string(ports_[1]);
}

void TestCluster::UseDaemon(int i) {
  current_ = i;
  address_ = "127.0.0.1:" + std::to_string(ports_[i]);
  stub_ = rpc::Scheduler::NewStub(runtime::MakeChannel(address_, tls_));
}

void TestCluster::CallFailed() {
  if (ha()) UseDaemon(1 - current_);
}

Process* TestCluster::agent(const std::string& name) {
  for (size_t i = 0; i < agents_.size(); ++i) {
    if ("agent-" + std::to_string(i) == name) return agents_[i].get();
  }
  return nullptr;
}

std::vector<std::string> TestCluster::AgentArgv(int i) const {
  const std::string name = "agent-" + std::to_string(i);
  const fs::path work = dir_ / name;
  fs::create_directories(work);
  std::string scheduler = SchedulerList();
  std::string listen = "127.0.0.1:0";
  if (auto host = options_.agent_hosts.find(name);
      host != options_.agent_hosts.end()) {
    scheduler = SchedulerList(host->second);
    listen = host->second + ":0";
  }
  std::vector<std::string> argv = {GANDIVA_AGENT_BIN,
                                   "--scheduler",
                                   scheduler,
                                   "--listen",
                                   listen,
                                   "--name",
                                   name,
                                   "--virtual-gpus",
                                   std::to_string(options_.gpus_per_agent),
                                   "--virtual-only",
                                   "--work-dir",
                                   work.string(),
                                   "--checkpoint-dir",
                                   (work / "checkpoints").string(),
                                   "--report-interval-ms",
                                   "200"};
  const std::vector<std::string> tls = runtime::TlsArgs(options_.tls);
  argv.insert(argv.end(), tls.begin(), tls.end());
  argv.insert(argv.end(), options_.agent_args.begin(),
              options_.agent_args.end());
  return argv;
}

bool TestCluster::AgentsUp(const std::set<std::string>& names,
                           std::string* error) {
  const bool all_up = WaitUntil(
      [&] {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
        rpc::ListServersReply reply;
        if (!stub_->ListServers(&ctx, rpc::Empty(), &reply).ok()) {
          CallFailed();
          return false;
        }
        size_t up = 0;
        for (const auto& s : reply.servers()) {
          up += s.up() && names.contains(s.name()) ? 1 : 0;
        }
        return up == names.size();
      },
      std::chrono::seconds(60));
  if (!all_up) {
    *error = "the agents did not all register:\n" + Logs();
    return false;
  }
  return true;
}

bool TestCluster::StartAgents(std::string* error) {
  std::set<std::string> names;
  for (int i = 0; i < options_.agents; ++i) {
    const std::string name = "agent-" + std::to_string(i);
    auto p = Process::Start(AgentArgv(i), dir_ / (name + ".log"));
    if (p == nullptr) {
      *error = "cannot start " GANDIVA_AGENT_BIN;
      return false;
    }
    agents_.push_back(std::move(p));
    names.insert(name);
  }
  return AgentsUp(names, error);
}

bool TestCluster::RestartAgent(const std::string& name, std::string* error) {
  return StopAgent(name, error) && StartAgent(name, error);
}

bool TestCluster::StopAgent(const std::string& name, std::string* error) {
  Process* p = agent(name);
  if (p == nullptr) {
    *error = "no agent " + name;
    return false;
  }
  // Its jobs save their checkpoints first (20 s at most), then the rest
  // are killed (10 s).
  p->Stop(std::chrono::seconds(40));
  return true;
}

bool TestCluster::StartAgent(const std::string& name, std::string* error) {
  for (size_t i = 0; i < agents_.size(); ++i) {
    if ("agent-" + std::to_string(i) != name) continue;
    const fs::path log =
        dir_ / (name + "." + std::to_string(++agent_restarts_) + ".log");
    auto p = Process::Start(AgentArgv(static_cast<int>(i)), log);
    if (p == nullptr) {
      *error = "cannot start " GANDIVA_AGENT_BIN;
      return false;
    }
    agents_[i] = std::move(p);
    return AgentsUp({name}, error);
  }
  *error = "no agent " + name;
  return false;
}

bool TestCluster::Start(std::string* error) {
  if (ha()) {
    return StartDaemon(0, /*lead=*/true, error) &&
           StartDaemon(1, /*lead=*/false, error) && StartAgents(error);
  }
  return StartScheduler(0, error) && StartAgents(error);
}

std::string TestCluster::Logs() const {
  std::string out;
  for (const auto& d : daemons_) {
    if (d) out += d->log().filename().string() + ":\n" + TailOf(d->log());
  }
  for (size_t i = 0; i < agents_.size(); ++i) {
    out += "agent-" + std::to_string(i) + ".log:\n" +
           TailOf(agents_[i]->log(), 15);
  }
  return out;
}

int TestCluster::Cli(const std::vector<std::string>& args,
                     std::string* output) {
  static int n = 0;
  const fs::path log = dir_ / ("cli-" + std::to_string(++n) + ".out");
  std::vector<std::string> argv = {GANDIVA_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--scheduler");
  argv.push_back(ha() ? SchedulerList() : address_);
  std::map<std::string, std::string> env;
  if (!options_.tls.empty()) {
    env = {{"GANDIVA_TLS_CA", options_.tls.ca},
           {"GANDIVA_TLS_CERT", options_.tls.cert},
           {"GANDIVA_TLS_KEY", options_.tls.key},
           {"GANDIVA_TLS_NAME", options_.tls.name}};
  }
  auto p = Process::Start(argv, log, env);
  if (p == nullptr) {
    *output = "cannot start " GANDIVA_CLI;
    return -1;
  }
  if (!p->Wait(std::chrono::seconds(300))) p->Stop();
  *output = Slurp(log);
  const int st = p->status();
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::vector<rpc::HistoryEntry> TestCluster::History(int64_t id,
                                                    const std::string& action) {
  std::vector<rpc::HistoryEntry> out;
  const rpc::JobInfo job = Job(id);
  for (const auto& h : job.history()) {
    if (h.action() == action) out.push_back(h);
  }
  return out;
}

rpc::JobSpec TestCluster::PythonSpec(const std::string& name,
                                     const std::string& args) const {
  return PythonSpecIn(dir_, name, args);
}

rpc::JobSpec TestCluster::TrainSpec(const std::string& name,
                                    const std::string& model, int steps,
                                    int seed, int min_step_ms) const {
  return TrainSpecIn(dir_, name, model, steps, seed, min_step_ms);
}

rpc::JobSpec PythonSpecIn(const fs::path& dir, const std::string& name,
                          const std::string& args) {
  rpc::JobSpec spec;
  spec.set_name(name);
  spec.set_command(std::string(GANDIVA_PYTHON) + " " + args);
  spec.set_gpus(1);
  spec.set_owner("e2e");
  spec.set_workdir(dir.string());
  auto& env = *spec.mutable_env();
  env["PYTHONPATH"] = GANDIVA_PYTHON_DIR;
  env["GANDIVA_CLIENT_LIB"] = GANDIVA_CLIENT_LIB;
  env["OMP_NUM_THREADS"] = "1";
  env["PYTHONDONTWRITEBYTECODE"] = "1";
  return spec;
}

rpc::JobSpec TrainSpecIn(const fs::path& dir, const std::string& name,
                         const std::string& model, int steps, int seed,
                         int min_step_ms) {
  rpc::JobSpec spec = PythonSpecIn(
      dir, name,
      std::string(GANDIVA_EXAMPLES_DIR) + "/train_" + model + ".py --steps " +
          std::to_string(steps) + " --seed " + std::to_string(seed) +
          " --min-step-ms " + std::to_string(min_step_ms) + " --log-every 50");
  spec.set_total_minibatches(steps);
  return spec;
}

bool IsEnded(rpc::JobState s) {
  return s == rpc::FINISHED || s == rpc::FAILED || s == rpc::KILLED;
}

std::string Describe(TestCluster& c, int64_t id) {
  const rpc::JobInfo j = c.Job(id);
  std::string out = "job " + std::to_string(id) + " " +
                    rpc::JobState_Name(j.state()) + " on '" + j.server() +
                    "' mb " + std::to_string(j.progress().minibatches()) +
                    " exit " + std::to_string(j.exit_code()) + "\n";
  for (const auto& h : j.history()) {
    out += "    " + h.action() + (h.ok() ? " ok " : " FAILED ") +
           std::to_string(h.took_us()) + "us " + h.detail() + "\n";
  }
  return out;
}

bool WaitEnded(TestCluster& c, int64_t id, std::chrono::seconds timeout) {
  return WaitUntil([&] { return IsEnded(c.Job(id).state()); }, timeout);
}

int64_t TestCluster::Submit(const rpc::JobSpec& spec, std::string* error) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  rpc::SubmitRequest req;
  *req.mutable_spec() = spec;
  rpc::SubmitReply reply;
  const grpc::Status st = stub_->Submit(&ctx, req, &reply);
  if (!st.ok()) {
    CallFailed();
    *error = "Submit: " + st.error_message();
    return 0;
  }
  return reply.job_id();
}

std::map<int64_t, rpc::JobInfo> TestCluster::Jobs(bool* ok) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  rpc::ListJobsRequest req;
  req.set_all(true);
  rpc::ListJobsReply reply;
  const bool good = stub_->ListJobs(&ctx, req, &reply).ok();
  if (!good) CallFailed();
  if (ok != nullptr) *ok = good;
  std::map<int64_t, rpc::JobInfo> out;
  for (const auto& j : reply.jobs()) out[j.id()] = j;
  return out;
}

rpc::JobInfo TestCluster::Job(int64_t id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  rpc::JobIdRequest req;
  req.set_job_id(id);
  rpc::JobInfo info;
  if (!stub_->GetJob(&ctx, req, &info).ok()) {
    CallFailed();
    return rpc::JobInfo();
  }
  return info;
}

std::string TestCluster::JobLog(const rpc::JobInfo& job) {
  grpc::ClientContext lctx;
  lctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  rpc::ListServersReply servers;
  if (!stub_->ListServers(&lctx, rpc::Empty(), &servers).ok()) {
    CallFailed();
    return "";
  }
  // The agents read a log to whoever the daemon gives a ticket, as to
  // `gandiva logs`.
  // The agent of the job's server serves its whole log (a job that moved
  // brought its log along); without a server, every agent's part.
  std::string text;
  for (const auto& s : servers.servers()) {
    if (s.address().empty()) continue;
    if (!job.server().empty() && s.name() != job.server()) continue;
    grpc::ClientContext tctx;
    tctx.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    rpc::LogTicketRequest for_job;
    for_job.set_job_id(job.id());
    for_job.set_server(s.name());
    rpc::LogTicketReply ticket;
    if (!stub_->LogTicket(&tctx, for_job, &ticket).ok()) return "";
    auto agent = rpc::Agent::NewStub(runtime::MakeChannel(s.address(), tls_));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    rpc::TailLogRequest req;
    req.set_job_id(job.id());
    req.set_ticket(ticket.ticket());
    auto reader = agent->TailLog(&ctx, req);
    rpc::LogChunk chunk;
    while (reader->Read(&chunk)) text += chunk.data();
    (void)reader->Finish();
  }
  return text;
}

int ProcessesRunning(const std::string& needle) {
  return static_cast<int>(PidsRunning(needle).size());
}

int TrainingPid(int steps, int seed) {
  const std::vector<int> pids =
      PidsRunning("train_cnn.py --steps " + std::to_string(steps) + " --seed " +
                  std::to_string(seed) + " --min-step-ms");
  return pids.size() == 1 ? pids[0] : -1;
}

int LastStepBefore(const std::string& log, size_t end) {
  const size_t last = log.substr(0, end).rfind("\nstep ");
  return last == std::string::npos ? -1 : std::atoi(log.c_str() + last + 6);
}

std::vector<int> PidsRunning(const std::string& needle) {
  std::vector<int> pids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "cmdline");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string cmd = ss.str();
    // A zombie has an empty command line and no longer runs; a shell that
    // runs the command, or the agent's shim that runs the shell, is not
    // counted, only the command.
    const std::string argv0 = cmd.substr(0, cmd.find('\0'));
    const bool shell =
        (argv0.size() >= 2 && argv0.substr(argv0.size() - 2) == "sh") ||
        argv0 == "gandiva-job-shim";
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (!shell && cmd.find(needle) != std::string::npos) {
      pids.push_back(std::stoi(name));
    }
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

}  // namespace gandiva::e2e
