#include "config/job_spec_check.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace gandiva::config {
namespace {

rpc::JobSpec Good() {
  rpc::JobSpec s;
  s.set_name("train-1.a_b");
  s.set_command("python3 train.py --lr 0.1");
  s.set_gpus(2);
  s.set_owner("alice@example.org");
  s.set_queue("vision");
  s.set_workdir("/home/alice/run");
  (*s.mutable_env())["DATA_DIR"] = "/data/é";
  return s;
}

TEST(JobSpecCheckTest, AGoodSpecPasses) {
  EXPECT_EQ(CheckJobSpec(Good()), "");
  rpc::JobSpec unnamed = Good();
  unnamed.clear_name();
  EXPECT_EQ(CheckJobSpec(unnamed), "") << "the daemon names it";
  rpc::JobSpec big = Good();
  big.set_command(std::string(kMaxArgBytes - 1, 'x'));
  EXPECT_EQ(CheckJobSpec(big), "");
}

TEST(JobSpecCheckTest, EachBadFieldIsNamed) {
  const std::vector<std::pair<void (*)(rpc::JobSpec&), std::string>> cases = {
      {[](rpc::JobSpec& s) { s.set_name("a b"); },
       "field 'name': may hold only letters"},
      {[](rpc::JobSpec& s) { s.set_name(std::string(65, 'a')); },
       "field 'name': must be at most 64 characters"},
      {[](rpc::JobSpec& s) { s.set_command("  \n"); },
       "field 'command': must not be empty"},
      {[](rpc::JobSpec& s) { s.set_command(std::string("a\0b", 3)); },
       "field 'command': holds a NUL byte"},
      {[](rpc::JobSpec& s) { s.set_command(std::string(kMaxArgBytes, 'x')); },
       "field 'command': 131072 bytes, more than one argument to execve"},
      {[](rpc::JobSpec& s) { s.set_gpus(3); },
       "field 'gpus': must be a power of two"},
      {[](rpc::JobSpec& s) { s.set_total_minibatches(-1); },
       "field 'total_minibatches': must not be negative"},
      {[](rpc::JobSpec& s) { s.set_retries(101); },
       "field 'retries': must be 0 to 100, got 101"},
      {[](rpc::JobSpec& s) {
         s.set_checkpoint_every_minibatches(10);
         s.set_checkpoint_every_us(1'000'000);
       },
       "field 'checkpoint_every': gives both mini-batches (10) and a time "
       "(1000000 us); give one"},
      {[](rpc::JobSpec& s) { s.set_checkpoint_every_minibatches(-1); },
       "field 'checkpoint_every': must be 1 to 1000000000000 mini-batches "
       "(0: none), got -1"},
      {[](rpc::JobSpec& s) { s.set_checkpoint_every_us(999'999); },
       "field 'checkpoint_every': must be a time from 1 s to 30 days (0: "
       "none), got 999999 us"},
      {[](rpc::JobSpec& s) { s.set_owner(std::string(257, 'o')); },
       "field 'owner': must be at most 256 bytes, got 257"},
      {[](rpc::JobSpec& s) { s.set_group("ops\n"); },
       "field 'group': holds a control character: 'ops?'"},
      {[](rpc::JobSpec& s) { s.set_queue(std::string("q\x7f")); },
       "field 'queue': holds a control character"},
      {[](rpc::JobSpec& s) { s.set_queue("\xc3\x28"); },
       "field 'queue': is not valid UTF-8"},
      {[](rpc::JobSpec& s) { s.set_workdir("run"); },
       "field 'workdir': must be an absolute path, got 'run'"},
      {[](rpc::JobSpec& s) { s.set_workdir("/" + std::string(4095, 'd')); },
       "field 'workdir': must be at most 4095 bytes"},
      {[](rpc::JobSpec& s) { (*s.mutable_env())["1X"] = "v"; },
       "field 'env': '1X' is not a variable name"},
      {[](rpc::JobSpec& s) { (*s.mutable_env())["A-B"] = "v"; },
       "field 'env': 'A-B' is not a variable name"},
      {[](rpc::JobSpec& s) {
         (*s.mutable_env())["K"] = std::string("a\0b", 3);
       },
       "field 'env': the value of K holds a NUL byte"},
      {[](rpc::JobSpec& s) {
         (*s.mutable_env())["K"] = std::string(kMaxArgBytes, 'v');
       },
       "field 'env': K=... is 131075 bytes"},
      {[](rpc::JobSpec& s) {
         for (int i = 0; i < 10; ++i) {
           (*s.mutable_env())["K" + std::to_string(i)] =
               std::string(120 * 1024, 'v');
         }
       },
       "bytes together, more than 1048576"},
      {[](rpc::JobSpec& s) {
         for (int i = 0; i <= 4096; ++i) {
           (*s.mutable_env())["K" + std::to_string(i)] = "";
         }
       },
       "field 'env': 4098 variables, more than 4096"},
  };
  for (const auto& [bad, want] : cases) {
    rpc::JobSpec s = Good();
    bad(s);
    const std::string got = CheckJobSpec(s);
    EXPECT_NE(got.find(want), std::string::npos)
        << "want: " << want << "\ngot:  " << got;
  }
}

TEST(JobSpecCheckTest, Utf8) {
  EXPECT_TRUE(ValidUtf8("plain"));
  EXPECT_TRUE(ValidUtf8("h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  for (const char* bad :
       {"\x80", "\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
        "\xf4\x90\x80\x80", "\xff", "\xe2\x82"}) {
    EXPECT_FALSE(ValidUtf8(bad)) << bad;
  }
}

}  // namespace
}  // namespace gandiva::config
