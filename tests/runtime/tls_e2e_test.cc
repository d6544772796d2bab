// Mutual TLS end to end: a daemon and agents started with --tls-*, a job
// started by the daemon on an agent over TLS, the CLI through
// $GANDIVA_TLS_*; clients without a certificate of the cluster's CA are
// turned away.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <string>

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

}  // namespace
}  // namespace gandiva::e2e
