#include "runtime/scheduler/users.h"

#include <gtest/gtest.h>

#include <vector>

#include "runtime/scheduler/access.h"
#include "runtime/scheduler/identify.h"

namespace gandiva::runtime {
namespace {

TEST(UsersTest, ATokenNamesItsUserAndOnlyItsHashIsKept) {
  Users users;
  EXPECT_TRUE(users.empty());
  auto alice = users.Add("alice", Role::kUser, 5);
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  auto root = users.Add("root", Role::kAdmin, 6);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(users.ByToken(*alice)->user, "alice");
  EXPECT_EQ(users.ByToken(*alice)->role, Role::kUser);
  EXPECT_EQ(users.ByToken(*root)->role, Role::kAdmin);
  EXPECT_FALSE(users.ByToken("gdv_guess").has_value());
  EXPECT_FALSE(users.ByToken("").has_value());
  const std::string json = users.ToJson();
  EXPECT_EQ(json.find(*alice), std::string::npos) << "the token is stored";
  Users again;
  ASSERT_TRUE(again.Load(json).ok());
  EXPECT_EQ(again.ByToken(*alice)->user, "alice");
  ASSERT_EQ(again.List().size(), 2u);
  EXPECT_EQ(again.List()[0].created_us, 5);
}

TEST(UsersTest, NamesAreCheckedAndTakenOnce) {
  Users users;
  ASSERT_TRUE(users.Add("bob", Role::kUser, 0).ok());
  EXPECT_EQ(users.Add("bob", Role::kAdmin, 0).status().code(),
            core::StatusCode::kAlreadyExists);
  for (const std::string& bad : std::vector<std::string>{
           "", "-x", "a b", "a\nb", std::string(65, 'a')}) {
    auto r = users.Add(bad, Role::kUser, 0);
    EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("field 'name'"), std::string::npos);
  }
  EXPECT_TRUE(users.Add("carol.smith@lab-1", Role::kUser, 0).ok());
}

TEST(UsersTest, RemovingRefusesTheLastAdminAndForgetsTheToken) {
  Users users;
  auto admin = users.Add("root", Role::kAdmin, 0);
  auto bob = users.Add("bob", Role::kUser, 0);
  ASSERT_TRUE(admin.ok() && bob.ok());
  EXPECT_EQ(users.Remove("root").code(), core::StatusCode::kFailedPrecondition);
  EXPECT_EQ(users.Remove("nobody").code(), core::StatusCode::kNotFound);
  ASSERT_TRUE(users.Remove("bob").ok());
  EXPECT_FALSE(users.ByToken(*bob).has_value());
  ASSERT_TRUE(users.Add("ops", Role::kAdmin, 0).ok());
  EXPECT_TRUE(users.Remove("root").ok());
}

TEST(UsersTest, PutSetsAKnownTokenOnce) {
  Users users;
  ASSERT_TRUE(users.Put("root", Role::kAdmin, "gdv_a", 1).ok());
  ASSERT_TRUE(users.Put("root", Role::kAdmin, "gdv_b", 2).ok());
  EXPECT_FALSE(users.ByToken("gdv_a").has_value());
  EXPECT_EQ(users.ByToken("gdv_b")->user, "root");
  EXPECT_EQ(users.List()[0].created_us, 1);
  EXPECT_EQ(users.Put("agents", Role::kAgent, "gdv_b", 3).code(),
            core::StatusCode::kAlreadyExists);
}

TEST(UsersTest, ABadStoredRecordIsNamed) {
  Users users;
  auto s = users.Load(R"({"bob": {"role": "boss", "token_sha256": "x"}})");
  EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'bob': field 'role': no role 'boss'"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(users.Load(R"({"bob": {"role": "user"}})").ok());
}

TEST(AccessTest, AUserActsOnTheirOwnJobsAndAnAdminOnAny) {
  const Caller alice{"alice", Role::kUser}, bob{"bob", Role::kUser};
  const Caller admin{"root", Role::kAdmin}, agent{"agents", Role::kAgent};
  const Caller open{};
  EXPECT_TRUE(MayActOnJob(alice, "kill", 7, "alice").ok());
  EXPECT_TRUE(MayActOnJob(admin, "kill", 7, "alice").ok());
  EXPECT_TRUE(MayActOnJob(open, "kill", 7, "alice").ok());
  const core::Status s = MayActOnJob(bob, "kill", 7, "alice");
  EXPECT_EQ(s.code(), core::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "bob may not kill job 7: it is alice's, and only its owner or an "
            "admin acts on it (rule: owner)");
  EXPECT_EQ(MayActOnJob(agent, "kill", 7, "agents").code(),
            core::StatusCode::kPermissionDenied);

  EXPECT_TRUE(MayReadSpec(alice, "alice"));
  EXPECT_FALSE(MayReadSpec(bob, "alice"));
  EXPECT_TRUE(MayReadSpec(admin, "alice"));
  EXPECT_TRUE(MayReadSpec(open, "alice"));
}

TEST(AccessTest, OperatorsAreAdminsAndAgentsOnlyAgents) {
  const Caller bob{"bob", Role::kUser}, admin{"root", Role::kAdmin};
  const Caller agent{"agents", Role::kAgent};
  const core::Status s = MayOperate(bob, "migrate job 3");
  EXPECT_EQ(s.message(),
            "bob may not migrate job 3: only an admin does (rule: admin)");
  EXPECT_TRUE(MayOperate(admin, "migrate job 3").ok());
  EXPECT_EQ(MayOperate(agent, "drain").code(),
            core::StatusCode::kPermissionDenied);

  EXPECT_TRUE(MayActAsAgent(agent, "register an agent").ok());
  const core::Status reg = MayActAsAgent(admin, "register an agent");
  EXPECT_EQ(reg.message(),
            "root (admin) may not register an agent: only a node agent's "
            "credential does (rule: agent)");
  EXPECT_FALSE(MayActAsAgent(bob, "report as an agent").ok());
  EXPECT_TRUE(MayActAsAgent(Caller{}, "register an agent").ok());

  // An agent's certificate names the agent it is: it registers, reports
  // and leaves as that agent alone; the agents' shared token as any.
  const Caller node1{"node-1", Role::kAgent, /*certified=*/true};
  EXPECT_TRUE(
      MayActAsAgentNamed(node1, "register as agent 'node-1'", "node-1").ok());
  const core::Status other =
      MayActAsAgentNamed(node1, "register as agent 'node-2'", "node-2");
  EXPECT_EQ(other.code(), core::StatusCode::kPermissionDenied);
  EXPECT_EQ(other.message(),
            "agent node-1 may not register as agent 'node-2': its certificate "
            "names agent 'node-1', which acts as that agent only (its --name) "
            "(rule: agent name)");
  EXPECT_TRUE(
      MayActAsAgentNamed(agent, "report as agent 'node-2'", "node-2").ok());
  EXPECT_TRUE(MayActAsAgentNamed(Caller{}, "leave as agent 'x'", "x").ok());
  EXPECT_FALSE(MayActAsAgentNamed(bob, "leave as agent 'bob'", "bob").ok());
  // The name part alone, for a caller already admitted as an agent.
  EXPECT_EQ(MayUseAgentName(node1, "report as agent 'node-2'", "node-2").code(),
            core::StatusCode::kPermissionDenied);
  EXPECT_TRUE(
      MayUseAgentName(node1, "report as agent 'node-1'", "node-1").ok());
  EXPECT_TRUE(MayUseAgentName(agent, "leave as agent 'node-2'", "node-2").ok());

  EXPECT_TRUE(MayActAsUser(bob, "submit").ok());
  EXPECT_EQ(MayActAsUser(agent, "submit").message(),
            "agent agents may not submit: an agent's credential makes no "
            "user request (rule: agent)");
}

TEST(IdentifyTest, TokensInTheClearComeOnlyFromThisMachine) {
  EXPECT_TRUE(IsLoopbackPeer("ipv4:127.0.0.1:40000"));
  EXPECT_TRUE(IsLoopbackPeer("ipv6:[::1]:40000"));
  EXPECT_TRUE(IsLoopbackPeer("unix:/tmp/s"));
  EXPECT_FALSE(IsLoopbackPeer("ipv4:10.0.0.5:40000"));
  EXPECT_FALSE(IsLoopbackPeer("ipv6:[fe80::1]:40000"));
  EXPECT_FALSE(IsLoopbackPeer("ipv4:128.0.0.1:1"));
}

TEST(IdentifyTest, ACertificateNamesItsUserAndRole) {
  auto c = CallerFromSubject("CN=alice,OU=admin,O=lab");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->user, "alice");
  EXPECT_EQ(c->role, Role::kAdmin);
  EXPECT_TRUE(c->certified);
  EXPECT_EQ(CallerFromSubject("O=lab,OU=agent,CN=node-1")->role, Role::kAgent);
  EXPECT_EQ(CallerFromSubject("CN=bob,OU=user")->role, Role::kUser);
  EXPECT_FALSE(CallerFromSubject("CN=bob").has_value());
  EXPECT_FALSE(CallerFromSubject("CN=bob,OU=boss").has_value());
  EXPECT_FALSE(CallerFromSubject("OU=admin").has_value());
  // An escaped comma does not start a new attribute.
  EXPECT_FALSE(CallerFromSubject("CN=x\\,OU=admin").has_value());
}

}  // namespace
}  // namespace gandiva::runtime
