// `gandiva queues` and `gandiva usage`: how the cluster is shared, by queue
// and by user.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/format.h"
#include "cli/scheduler_client.h"
#include "config/queues_file.h"

namespace gandiva::cli {
namespace {

struct QueuesFlags {
  ConnectionFlags conn;
  bool json = false;
};

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

int RunQueues(const QueuesFlags& f) {
  SchedulerSession s("queues", f.conn);
  rpc::ListQueuesReply reply;
  const grpc::Status st =
      s.stub().ListQueues(Context().get(), rpc::Empty(), &reply);
  if (!st.ok()) return s.Fail(st);
  if (f.json) {
    std::printf("%s\n", ToJson(reply).c_str());
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"QUEUE", "QUOTA", "WEIGHT", "LIMIT", "SHARE", "ASKED", "RUNNING",
       "GPU-H 24H", "JOBS RUNNING", "WAITING", "MEMBERS"}};
  // Each queue indented under its parent (parents come first).
  std::map<std::string, int> depth;
  for (const rpc::QueueInfo& q : reply.queues()) {
    const int d = q.parent().empty() ? 0 : depth[q.parent()] + 1;
    depth[q.name()] = d;
    char weight[32];
    std::snprintf(weight, sizeof weight, "%g", q.weight());
    std::string members;
    for (const std::string& m : q.members()) {
      members += (members.empty() ? "" : ",") + m;
    }
    if (q.has_max_priority()) {
      members += (members.empty() ? "" : " ") + std::string("(priority <= ") +
                 std::to_string(q.max_priority()) + ")";
    }
    rows.push_back(
        {std::string(static_cast<size_t>(2 * d), ' ') +
             (q.name().empty() ? "(shared)" : q.name()),
         std::to_string(q.quota()), weight,
         q.has_limit() ? std::to_string(q.limit()) : "-",
         Fixed(q.fair_share(), 1), std::to_string(q.gpus_asked()),
         std::to_string(q.gpus_running()), Fixed(q.gpu_seconds_day() / 3600, 1),
         std::to_string(q.jobs_running()), std::to_string(q.jobs_waiting()),
         members.empty() ? "-" : members});
  }
  std::fputs(FormatTable(rows).c_str(), stdout);
  return 0;
}

struct ApplyFlags {
  ConnectionFlags conn;
  std::string file;
  bool dry_run = false;
};

// `gandiva queues apply FILE`: the file checked here, then by the daemon,
// which takes it at once.
int RunApply(const ApplyFlags& f) {
  SchedulerSession s("queues apply", f.conn);
  std::error_code ec;
  if (std::filesystem::is_directory(f.file, ec)) {
    return s.Fail(f.file + ": is a directory, not a queues file");
  }
  std::ifstream in(f.file, std::ios::binary);
  if (!in) return s.Fail(f.file + ": cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return s.Fail(f.file + ": read error");
  if (auto parsed = config::ParseQueues(text.str(), f.file); !parsed.ok()) {
    return s.Fail(parsed.status().message());
  }
  rpc::ApplyQueuesRequest req;
  req.set_yaml(text.str());
  req.set_source(f.file);
  req.set_dry_run(f.dry_run);
  rpc::ApplyQueuesReply reply;
  const grpc::Status st = s.stub().ApplyQueues(Context().get(), req, &reply);
  if (!st.ok()) return s.Fail(st);
  if (reply.changes().empty()) {
    std::printf("the queues are as %s has them: nothing to change\n",
                f.file.c_str());
    return 0;
  }
  std::printf("%s\n", reply.applied() ? "queues changed:"
                                      : "would change (--dry-run):");
  for (const std::string& line : reply.changes()) {
    std::printf("  %s\n", line.c_str());
  }
  return 0;
}

struct UsageFlags {
  ConnectionFlags conn;
  double since_s = 86400;
  std::string by;  // "", "user" or "queue"
  bool json = false;
};

// GPU-hours by queue and user, as Slurm's `sreport cluster
// AccountUtilizationByUser` reports them: each row's share of the whole.
int RunUsage(const UsageFlags& f) {
  SchedulerSession s("usage", f.conn);
  if (f.since_s <= 0) {
    return s.Fail("--since: must be a positive duration, such as 1d");
  }
  rpc::UsageRequest req;
  req.set_last_s(f.since_s);
  rpc::UsageReply reply;
  const grpc::Status st = s.stub().GetUsage(Context().get(), req, &reply);
  if (!st.ok()) return s.Fail(st);
  // Rows as asked for: by queue and user, by user, or by queue.
  std::map<std::pair<std::string, std::string>, double> sums;
  double total = 0;
  for (const rpc::UsageRow& r : reply.rows()) {
    const std::string queue = f.by == "user" ? "" : r.queue();
    const std::string user = f.by == "queue" ? "" : r.user();
    sums[{queue, user}] += r.gpu_seconds();
    total += r.gpu_seconds();
  }
  if (f.json) {
    rpc::UsageReply out;
    out.set_from_us(reply.from_us());
    out.set_to_us(reply.to_us());
    out.set_kept_from_us(reply.kept_from_us());
    for (const auto& [key, seconds] : sums) {
      rpc::UsageRow* r = out.add_rows();
      r->set_queue(key.first);
      r->set_user(key.second);
      r->set_gpu_seconds(seconds);
    }
    std::printf("%s\n", ToJson(out).c_str());
    return 0;
  }
  std::printf("GPU-hours used from %s to %s\n",
              FormatClock(reply.from_us()).c_str(),
              FormatClock(reply.to_us()).c_str());
  if (reply.kept_from_us() > reply.from_us()) {
    std::printf("(the daemon keeps usage from %s on)\n",
                FormatClock(reply.kept_from_us()).c_str());
  }
  std::vector<std::pair<std::pair<std::string, std::string>, double>> order(
      sums.begin(), sums.end());
  std::stable_sort(
      order.begin(), order.end(),
      [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::vector<std::string>> rows;
  if (f.by == "user") {
    rows.push_back({"USER", "GPU-HOURS", "SHARE"});
  } else if (f.by == "queue") {
    rows.push_back({"QUEUE", "GPU-HOURS", "SHARE"});
  } else {
    rows.push_back({"QUEUE", "USER", "GPU-HOURS", "SHARE"});
  }
  auto share = [total](double seconds) {
    return total > 0 ? Fixed(100 * seconds / total, 1) + "%" : std::string("-");
  };
  for (const auto& [key, seconds] : order) {
    const std::string queue = key.first.empty() ? "(shared)" : key.first;
    std::vector<std::string> row;
    if (f.by != "user") row.push_back(queue);
    if (f.by != "queue") row.push_back(key.second.empty() ? "-" : key.second);
    row.push_back(Fixed(seconds / 3600, 2));
    row.push_back(share(seconds));
    rows.push_back(std::move(row));
  }
  std::vector<std::string> last = {"TOTAL"};
  if (f.by.empty()) last.push_back("");
  last.push_back(Fixed(total / 3600, 2));
  last.push_back(total > 0 ? "100.0%" : "-");
  rows.push_back(std::move(last));
  std::fputs(FormatTable(rows).c_str(), stdout);
  return 0;
}

}  // namespace

void AddQueueCommands(CLI::App& app, int& exit_code) {
  {
    auto f = std::make_shared<QueuesFlags>();
    CLI::App* sub = app.add_subcommand(
        "queues",
        "List the queues: each one's quota, fair share now and GPUs asked "
        "for (GPUs), its GPUs running, GPU-hours over the last 24 hours, and "
        "jobs running and waiting");
    sub->add_flag("--json", f->json,
                  "Print the ListQueuesReply message as JSON for scripts");
    AddConnectionFlags(sub, &f->conn);
    auto a = std::make_shared<ApplyFlags>();
    CLI::App* apply = sub->add_subcommand(
        "apply",
        "Replace the queues with those of a YAML file (as gandiva-scheduler "
        "--queues takes it), at once and kept: a queue given more gets it "
        "back from the borrowers by suspends (admins only)");
    apply->add_option("FILE", a->file, "The queues file")->required();
    apply->add_flag("--dry-run", a->dry_run,
                    "Only check the file and say what would change");
    AddConnectionFlags(apply, &a->conn);
    apply->callback([a, &exit_code] { exit_code = RunApply(*a); });
    sub->callback([f, apply, &exit_code] {
      if (!apply->parsed()) exit_code = RunQueues(*f);
    });
  }
  {
    auto f = std::make_shared<UsageFlags>();
    CLI::App* sub = app.add_subcommand(
        "usage",
        "GPU-hours used by queue and user (as Slurm's sreport): a job is "
        "charged its GPUs while it runs; kept by the hour");
    CLI::AsNumberWithUnit duration(
        std::map<std::string, double>{
            {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}, {"w", 604800}},
        CLI::AsNumberWithUnit::CASE_SENSITIVE, "UNIT");
    duration.description("");
    sub->add_option("--since", f->since_s,
                    "How far back, from the start of that hour: seconds, or "
                    "with a unit: 12h, 7d, 2w (default 1d)")
        ->transform(duration)
        ->type_name("DURATION");
    sub->add_option("--by", f->by,
                    "user or queue: one row per user (all queues) or per "
                    "queue (all users); default one per queue and user")
        ->check(CLI::IsMember({"user", "queue"}));
    sub->add_flag("--json", f->json,
                  "Print the rows as a UsageReply message in JSON");
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunUsage(*f); });
  }
}

}  // namespace gandiva::cli
