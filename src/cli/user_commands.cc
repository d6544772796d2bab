// `gandiva user add|ls|rm|whoami`: the cluster's users, on a daemon with
// users (gandiva-scheduler --credentials-dir; `gandiva up` starts one).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/format.h"
#include "cli/scheduler_client.h"

namespace gandiva::cli {
namespace {

struct UserFlags {
  ConnectionFlags conn;
  std::string name;
  std::string role = "user";
  bool admin = false;
  std::string out;
  bool json = false;
};

// Prints "gandiva user <command>: <message>" on stderr; returns 1.
int Fail(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "gandiva user %s: %s\n", command.c_str(),
               message.c_str());
  return 1;
}

int RunAdd(const UserFlags& f) {
  const std::string role = f.admin ? "admin" : f.role;
  std::error_code ec;
  if (std::filesystem::exists(f.out, ec)) {
    return Fail("add", "--out: " + f.out +
                           " exists; name a new file (the token is shown "
                           "once, and this would overwrite a credential)");
  }
  const std::string dir =
      std::filesystem::absolute(f.out, ec).parent_path().string();
  if (::access(dir.c_str(), W_OK) != 0) {
    return Fail("add", "--out: cannot write in " + dir);
  }
  const SchedulerAddress where = ResolveScheduler(f.conn);
  auto stub = ConnectScheduler(where.address);
  rpc::AddUserRequest req;
  req.set_name(f.name);
  req.set_role(role);
  rpc::AddUserReply reply;
  const grpc::Status st = stub->AddUser(Context().get(), req, &reply);
  if (!st.ok()) return Fail("add", DescribeRpcError(st, where));
  if (auto w = runtime::WriteCredential(f.out, {f.name, reply.token()});
      !w.ok()) {
    std::printf("%s\n", reply.token().c_str());
    return Fail("add", w.message() + "; user '" + f.name +
                           "' was added: its token, shown once, is above");
  }
  std::printf(
      "added %s %s; credential in %s (mode 0600): hand it to them, "
      "to use as --credentials FILE or $GANDIVA_CREDENTIALS\n",
      role.c_str(), f.name.c_str(), f.out.c_str());
  return 0;
}

int RunList(const UserFlags& f) {
  const SchedulerAddress where = ResolveScheduler(f.conn);
  auto stub = ConnectScheduler(where.address);
  rpc::ListUsersReply reply;
  const grpc::Status st =
      stub->ListUsers(Context().get(), rpc::Empty(), &reply);
  if (!st.ok()) return Fail("ls", DescribeRpcError(st, where));
  if (f.json) {
    std::printf("%s\n", ToJson(reply).c_str());
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"USER", "ROLE", "ADDED"}};
  for (const rpc::UserInfo& u : reply.users()) {
    rows.push_back({u.name(), u.role(), FormatClock(u.created_us())});
  }
  std::fputs(FormatTable(rows).c_str(), stdout);
  return 0;
}

int RunRemove(const UserFlags& f) {
  const SchedulerAddress where = ResolveScheduler(f.conn);
  auto stub = ConnectScheduler(where.address);
  rpc::UserRequest req;
  req.set_name(f.name);
  rpc::Empty reply;
  const grpc::Status st = stub->RemoveUser(Context().get(), req, &reply);
  if (!st.ok()) return Fail("rm", DescribeRpcError(st, where));
  std::printf(
      "removed %s: their token is refused from now on; their jobs "
      "stay theirs\n",
      f.name.c_str());
  return 0;
}

int RunWhoAmI(const UserFlags& f) {
  const SchedulerAddress where = ResolveScheduler(f.conn);
  auto stub = ConnectScheduler(where.address);
  rpc::UserInfo me;
  const grpc::Status st = stub->WhoAmI(Context().get(), rpc::Empty(), &me);
  if (!st.ok()) return Fail("whoami", DescribeRpcError(st, where));
  if (me.name().empty()) {
    std::printf(
        "anyone: the scheduler has no users (every caller acts as "
        "an admin)\n");
  } else {
    std::printf("%s (%s)\n", me.name().c_str(), me.role().c_str());
  }
  return 0;
}

}  // namespace

void AddUserCommands(CLI::App& app, int& exit_code) {
  CLI::App* user = app.add_subcommand(
      "user",
      "The cluster's users (a scheduler with users: `gandiva up`, or "
      "gandiva-scheduler --credentials-dir)");
  user->require_subcommand(1);
  {
    auto f = std::make_shared<UserFlags>();
    CLI::App* sub = user->add_subcommand(
        "add", "Add a user and write their credential file (admins only)");
    sub->add_option("name", f->name, "The user's name")->required();
    sub->add_option("--role", f->role, "user, admin or agent")
        ->check(CLI::IsMember({"user", "admin", "agent"}))
        ->capture_default_str();
    sub->add_flag("--admin", f->admin, "The same as --role admin");
    sub->add_option("--out", f->out,
                    "Where to write the credential (a new file, mode 0600)")
        ->required();
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunAdd(*f); });
  }
  {
    auto f = std::make_shared<UserFlags>();
    CLI::App* sub = user->add_subcommand("ls", "List the users (admins only)");
    sub->add_flag("--json", f->json,
                  "Print the ListUsersReply message as JSON for scripts");
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunList(*f); });
  }
  {
    auto f = std::make_shared<UserFlags>();
    CLI::App* sub = user->add_subcommand(
        "rm",
        "Remove a user: their token is refused from now on (admins "
        "only; not the last admin)");
    sub->add_option("name", f->name, "The user's name")->required();
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunRemove(*f); });
  }
  {
    auto f = std::make_shared<UserFlags>();
    CLI::App* sub = user->add_subcommand(
        "whoami", "Who the scheduler takes this credential for");
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunWhoAmI(*f); });
  }
}

}  // namespace gandiva::cli
