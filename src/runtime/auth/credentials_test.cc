#include "runtime/auth/credentials.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "runtime/auth/subject.h"

namespace gandiva::runtime {
namespace {

std::string TempDir() {
  std::string dir = std::filesystem::temp_directory_path() /
                    ("credentials_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(CredentialsTest, AFileRoundTripsAndOnlyItsOwnerMayReadIt) {
  const std::string path = TempDir() + "/alice.cred";
  ASSERT_TRUE(WriteCredential(path, {"alice", "gdv_secret"}).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto c = ReadCredential(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->user, "alice");
  EXPECT_EQ(c->token, "gdv_secret");
  // Written again: replaced, still 0600.
  ASSERT_TRUE(WriteCredential(path, {"alice", "gdv_other"}).ok());
  EXPECT_EQ(ReadCredential(path)->token, "gdv_other");
}

TEST(CredentialsTest, ABadFileIsRefusedNamingItAndTheField) {
  const std::string dir = TempDir();
  auto missing = ReadCredential(dir + "/none.cred");
  EXPECT_EQ(missing.status().code(), core::StatusCode::kIo);
  EXPECT_NE(missing.status().message().find(dir + "/none.cred"),
            std::string::npos);
  const std::string path = dir + "/bad.cred";
  std::ofstream(path) << R"({"user": "bob"})";
  auto no_token = ReadCredential(path);
  EXPECT_EQ(no_token.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(no_token.status().message().find("field 'token': is missing"),
            std::string::npos)
      << no_token.status().message();
  std::ofstream(path) << R"({"user": 3, "token": "t"})";
  EXPECT_NE(ReadCredential(path).status().message().find(
                "field 'user': is not a non-empty string"),
            std::string::npos);
  std::ofstream(path) << "user: bob";
  EXPECT_NE(
      ReadCredential(path).status().message().find("is not a JSON object"),
      std::string::npos);
}

TEST(CredentialsTest, TokensAreRandomAndHashedWithSha256) {
  const std::string a = NewToken(), b = NewToken();
  EXPECT_EQ(a.size(), 4u + 64u);
  EXPECT_EQ(a.substr(0, 4), "gdv_");
  EXPECT_NE(a, b);
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

// RFC 4231, test case 2.
TEST(CredentialsTest, HmacSha256IsTheStandardOne) {
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

// A certificate's subject: its attributes, the agent it names, and whether
// its holder may use a fetch ticket made for another agent.
TEST(SubjectTest, AnAgentsCertificateIsHeldToTheTicketsDestination) {
  EXPECT_EQ(SubjectAttributes("CN=node-1,OU=agent,O=lab"),
            (std::vector<std::pair<std::string, std::string>>{
                {"CN", "node-1"}, {"OU", "agent"}, {"O", "lab"}}));
  EXPECT_EQ(SubjectAttributes("CN=a\\,b+OU=x").size(), 2u);
  EXPECT_EQ(AgentOfSubject("O=lab,OU=agent,CN=node-1"), "node-1");
  EXPECT_EQ(AgentOfSubject("CN=alice,OU=user"), "");
  EXPECT_EQ(AgentOfSubject("CN=cluster"), "") << "no role: no agent";
  EXPECT_EQ(AgentOfSubject("CN=x\\,OU=agent"), "") << "an escaped comma";
  EXPECT_EQ(CheckFetchCaller({"CN=node-2,OU=agent"}, "node-2"), "");
  EXPECT_EQ(CheckFetchCaller({}, "node-2"), "") << "no certificate";
  EXPECT_EQ(CheckFetchCaller({"CN=cluster"}, "node-2"), "")
      << "a certificate of no agent: nothing to hold it to";
  EXPECT_EQ(CheckFetchCaller({"CN=node-3,OU=agent"}, "node-2"),
            "the fetch ticket is for agent 'node-2', and the caller's "
            "certificate names agent 'node-3'");
}

}  // namespace
}  // namespace gandiva::runtime
