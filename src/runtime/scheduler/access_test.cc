// Users and access over gRPC on loopback: a real daemon with users
// (--credentials-dir), called with each user's token.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/auth/control_token.h"
#include "runtime/auth/credentials.h"
#include "runtime/scheduler/scheduler_server.h"

namespace gandiva::runtime {
namespace {

namespace fs = std::filesystem;

class AccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gandiva-access-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    daemon_.reset();
    fs::remove_all(dir_);
  }
  SchedulerOptions Options(bool with_dir = true) {
    SchedulerOptions o;
    o.listen = "127.0.0.1:0";
    o.db_path = (dir_ / "gandiva.db").string();
    o.metrics_listen.clear();
    o.policy = "fifo";
    if (with_dir) {
      o.credentials_dir = dir_.string();
      o.admin_user = "root";
    }
    return o;
  }
  void Start(SchedulerOptions o) {
    daemon_.reset();
    auto s = SchedulerServer::Start(std::move(o));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    daemon_ = std::move(*s);
    stub_ = rpc::Scheduler::NewStub(grpc::CreateChannel(
        daemon_->address(), grpc::InsecureChannelCredentials()));
  }
  // A context carrying `token` (none when empty).
  static std::unique_ptr<grpc::ClientContext> As(const std::string& token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) AttachCredential({"", token}, ctx.get());
    return ctx;
  }
  std::string Token(const std::string& file) {
    auto c = ReadCredential((dir_ / file).string());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c->token : "";
  }
  std::string AddUser(const std::string& as, const std::string& name,
                      const std::string& role = "user") {
    rpc::AddUserRequest req;
    req.set_name(name);
    req.set_role(role);
    rpc::AddUserReply rep;
    const grpc::Status s = stub_->AddUser(As(as).get(), req, &rep);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return rep.token();
  }
  int64_t Submit(const std::string& as, const std::string& claimed_owner) {
    rpc::SubmitRequest req;
    req.mutable_spec()->set_name("train");
    req.mutable_spec()->set_command("python3 train.py --secret");
    req.mutable_spec()->set_gpus(1);
    req.mutable_spec()->set_owner(claimed_owner);
    (*req.mutable_spec()->mutable_env())["API_KEY"] = "hunter2";
    rpc::SubmitReply rep;
    const grpc::Status s = stub_->Submit(As(as).get(), req, &rep);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return rep.job_id();
  }
  rpc::JobInfo Get(const std::string& as, int64_t id) {
    rpc::JobIdRequest req;
    req.set_job_id(id);
    rpc::JobInfo info;
    const grpc::Status s = stub_->GetJob(As(as).get(), req, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info;
  }
  grpc::Status Kill(const std::string& as, int64_t id) {
    rpc::KillRequest req;
    req.set_job_id(id);
    rpc::Empty rep;
    return stub_->Kill(As(as).get(), req, &rep);
  }

  fs::path dir_;
  std::unique_ptr<SchedulerServer> daemon_;
  std::unique_ptr<rpc::Scheduler::Stub> stub_;
};

TEST_F(AccessTest, TheCredentialsDirectoryHoldsTheAdminsAndTheAgentsTokens) {
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  for (const char* file : {"admin.cred", "agent.cred"}) {
    EXPECT_EQ(fs::status(dir_ / file).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write)
        << file;
  }
  rpc::UserInfo me;
  ASSERT_TRUE(stub_->WhoAmI(As(Token("admin.cred")).get(), {}, &me).ok());
  EXPECT_EQ(me.name(), "root");
  EXPECT_EQ(me.role(), "admin");
  ASSERT_TRUE(stub_->WhoAmI(As(Token("agent.cred")).get(), {}, &me).ok());
  EXPECT_EQ(me.name(), "agents");
  EXPECT_EQ(me.role(), "agent");
  // Restarted on the same directory: the same tokens still serve.
  const std::string admin = Token("admin.cred");
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  EXPECT_EQ(Token("admin.cred"), admin);
  EXPECT_TRUE(stub_->WhoAmI(As(admin).get(), {}, &me).ok());
}

TEST_F(AccessTest, EveryCallMustProveWhoseItIs) {
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  rpc::ListJobsReply jobs;
  grpc::Status s = stub_->ListJobs(As("").get(), {}, &jobs);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("no credential"), std::string::npos)
      << s.error_message();
  s = stub_->ListJobs(As("gdv_0000").get(), {}, &jobs);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("no user's of this cluster"),
            std::string::npos);
  grpc::ClientContext malformed;
  malformed.AddMetadata("authorization", "Basic abc");
  EXPECT_EQ(stub_->ListJobs(&malformed, {}, &jobs).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // A health check needs none.
  rpc::Empty pong;
  EXPECT_TRUE(stub_->Ping(As("").get(), {}, &pong).ok());
}

TEST_F(AccessTest, AUserActsOnTheirOwnJobsAndAnAdminOnAny) {
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  const std::string root = Token("admin.cred");
  const std::string alice = AddUser(root, "alice");
  const std::string bob = AddUser(root, "bob");

  // The owner is who submits, whatever the spec claims.
  const int64_t a = Submit(alice, "bob");
  EXPECT_EQ(Get(alice, a).spec().owner(), "alice");

  // Bob sees the job but not its command or env.
  const rpc::JobInfo seen = Get(bob, a);
  EXPECT_TRUE(seen.withheld());
  EXPECT_TRUE(seen.spec().command().empty());
  EXPECT_TRUE(seen.spec().env().empty());
  EXPECT_EQ(seen.spec().name(), "train");
  rpc::ListJobsRequest all;
  all.set_all(true);
  rpc::ListJobsReply listed;
  ASSERT_TRUE(stub_->ListJobs(As(bob).get(), all, &listed).ok());
  ASSERT_EQ(listed.jobs_size(), 1);
  EXPECT_TRUE(listed.jobs(0).withheld());
  EXPECT_TRUE(listed.jobs(0).spec().env().empty());
  EXPECT_FALSE(Get(alice, a).withheld());
  EXPECT_EQ(Get(alice, a).spec().env().at("API_KEY"), "hunter2");
  EXPECT_EQ(Get(root, a).spec().command(), "python3 train.py --secret");

  // Bob cannot kill, suspend, resume or reprioritise it, nor move it.
  grpc::Status s = Kill(bob, a);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(),
            "bob may not kill job " + std::to_string(a) +
                ": it is alice's, and only its owner or an admin acts on it "
                "(rule: owner)");
  rpc::JobsRequest many;
  many.add_job_ids(a);
  rpc::JobsReply outcomes;
  ASSERT_TRUE(stub_->SuspendJobs(As(bob).get(), many, &outcomes).ok());
  EXPECT_EQ(outcomes.outcomes(0).code(), grpc::StatusCode::PERMISSION_DENIED);
  rpc::JobIdRequest one;
  one.set_job_id(a);
  rpc::Empty empty;
  EXPECT_EQ(stub_->Suspend(As(bob).get(), one, &empty).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(stub_->Resume(As(bob).get(), one, &empty).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  rpc::SetPriorityRequest prio;
  prio.set_job_id(a);
  prio.set_priority(5);
  rpc::SetPriorityReply was;
  EXPECT_EQ(stub_->SetPriority(As(bob).get(), prio, &was).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  rpc::MigrateRequest mig;
  mig.set_job_id(a);
  mig.set_server("nowhere");
  s = stub_->Migrate(As(alice).get(), mig, &empty);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("(rule: admin)"), std::string::npos);
  rpc::DrainRequest drain;
  drain.set_server("nowhere");
  rpc::DrainReply drained;
  EXPECT_EQ(stub_->Drain(As(alice).get(), drain, &drained).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Get(alice, a).state(), rpc::QUEUED);

  // Alice can; the history says who.
  EXPECT_TRUE(stub_->SetPriority(As(alice).get(), prio, &was).ok());
  EXPECT_TRUE(stub_->Suspend(As(alice).get(), one, &empty).ok());
  bool said = false;
  const rpc::JobInfo after = Get(alice, a);
  for (const rpc::HistoryEntry& h : after.history()) {
    said |= h.detail() == "suspended by alice";
  }
  EXPECT_TRUE(said) << after.DebugString();

  // An admin acts on anyone's job.
  const int64_t b = Submit(bob, "");
  EXPECT_TRUE(Kill(root, b).ok());
  EXPECT_EQ(Get(bob, b).state(), rpc::KILLED);
}

TEST_F(AccessTest, AgentsAndUsersKeepToTheirOwnCalls) {
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  const std::string root = Token("admin.cred");
  const std::string alice = AddUser(root, "alice");
  rpc::RegisterAgentRequest reg;
  reg.set_name("node-1");
  reg.set_address("127.0.0.1:1");
  rpc::Gpu* g = reg.add_gpus();
  g->set_uuid("virtual-0");
  g->set_name("virtual");
  rpc::RegisterAgentReply registered;
  for (const std::string& who : {alice, root}) {
    const grpc::Status s =
        stub_->RegisterAgent(As(who).get(), reg, &registered);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_NE(s.error_message().find("(rule: agent)"), std::string::npos)
        << s.error_message();
  }
  rpc::ListServersReply servers;
  ASSERT_TRUE(stub_->ListServers(As(root).get(), {}, &servers).ok());
  EXPECT_EQ(servers.servers_size(), 0);
  const grpc::Status ok =
      stub_->RegisterAgent(As(Token("agent.cred")).get(), reg, &registered);
  EXPECT_TRUE(ok.ok()) << ok.error_message();

  // An agent's credential submits nothing.
  rpc::SubmitRequest sub;
  sub.mutable_spec()->set_name("x");
  sub.mutable_spec()->set_command("true");
  sub.mutable_spec()->set_gpus(1);
  rpc::SubmitReply id;
  const grpc::Status s = stub_->Submit(As(Token("agent.cred")).get(), sub, &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(),
            "agent agents may not submit: an agent's credential makes no "
            "user request (rule: agent)");
}

// An agent's registration brings it its own control token (derived from
// the cluster's secret, kept with the store across a restart, and the
// agent's name); a log ticket is for the job's owner or an admin, signed
// with the token of the agent it is read from, for that job and a few
// minutes.
TEST_F(AccessTest, ALogTicketIsForTheJobsOwnerOrAnAdmin) {
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  const std::string root = Token("admin.cred");
  const std::string alice = AddUser(root, "alice");
  const std::string bob = AddUser(root, "bob");
  rpc::RegisterAgentRequest reg;
  reg.set_name("node-1");
  reg.set_address("127.0.0.1:1");
  reg.add_gpus()->set_uuid("virtual-0");
  auto control_token = [&] {
    reg.set_name("node-1");
    rpc::RegisterAgentReply registered;
    const grpc::Status s =
        stub_->RegisterAgent(As(Token("agent.cred")).get(), reg, &registered);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return registered.control_token();
  };
  const std::string token = control_token();
  EXPECT_EQ(token.size(), 74u) << token;  // gdv_agent_ and 64 hex digits
  std::string token2;
  {
    reg.set_name("node-2");
    reg.set_address("127.0.0.1:2");
    rpc::RegisterAgentReply registered;
    ASSERT_TRUE(
        stub_->RegisterAgent(As(Token("agent.cred")).get(), reg, &registered)
            .ok());
    token2 = registered.control_token();
    reg.set_address("127.0.0.1:1");
  }
  EXPECT_NE(token2, token);

  const int64_t a = Submit(alice, "");
  rpc::LogTicketRequest req;
  req.set_job_id(a);
  req.set_server("node-1");
  rpc::LogTicketReply ticket;
  grpc::Status s = stub_->LogTicket(As(bob).get(), req, &ticket);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(),
            "bob may not read the log of job " + std::to_string(a) +
                ": it is alice's, and only its owner or an admin acts on it "
                "(rule: owner)");
  EXPECT_TRUE(ticket.ticket().empty());
  const int64_t now_us =
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
  for (const std::string& who : {alice, root}) {
    s = stub_->LogTicket(As(who).get(), req, &ticket);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_GT(ticket.expires_us(), now_us);
    EXPECT_LE(ticket.expires_us(), now_us + 301'000'000);
    EXPECT_EQ(ticket.ticket(), MakeLogTicket(token, a, ticket.expires_us()));
  }
  req.set_server("node-2");
  ASSERT_TRUE(stub_->LogTicket(As(alice).get(), req, &ticket).ok());
  EXPECT_EQ(ticket.ticket(), MakeLogTicket(token2, a, ticket.expires_us()));
  req.set_server("node 2");
  s = stub_->LogTicket(As(alice).get(), req, &ticket);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().find("field 'server': "), 0u)
      << s.error_message();
  req.set_server("node-1");
  req.set_job_id(a + 1000);
  EXPECT_EQ(stub_->LogTicket(As(root).get(), req, &ticket).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // The same token after a restart on the same store.
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  EXPECT_EQ(control_token(), token);
}

TEST_F(AccessTest, AdminsManageUsersWhoAreKeptInTheStore) {
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  const std::string root = Token("admin.cred");
  const std::string bob = AddUser(root, "bob");
  rpc::AddUserRequest add;
  add.set_name("carol");
  rpc::AddUserReply added;
  grpc::Status s = stub_->AddUser(As(bob).get(), add, &added);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(),
            "bob may not add user carol: only an admin does (rule: admin)");
  add.set_role("boss");
  s = stub_->AddUser(As(root).get(), add, &added);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("field 'role'"), std::string::npos);
  add.set_name("bob");
  add.set_role("");
  EXPECT_EQ(stub_->AddUser(As(root).get(), add, &added).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  const std::string carol = AddUser(root, "carol", "admin");

  rpc::ListUsersReply users;
  ASSERT_TRUE(stub_->ListUsers(As(carol).get(), {}, &users).ok());
  std::vector<std::string> names;
  for (const auto& u : users.users())
    names.push_back(u.name() + ":" + u.role());
  EXPECT_EQ(names, (std::vector<std::string>{"agents:agent", "bob:user",
                                             "carol:admin", "root:admin"}));

  // A restart without the directory keeps the users, and so needs tokens.
  ASSERT_NO_FATAL_FAILURE(Start(Options(/*with_dir=*/false)));
  rpc::UserInfo me;
  ASSERT_TRUE(stub_->WhoAmI(As(bob).get(), {}, &me).ok());
  EXPECT_EQ(me.name(), "bob");
  rpc::ListJobsReply jobs;
  EXPECT_EQ(stub_->ListJobs(As("").get(), {}, &jobs).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  rpc::UserRequest rm;
  rm.set_name("bob");
  rpc::Empty empty;
  ASSERT_TRUE(stub_->RemoveUser(As(carol).get(), rm, &empty).ok());
  EXPECT_EQ(stub_->WhoAmI(As(bob).get(), {}, &me).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stub_->RemoveUser(As(carol).get(), rm, &empty).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(AccessTest, AnOpenDaemonLetsEveryoneDoEverythingAndHasNoUsers) {
  ASSERT_NO_FATAL_FAILURE(Start(Options(/*with_dir=*/false)));
  rpc::UserInfo me;
  ASSERT_TRUE(stub_->WhoAmI(As("").get(), {}, &me).ok());
  EXPECT_EQ(me.name(), "");
  EXPECT_EQ(me.role(), "admin");
  const int64_t id = Submit("", "mallory");
  EXPECT_EQ(Get("", id).spec().owner(), "mallory");
  EXPECT_FALSE(Get("", id).withheld());
  rpc::AddUserRequest add;
  add.set_name("alice");
  rpc::AddUserReply added;
  const grpc::Status s = stub_->AddUser(As("").get(), add, &added);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("--credentials-dir"), std::string::npos);
  EXPECT_TRUE(Kill("", id).ok());
}

TEST_F(AccessTest, ASecondAgentWithALiveAgentsNameIsRefusedAndWedgesNothing) {
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  const std::string agent = Token("agent.cred");
  const std::string root = Token("admin.cred");
  rpc::RegisterAgentRequest first;
  first.set_name("node-1");
  first.set_address("127.0.0.1:1");
  first.set_incarnation("first");
  rpc::Gpu* g = first.add_gpus();
  g->set_uuid("virtual-0");
  g->set_name("virtual");
  rpc::RegisterAgentReply reply;
  ASSERT_TRUE(stub_->RegisterAgent(As(agent).get(), first, &reply).ok());
  rpc::RegisterAgentRequest second = first;
  second.set_address("127.0.0.1:2");
  second.set_incarnation("second");
  const grpc::Status s = stub_->RegisterAgent(As(agent).get(), second, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("the agent named 'node-1' is live at "
                                   "127.0.0.1:1"),
            std::string::npos)
      << s.error_message();
  // The first goes on: it reports and registers again, its server up at
  // its own address.
  rpc::AgentReport report;
  report.set_name("node-1");
  rpc::AgentReportReply ack;
  EXPECT_TRUE(stub_->Report(As(agent).get(), report, &ack).ok());
  EXPECT_TRUE(stub_->RegisterAgent(As(agent).get(), first, &reply).ok());
  rpc::ListServersReply servers;
  ASSERT_TRUE(stub_->ListServers(As(root).get(), {}, &servers).ok());
  ASSERT_EQ(servers.servers_size(), 1);
  EXPECT_TRUE(servers.servers(0).up());
  EXPECT_EQ(servers.servers(0).address(), "127.0.0.1:1");
}

// Queues with members and priority bounds: a job without a queue goes to
// its owner's own; a user submits only where they are a member (of the
// queue or one above it), at no priority over the queue's bound; an admin
// is bound by neither. The tree shows in ListQueues, parents first.
TEST_F(AccessTest, UsersSubmitToTheirOwnQueuesWithinTheirPriorityBounds) {
  SchedulerOptions o = Options();
  o.policy = "gandiva-fair";
  o.queues = std::vector<core::QueueConfig>{
      {.name = "research", .quota = 4, .members = {"carol"}},
      {.name = "vision",
       .parent = "research",
       .quota = 2,
       .members = {"alice"},
       .max_priority = 5},
      {.name = "speech", .parent = "research", .quota = 2, .limit = 3},
      {.name = "ops", .quota = 0, .weight = 1, .members = {"bob"}},
  };
  ASSERT_NO_FATAL_FAILURE(Start(o));
  const std::string root = Token("admin.cred");
  const std::string alice = AddUser(root, "alice");
  const std::string bob = AddUser(root, "bob");
  const std::string carol = AddUser(root, "carol");
  const std::string dave = AddUser(root, "dave");
  auto submit = [&](const std::string& as, const std::string& queue,
                    int priority, int64_t* id) {
    rpc::SubmitRequest req;
    req.mutable_spec()->set_name("train");
    req.mutable_spec()->set_command("python3 train.py");
    req.mutable_spec()->set_gpus(1);
    req.mutable_spec()->set_queue(queue);
    req.mutable_spec()->set_priority(priority);
    rpc::SubmitReply rep;
    const grpc::Status s = stub_->Submit(As(as).get(), req, &rep);
    if (id != nullptr) *id = rep.job_id();
    return s;
  };
  auto queue_of = [&](int64_t id) { return Get(root, id).spec().queue(); };
  int64_t id = 0;
  // Each user's own queue: alice's is vision, bob's ops; carol is listed
  // on research, so hers is its first team by name (speech); dave is on
  // none, so his is the shared queue.
  ASSERT_TRUE(submit(alice, "", 0, &id).ok());
  EXPECT_EQ(queue_of(id), "vision");
  ASSERT_TRUE(submit(bob, "", 0, &id).ok());
  EXPECT_EQ(queue_of(id), "ops");
  ASSERT_TRUE(submit(carol, "", 0, &id).ok());
  EXPECT_EQ(queue_of(id), "speech");
  ASSERT_TRUE(submit(dave, "", 0, &id).ok());
  EXPECT_EQ(queue_of(id), "");
  // carol may use vision through research; bob may not.
  EXPECT_TRUE(submit(carol, "vision", 0, nullptr).ok());
  grpc::Status s = submit(bob, "vision", 0, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find(
                "bob may not submit to queue 'vision': its members are "
                "alice, carol (with those of the queues above it) (rule: "
                "queue)"),
            std::string::npos)
      << s.error_message();
  EXPECT_TRUE(submit(root, "vision", 9, nullptr).ok()) << "an admin";
  // A queue with queues under it is no job's queue.
  s = submit(carol, "research", 0, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("field 'queue': 'research' has queues "
                                   "under it; name one of them (speech, "
                                   "vision)"),
            std::string::npos)
      << s.error_message();
  // Priority bounds, at submission and after.
  s = submit(alice, "vision", 6, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("alice may not submit at priority 6: "
                                   "queue 'vision' allows priorities up to "
                                   "5 (rule: queue)"),
            std::string::npos)
      << s.error_message();
  ASSERT_TRUE(submit(alice, "vision", 5, &id).ok());
  rpc::SetPriorityRequest pr;
  pr.set_job_id(id);
  pr.set_priority(7);
  rpc::SetPriorityReply prep;
  s = stub_->SetPriority(As(alice).get(), pr, &prep);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("queue 'vision' allows priorities up to 5"),
            std::string::npos)
      << s.error_message();
  EXPECT_TRUE(stub_->SetPriority(As(root).get(), pr, &prep).ok());
  EXPECT_EQ(Get(root, id).priority(), 7);
  // The tree, parents first, siblings by name, the shared queue last.
  rpc::ListQueuesReply queues;
  ASSERT_TRUE(stub_->ListQueues(As(dave).get(), {}, &queues).ok());
  std::vector<std::string> order;
  for (const rpc::QueueInfo& q : queues.queues()) order.push_back(q.name());
  EXPECT_EQ(order, (std::vector<std::string>{"ops", "research", "speech",
                                             "vision", ""}));
  const rpc::QueueInfo& research = queues.queues(1);
  EXPECT_EQ(research.jobs_waiting(), 5) << "its teams' jobs, summed";
  EXPECT_EQ(queues.queues(2).parent(), "research");
  EXPECT_EQ(queues.queues(2).limit(), 3);
  EXPECT_FALSE(queues.queues(3).has_limit());
  EXPECT_EQ(queues.queues(3).max_priority(), 5);
  EXPECT_EQ(queues.queues(0).weight(), 1);
  EXPECT_EQ(queues.queues(3).weight(), 2) << "its quota by default";
  // Only an admin changes the queues.
  rpc::ApplyQueuesRequest apply;
  apply.set_yaml("queues:\n  - name: ops\n    quota: 1\n");
  apply.set_dry_run(true);
  rpc::ApplyQueuesReply applied;
  s = stub_->ApplyQueues(As(alice).get(), apply, &applied);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(),
            "alice may not change the queues: only an admin does (rule: "
            "admin)");
  s = stub_->ApplyQueues(As(root).get(), apply, &applied);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << "research's teams hold live jobs: " << s.error_message();
  apply.set_source(std::string(5000, 'x'));
  s = stub_->ApplyQueues(As(root).get(), apply, &applied);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("field 'source'"), std::string::npos)
      << s.error_message();
}

}  // namespace
}  // namespace gandiva::runtime
