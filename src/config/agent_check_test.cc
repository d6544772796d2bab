#include "config/agent_check.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace gandiva::config {
namespace {

// What a real agent sends: two GPUs, one job running on GPU 1, one held
// checkpoint.
rpc::RegisterAgentRequest Registration() {
  rpc::RegisterAgentRequest r;
  r.set_name("gpu-node-7.example.org");
  r.set_address("10.0.0.7:7071");
  for (int i = 0; i < 2; ++i) {
    rpc::Gpu* g = r.add_gpus();
    g->set_local(i);
    g->set_uuid("virtual-" + std::to_string(i));
    g->set_name("virtual");
  }
  r.set_sockets(1);
  r.set_incarnation("7f3a9c");
  r.mutable_capabilities()->set_criu_detail("criu not found on PATH");
  rpc::AgentJob* j = r.add_jobs();
  j->set_job_id(4);
  j->set_pid(1234);
  j->set_state(rpc::SUSPENDED);
  j->add_gpus(1);
  j->mutable_progress()->set_sharing("exclusive");
  r.add_checkpoints(9);
  r.add_checkpoint_clusters("c-1");
  r.add_checkpoint_submitted_us(1'700'000'000'000'000);
  return r;
}

TEST(AgentCheckTest, WhatAnAgentSendsPasses) {
  EXPECT_EQ(CheckAgentRegistration(Registration()), "");
  rpc::AgentReport rep;
  rep.set_name("agent-0");
  rep.add_exits()->set_job_id(2147483647);
  rpc::JobProfile* p = rep.add_profiles();
  p->set_job_id(4);
  // Numbers a job's own process writes are not refused: taken as unknown.
  p->mutable_progress()->set_minibatches(-5);
  p->mutable_progress()->set_minibatch_rate(-1.0 / 0.0);
  EXPECT_EQ(CheckAgentReport(rep), "");
  rpc::LeaveRequest leave;
  leave.set_name("agent-0");
  EXPECT_EQ(CheckAgentLeave(leave), "");
  EXPECT_EQ(CheckServerName(std::string(253, 'a')), "");
}

TEST(AgentCheckTest, EachBadRegistrationFieldIsNamed) {
  using R = rpc::RegisterAgentRequest;
  const std::vector<std::pair<void (*)(R&), std::string>> cases = {
      {[](R& r) { r.set_name(""); }, "field 'name': must be 1 to 253"},
      {[](R& r) { r.set_name("a\nb"); },
       "field 'name': may hold only letters, digits, '.', '_' and '-' (a "
       "hostname's characters), got 'a?b'"},
      {[](R& r) { r.set_name(std::string(254, 'a')); },
       "field 'name': must be 1 to 253 characters, got 254"},
      {[](R& r) { r.set_address(""); }, "field 'address': empty"},
      {[](R& r) { r.set_address("a b:1"); },
       "field 'address': holds a space or a control character: 'a b:1'"},
      {[](R& r) { r.set_address(std::string(1025, 'a')); },
       "field 'address': must be at most 1024 bytes, got 1025"},
      {[](R& r) {
         for (int i = 0; i < 4095; ++i) r.add_gpus()->set_local(i + 2);
       },
       "field 'gpus': at most 4096 on a server, got 4097"},
      {[](R& r) { r.mutable_gpus(1)->set_local(2); },
       "field 'gpus[1].local': must be 0 to 1 (the server's GPU count less "
       "one), got 2"},
      {[](R& r) { r.mutable_gpus(1)->set_local(0); },
       "field 'gpus[1].local': GPU 0 is listed twice"},
      {[](R& r) { r.mutable_gpus(0)->set_uuid("x\x1b[2J"); },
       "field 'gpus[0].uuid': holds a control character"},
      {[](R& r) { r.mutable_gpus(0)->set_memory_bytes(-1); },
       "field 'gpus[0].memory_bytes': must be 0 or more, got -1"},
      {[](R& r) { r.set_sockets(-1); },
       "field 'sockets': must be 0 (one) to the GPU count (2), got -1"},
      {[](R& r) { r.set_switches_per_socket(1 << 30); },
       "field 'switches_per_socket': must be 0 (one) to the GPU count"},
      {[](R& r) { r.set_incarnation(std::string(257, 'x')); },
       "field 'incarnation': must be at most 256 bytes, got 257"},
      {[](R& r) { r.set_cluster_id("c\n"); },
       "field 'cluster_id': holds a control character: 'c?'"},
      {[](R& r) {
         r.mutable_capabilities()->set_mps_detail(std::string(4097, 'x'));
       },
       "field 'capabilities.mps_detail': must be at most 4096 bytes"},
      {[](R& r) { r.mutable_jobs(0)->set_job_id(4294967300LL); },
       "field 'jobs[0].job_id': a job id must be 1 to 2147483647, got "
       "4294967300"},
      {[](R& r) { r.mutable_jobs(0)->set_job_id(0); },
       "field 'jobs[0].job_id': a job id must be 1 to 2147483647, got 0"},
      {[](R& r) { *r.add_jobs() = r.jobs(0); },
       "field 'jobs[1].job_id': job 4 is listed twice"},
      {[](R& r) { r.mutable_jobs(0)->set_state(rpc::FINISHED); },
       "field 'jobs[0].state': must be RUNNING or SUSPENDED, got FINISHED"},
      {[](R& r) { r.mutable_jobs(0)->add_gpus(2); },
       "field 'jobs[0].gpus[1]': must be a GPU of the server, 0 to 1, got 2"},
      {[](R& r) { r.mutable_jobs(0)->add_gpus(1); },
       "field 'jobs[0].gpus[1]': GPU 1 is listed twice"},
      {[](R& r) { r.mutable_jobs(0)->set_pid(-3); },
       "field 'jobs[0].pid': must be 0 or more, got -3"},
      {[](R& r) { r.mutable_jobs(0)->set_submitted_us(-3); },
       "field 'jobs[0].submitted_us': must be 0 or more, got -3"},
      {[](R& r) {
         r.mutable_jobs(0)->mutable_progress()->set_sharing(
             std::string(65, 'x'));
       },
       "field 'jobs[0].progress.sharing': must be at most 64 bytes, got 65"},
      {[](R& r) { r.set_checkpoints(0, -9); },
       "field 'checkpoints[0]': a job id must be 1 to 2147483647, got -9"},
      {[](R& r) { r.add_checkpoints(9); },
       "field 'checkpoints[1]': job 9 is listed twice"},
      {[](R& r) { r.add_checkpoint_clusters("c-2"); },
       "field 'checkpoint_clusters': lists 2 entries, for 1 checkpoints"},
      {[](R& r) {
         r.add_checkpoint_specs();
         r.add_checkpoint_specs();
       },
       "field 'checkpoint_specs': lists 2 entries, for 1 checkpoints"},
      {[](R& r) { r.set_checkpoint_clusters(0, "c\t1"); },
       "field 'checkpoint_clusters[0]': holds a control character"},
      {[](R& r) { r.set_checkpoint_submitted_us(0, -1); },
       "field 'checkpoint_submitted_us[0]': must be 0 or more, got -1"},
  };
  for (const auto& [change, want] : cases) {
    R r = Registration();
    change(r);
    const std::string got = CheckAgentRegistration(r);
    EXPECT_EQ(got.substr(0, want.size()), want) << "got: " << got;
  }
}

TEST(AgentCheckTest, EachBadReportFieldIsNamed) {
  rpc::AgentReport r;
  r.set_name("a/b");
  EXPECT_EQ(CheckAgentReport(r),
            "field 'name': may hold only letters, digits, '.', '_' and '-' "
            "(a hostname's characters), got 'a/b'");
  r.set_name("agent-0");
  r.add_exits()->set_job_id(7);
  r.add_exits()->set_job_id(4294967303LL);  // job 7 if narrowed
  EXPECT_EQ(CheckAgentReport(r),
            "field 'exits[1].job_id': a job id must be 1 to 2147483647, got "
            "4294967303");
  r.clear_exits();
  r.add_profiles()->set_job_id(-1);
  EXPECT_EQ(CheckAgentReport(r),
            "field 'profiles[0].job_id': a job id must be 1 to 2147483647, "
            "got -1");
  r.mutable_profiles(0)->set_job_id(1);
  r.mutable_profiles(0)->mutable_progress()->set_sharing("mps\r\n");
  EXPECT_EQ(CheckAgentReport(r),
            "field 'profiles[0].progress.sharing': holds a control character: "
            "'mps?"
            "?'");
  rpc::LeaveRequest leave;
  EXPECT_EQ(CheckAgentLeave(leave).substr(0, 30),
            "field 'name': must be 1 to 253");
}

}  // namespace
}  // namespace gandiva::config
