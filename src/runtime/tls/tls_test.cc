// LoadTls: which files make a configuration, and errors that name the
// option; credentials that connect a client and a server of one CA only.
#include "runtime/tls/tls.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/tls/test_certs.h"

namespace gandiva::runtime {
namespace {

namespace fs = std::filesystem;

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gandiva-tls-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    good_ = testing::MakeTestCertificates(dir_, "node");
    ASSERT_FALSE(good_.ca.empty()) << "openssl could not make certificates";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  TlsFiles good_;
};

TEST_F(TlsTest, NoFilesMeansPlainConnections) {
  auto t = LoadTls({}, "--tls-");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->has_value());
}

TEST_F(TlsTest, ErrorsNameTheOption) {
  TlsFiles f = good_;
  f.key.clear();
  auto t = LoadTls(f, "--tls-");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("--tls-key: missing"), std::string::npos)
      << t.status().message();

  f = good_;
  f.cert = (dir_ / "nonexistent.pem").string();
  t = LoadTls(f, "$GANDIVA_TLS_");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("$GANDIVA_TLS_CERT: cannot read"),
            std::string::npos)
      << t.status().message();

  f = good_;
  f.key = good_.cert;  // a certificate where the key should be
  t = LoadTls(f, "--tls-");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--tls-key: '" + good_.cert +
                                      "' is not a PEM private key"),
            std::string::npos)
      << t.status().message();

  auto ok = LoadTls(good_, "--tls-");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_TRUE(ok->has_value());
}

// A tiny service over real credentials: a client of the same CA gets
// through; a plain client and one of another CA do not.
class Pong final : public rpc::Scheduler::Service {
  grpc::Status Ping(grpc::ServerContext*, const rpc::Empty*,
                    rpc::Empty*) override {
    return grpc::Status::OK;
  }
};

TEST_F(TlsTest, OnlyClientsOfTheSameCaConnect) {
  auto server_tls = LoadTls(good_, "--tls-");
  ASSERT_TRUE(server_tls.ok());
  Pong service;
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", ServerCredentials(*server_tls), &port);
  b.RegisterService(&service);
  auto server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto ping = [&](const std::optional<TlsConfig>& tls) {
    auto stub = rpc::Scheduler::NewStub(MakeChannel(address, tls));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    rpc::Empty out;
    return stub->Ping(&ctx, rpc::Empty(), &out);
  };
  EXPECT_TRUE(ping(*server_tls).ok());
  EXPECT_FALSE(ping(std::nullopt).ok());
  const TlsFiles rogue = testing::MakeTestCertificates(dir_, "rogue");
  ASSERT_FALSE(rogue.ca.empty());
  auto rogue_tls = LoadTls(rogue, "--tls-");
  ASSERT_TRUE(rogue_tls.ok());
  EXPECT_FALSE(ping(*rogue_tls).ok());
  // The right CA but a name the certificate does not carry.
  TlsFiles renamed = good_;
  renamed.name = "elsewhere.example";
  auto renamed_tls = LoadTls(renamed, "--tls-");
  ASSERT_TRUE(renamed_tls.ok());
  EXPECT_FALSE(ping(*renamed_tls).ok());
  renamed.name = "localhost";  // one it carries
  renamed_tls = LoadTls(renamed, "--tls-");
  ASSERT_TRUE(renamed_tls.ok());
  EXPECT_TRUE(ping(*renamed_tls).ok());
  server->Shutdown();
}

}  // namespace
}  // namespace gandiva::runtime
