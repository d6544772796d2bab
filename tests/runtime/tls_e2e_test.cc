// Mutual TLS end to end: a daemon and agents started with --tls-*, a job
// started by the daemon on an agent over TLS, the CLI through
// $GANDIVA_TLS_*; clients without a certificate of the cluster's CA are
// turned away.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "runtime/tls/test_certs.h"
#include "tests/runtime/harness.h"

namespace gandiva::e2e {
namespace {

TEST(TlsE2eTest, AClusterOnMutualTlsRunsJobsAndTurnsAwayOthers) {
  const fs::path certs =
      fs::temp_directory_path() /
      ("gandiva_tls_e2e_certs_" + std::to_string(::getpid()));
  fs::remove_all(certs);
  fs::create_directories(certs);
  ClusterOptions o;
  o.agents = 2;
  o.gpus_per_agent = 1;
  o.tls = runtime::testing::MakeTestCertificates(certs, "cluster");
  ASSERT_FALSE(o.tls.ca.empty()) << "openssl could not make certificates";
  TestCluster c(o);
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error << c.Logs();

  // The daemon starts it on an agent (StartJob over TLS), the agent reports
  // its exit (Report over TLS).
  rpc::JobSpec spec;
  spec.set_name("hello");
  spec.set_command("echo hello over tls");
  spec.set_gpus(1);
  spec.set_workdir(c.dir().string());
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitUntil([&] { return IsEnded(c.Job(id).state()); },
                        std::chrono::seconds(60)))
      << c.Logs();
  EXPECT_EQ(c.Job(id).state(), rpc::FINISHED);
  EXPECT_NE(c.JobLog(c.Job(id)).find("hello over tls"), std::string::npos);

  // The CLI with $GANDIVA_TLS_* (the harness sets them).
  std::string out;
  EXPECT_EQ(c.Cli({"ls", "-a"}, &out), 0) << out;
  EXPECT_NE(out.find("hello"), std::string::npos) << out;

  // A client with no certificate, and one of another CA: refused.
  auto ping = [&](const std::optional<runtime::TlsConfig>& tls) {
    auto stub = rpc::Scheduler::NewStub(runtime::MakeChannel(c.address(), tls));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    rpc::Empty reply;
    return stub->Ping(&ctx, rpc::Empty(), &reply);
  };
  EXPECT_FALSE(ping(std::nullopt).ok());
  auto rogue = runtime::LoadTls(
      runtime::testing::MakeTestCertificates(certs, "rogue"), "--tls-");
  ASSERT_TRUE(rogue.ok()) << rogue.status().ToString();
  EXPECT_FALSE(ping(*rogue).ok());
  auto ours = runtime::LoadTls(o.tls, "--tls-");
  ASSERT_TRUE(ours.ok());
  EXPECT_TRUE(ping(*ours).ok());

  // The CLI without them: the daemon is unreachable to it, and it says so.
  const fs::path log = c.dir() / "plain-cli.out";
  auto p = Process::Start({GANDIVA_CLI, "ls", "--scheduler", c.address()}, log,
                          {{"GANDIVA_TLS_CA", ""},
                           {"GANDIVA_TLS_CERT", ""},
                           {"GANDIVA_TLS_KEY", ""}});
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Wait(std::chrono::seconds(60)));
  EXPECT_NE(WEXITSTATUS(p->status()), 0) << Slurp(log);

  // Half a configuration is refused, naming what is missing.
  const fs::path half = c.dir() / "half-cli.out";
  auto q = Process::Start({GANDIVA_CLI, "ls", "--scheduler", c.address()}, half,
                          {{"GANDIVA_TLS_CA", o.tls.ca},
                           {"GANDIVA_TLS_CERT", o.tls.cert},
                           {"GANDIVA_TLS_KEY", ""}});
  ASSERT_NE(q, nullptr);
  ASSERT_TRUE(q->Wait(std::chrono::seconds(60)));
  EXPECT_EQ(WEXITSTATUS(q->status()), 2);
  EXPECT_NE(Slurp(half).find("$GANDIVA_TLS_KEY: missing"), std::string::npos)
      << Slurp(half);
  fs::remove_all(certs);
}

// With users and mutual TLS, a certificate names its holder and role
// (`gandiva certs`): an agent's registers it, a user's does not; a user
// acts on their own jobs only, an admin on any.
TEST(TlsE2eTest, CertificatesNameTheirUsersAndRoles) {
  const fs::path dir = fs::temp_directory_path() /
                       ("gandiva_tls_users_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path certs = dir / "certs";
  int runs = 0;
  // The CLI with `env`: its exit status and output.
  auto cli = [&](const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env,
                 std::string* out) {
    std::vector<std::string> argv = {GANDIVA_CLI};
    argv.insert(argv.end(), args.begin(), args.end());
    const fs::path log = dir / ("cli-" + std::to_string(++runs) + ".out");
    auto p = Process::Start(argv, log, env);
    if (p == nullptr || !p->Wait(std::chrono::seconds(60))) return -1;
    *out = Slurp(log);
    return WEXITSTATUS(p->status());
  };
  std::string out;
  ASSERT_EQ(cli({"certs", "ca", "--dir", certs.string()}, {}, &out), 0) << out;
  const std::vector<std::pair<std::string, std::string>> holders = {
      {"head", "daemon"}, {"node-1", "agent"}, {"node-2", "agent"},
      {"alice", "user"},  {"bob", "user"},     {"ops", "admin"}};
  for (const auto& [name, role] : holders) {
    ASSERT_EQ(
        cli({"certs", "issue", name, "--role", role, "--dir", certs.string()},
            {}, &out),
        0)
        << out;
  }
  EXPECT_EQ(fs::status(certs / "alice.key").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  auto tls = [&](const std::string& who) {
    return std::vector<std::string>{
        "--tls-ca",   (certs / "ca.pem").string(),
        "--tls-cert", (certs / (who + ".pem")).string(),
        "--tls-key",  (certs / (who + ".key")).string()};
  };
  auto as = [&](const std::string& who) {
    return std::map<std::string, std::string>{
        {"GANDIVA_TLS_CA", (certs / "ca.pem").string()},
        {"GANDIVA_TLS_CERT", (certs / (who + ".pem")).string()},
        {"GANDIVA_TLS_KEY", (certs / (who + ".key")).string()},
        {"GANDIVA_CREDENTIALS", ""}};
  };

  std::vector<std::string> sargv = {GANDIVA_SCHEDULER_BIN,
                                    "--listen",
                                    "127.0.0.1:0",
                                    "--address-file",
                                    (dir / "addr").string(),
                                    "--db",
                                    (dir / "gandiva.db").string(),
                                    "--credentials-dir",
                                    (dir / "creds").string(),
                                    "--policy",
                                    "fifo",
                                    "--tick-ms",
                                    "200"};
  for (const std::string& a : tls("head")) sargv.push_back(a);
  fs::create_directories(dir / "creds");
  auto daemon = Process::Start(sargv, dir / "scheduler.log");
  ASSERT_NE(daemon, nullptr);
  std::string address;
  ASSERT_TRUE(WaitUntil(
      [&] {
        address = Slurp(dir / "addr");
        return !address.empty();
      },
      std::chrono::seconds(30)))
      << TailOf(dir / "scheduler.log");
  address = address.substr(0, address.find('\n'));
  auto agent = [&](const std::string& name, const std::string& cert) {
    std::vector<std::string> argv = {GANDIVA_AGENT_BIN,
                                     "--scheduler",
                                     address,
                                     "--name",
                                     name,
                                     "--virtual-gpus",
                                     "1",
                                     "--virtual-only",
                                     "--work-dir",
                                     (dir / ("work-" + name)).string(),
                                     "--checkpoint-dir",
                                     (dir / ("ckpt-" + name)).string()};
    for (const std::string& a : tls(cert)) argv.push_back(a);
    return Process::Start(argv, dir / (name + ".log"),
                          {{"GANDIVA_CREDENTIALS", ""}});
  };
  auto node = agent("node-1", "node-1");
  auto intruder = agent("intruder", "bob");
  // An agent's certificate names the one agent it is.
  auto impostor = agent("node-9", "node-1");
  ASSERT_TRUE(node && intruder && impostor);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Slurp(dir / "node-1.log").find("registered with") !=
                   std::string::npos &&
               Slurp(dir / "intruder.log").find("(rule: agent)") !=
                   std::string::npos &&
               Slurp(dir / "node-9.log").find("(rule: agent name)") !=
                   std::string::npos;
      },
      std::chrono::seconds(30)))
      << TailOf(dir / "node-1.log") << TailOf(dir / "intruder.log")
      << TailOf(dir / "node-9.log");
  EXPECT_NE(Slurp(dir / "node-9.log")
                .find("agent node-1 may not register as agent 'node-9': its "
                      "certificate names agent 'node-1'"),
            std::string::npos)
      << TailOf(dir / "node-9.log");
  impostor->Stop();

  const std::string sched = "--scheduler=" + address;
  std::ofstream(dir / "job.yaml")
      << "name: secret\ncommand: sleep 300\nenv: {API_KEY: hunter2}\n";
  ASSERT_EQ(
      cli({"submit", (dir / "job.yaml").string(), sched}, as("alice"), &out), 0)
      << out;
  const std::string id = out.substr(0, out.find('\n'));
  ASSERT_EQ(cli({"user", "whoami", sched}, as("alice"), &out), 0) << out;
  EXPECT_EQ(out, "alice (user)\n");
  EXPECT_EQ(cli({"kill", id, sched}, as("bob"), &out), 1) << out;
  EXPECT_NE(out.find("bob may not kill job " + id +
                     ": it is alice's, and only its owner or an admin acts "
                     "on it (rule: owner)"),
            std::string::npos)
      << out;
  EXPECT_EQ(cli({"show", id, sched}, as("bob"), &out), 0) << out;
  EXPECT_EQ(out.find("hunter2"), std::string::npos) << out;
  EXPECT_NE(out.find("owner:        alice"), std::string::npos) << out;
  // The daemon's certificate names no user: it is no caller here.
  EXPECT_EQ(cli({"ls", sched}, as("head"), &out), 1) << out;
  EXPECT_NE(out.find("not authenticated"), std::string::npos) << out;
  EXPECT_EQ(cli({"kill", id, sched}, as("ops"), &out), 0) << out;
  ASSERT_EQ(cli({"show", id, sched}, as("alice"), &out), 0) << out;
  EXPECT_NE(out.find("kill by a user (ops)"), std::string::npos) << out;

  // A move between two agents, each with its own certificate: the
  // destination fetches the checkpoint with its ticket, as the agent the
  // ticket names.
  auto node2 = agent("node-2", "node-2");
  ASSERT_NE(node2, nullptr);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Slurp(dir / "node-2.log").find("registered with") !=
               std::string::npos;
      },
      std::chrono::seconds(30)))
      << TailOf(dir / "node-2.log");
  std::ofstream(dir / "own.yaml")
      << "name: own\nrestartable: true\ncommand: |\n"
         "  if [ -f \"$GANDIVA_RESUME_FROM/own\" ]; then echo \"resumed "
         "$(cat \"$GANDIVA_RESUME_FROM/own\")\"; fi\n"
         "  trap 'echo 42 > \"$GANDIVA_CHECKPOINT_DIR/own\"; exit 0' TERM\n"
         "  while :; do sleep 0.05; done\n";
  ASSERT_EQ(
      cli({"submit", (dir / "own.yaml").string(), sched}, as("alice"), &out), 0)
      << out;
  const std::string own = out.substr(0, out.find('\n'));
  std::string where;
  ASSERT_TRUE(WaitUntil(
      [&] {
        cli({"show", own, sched}, as("alice"), &out);
        return out.find("state:        running") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << out;
  const std::string to =
      out.find("node-1") != std::string::npos ? "node-2" : "node-1";
  ASSERT_EQ(cli({"migrate", own, "--to", to, sched}, as("ops"), &out), 0)
      << out << TailOf(dir / "scheduler.log") << TailOf(dir / "node-1.log")
      << TailOf(dir / "node-2.log");
  ASSERT_TRUE(WaitUntil(
      [&] {
        cli({"logs", own, sched}, as("alice"), &out);
        return out.find("resumed 42") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << out;
  node2->Stop();

  intruder->Stop();
  node->Stop();
  daemon->Stop();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gandiva::e2e
