// `gandiva certs ca|issue`: a cluster CA and the certificates it signs for
// mutual TLS, made with the openssl command. A certificate's subject names
// its holder (CN) and role (OU: user, admin, agent or daemon), which a
// daemon with users takes as the caller's identity (identify.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "runtime/auth/credentials.h"

namespace gandiva::cli {
namespace {

namespace fs = std::filesystem;

struct CertsFlags {
  std::string dir = ".";
  std::string name;
  std::string role = "user";
  std::vector<std::string> hosts;
  int days = 365;
};

int Fail(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "gandiva certs %s: %s\n", command.c_str(),
               message.c_str());
  return 1;
}

// Runs openssl with `args`; its stderr goes to ours. "" or what failed.
std::string OpenSsl(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string bin = "openssl";
  argv.push_back(bin.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return "cannot fork";
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDOUT_FILENO);
    ::execvp("openssl", argv.data());
    std::perror("gandiva certs: openssl");
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return "the openssl command is not installed (Debian: apt-get install "
           "openssl)";
  }
  return "openssl " + args[0] + " failed (above)";
}

const char* kCurve = "ec_paramgen_curve:prime256v1";

int RunCa(const CertsFlags& f) {
  const fs::path key = fs::path(f.dir) / "ca.key";
  const fs::path pem = fs::path(f.dir) / "ca.pem";
  std::error_code ec;
  if (fs::exists(key, ec) || fs::exists(pem, ec)) {
    return Fail("ca", "--dir: " + f.dir +
                          " already holds a CA (ca.pem, ca.key); a new one "
                          "would orphan every certificate it signed");
  }
  fs::create_directories(f.dir, ec);
  const mode_t old = ::umask(077);
  const std::string err =
      OpenSsl({"req", "-x509", "-nodes", "-newkey", "ec", "-pkeyopt", kCurve,
               "-keyout", key.string(), "-out", pem.string(), "-days",
               std::to_string(f.days), "-subj", "/CN=gandiva-ca/OU=ca"});
  ::umask(old);
  if (!err.empty()) return Fail("ca", err);
  fs::permissions(pem,
                  fs::perms::owner_read | fs::perms::owner_write |
                      fs::perms::group_read | fs::perms::others_read,
                  ec);
  std::printf(
      "CA in %s (certificate, give it to every component) and %s "
      "(its key: keep it secret, mode 0600)\n",
      pem.c_str(), key.c_str());
  return 0;
}

int RunIssue(const CertsFlags& f) {
  if (auto s = runtime::CheckUserName(f.name); !s.ok()) {
    return Fail("issue", "NAME: " + s.message());
  }
  const fs::path dir(f.dir);
  const fs::path ca_key = dir / "ca.key", ca_pem = dir / "ca.pem";
  std::error_code ec;
  if (!fs::exists(ca_key, ec) || !fs::exists(ca_pem, ec)) {
    return Fail("issue", "--dir: no CA in " + f.dir +
                             " (ca.pem and ca.key); make one with `gandiva "
                             "certs ca --dir " +
                             f.dir + "`");
  }
  const fs::path key = dir / (f.name + ".key"), pem = dir / (f.name + ".pem");
  if (fs::exists(key, ec) || fs::exists(pem, ec)) {
    return Fail("issue", pem.string() + " or " + key.string() +
                             " exists; remove them to issue anew");
  }
  // Servers (daemon, agents) are dialled at these names; clients need none.
  std::vector<std::string> hosts = f.hosts;
  if (hosts.empty()) hosts = {"localhost", "127.0.0.1"};
  std::string san;
  for (const std::string& h : hosts) {
    const bool ip = h.find_first_not_of("0123456789.:") == std::string::npos;
    san += (san.empty() ? "" : ",") + std::string(ip ? "IP:" : "DNS:") + h;
  }
  const fs::path csr = dir / (f.name + ".csr"), ext = dir / (f.name + ".ext");
  std::ofstream(ext) << "subjectAltName=" << san
                     << "\nextendedKeyUsage=serverAuth,clientAuth\n";
  const mode_t old = ::umask(077);
  std::string err =
      OpenSsl({"req", "-nodes", "-newkey", "ec", "-pkeyopt", kCurve, "-keyout",
               key.string(), "-out", csr.string(), "-subj",
               "/CN=" + f.name + "/OU=" + f.role});
  ::umask(old);
  if (err.empty()) {
    err = OpenSsl({"x509", "-req", "-in", csr.string(), "-CA", ca_pem.string(),
                   "-CAkey", ca_key.string(), "-CAcreateserial", "-out",
                   pem.string(), "-days", std::to_string(f.days), "-extfile",
                   ext.string()});
  }
  fs::remove(csr, ec);
  fs::remove(ext, ec);
  if (!err.empty()) return Fail("issue", err);
  std::printf(
      "%s %s: %s and %s (its key, mode 0600); use with --tls-ca %s "
      "--tls-cert %s --tls-key %s (the CLI: $GANDIVA_TLS_CA, "
      "$GANDIVA_TLS_CERT, $GANDIVA_TLS_KEY)\n",
      f.role.c_str(), f.name.c_str(), pem.c_str(), key.c_str(), ca_pem.c_str(),
      pem.c_str(), key.c_str());
  return 0;
}

}  // namespace

void AddCertsCommand(CLI::App& app, int& exit_code) {
  CLI::App* certs = app.add_subcommand(
      "certs",
      "A cluster CA and the certificates it signs for mutual TLS "
      "(with the openssl command)");
  certs->require_subcommand(1);
  {
    auto f = std::make_shared<CertsFlags>();
    CLI::App* sub = certs->add_subcommand(
        "ca", "Make the cluster's CA: DIR/ca.pem and DIR/ca.key");
    sub->add_option("--dir", f->dir, "Where to write them")
        ->capture_default_str();
    sub->add_option("--days", f->days, "Valid for this many days")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    sub->callback([f, &exit_code] { exit_code = RunCa(*f); });
  }
  {
    auto f = std::make_shared<CertsFlags>();
    CLI::App* sub = certs->add_subcommand(
        "issue",
        "Sign a certificate for NAME in ROLE with the CA of --dir: "
        "DIR/NAME.pem and DIR/NAME.key (subject /CN=NAME/OU=ROLE)");
    sub->add_option("name", f->name,
                    "A user's name, an agent's, or the daemon's host")
        ->required();
    sub->add_option("--role", f->role, "user, admin, agent or daemon")
        ->check(CLI::IsMember({"user", "admin", "agent", "daemon"}))
        ->capture_default_str();
    sub->add_option("--host", f->hosts,
                    "A host name or IP address it serves at (repeatable; "
                    "default: localhost and 127.0.0.1)");
    sub->add_option("--dir", f->dir, "The CA's directory, and where to write")
        ->capture_default_str();
    sub->add_option("--days", f->days, "Valid for this many days")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    sub->callback([f, &exit_code] { exit_code = RunIssue(*f); });
  }
}

}  // namespace gandiva::cli
