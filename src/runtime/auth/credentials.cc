#include "runtime/auth/credentials.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace gandiva::runtime {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

}  // namespace

core::StatusOr<Credential> ReadCredential(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    return core::IoError("credential file " + path +
                         ": cannot be read: " + std::strerror(errno));
  }
  std::stringstream text;
  text << f.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr,
                                       /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return core::InvalidArgument("credential file " + path +
                                 ": is not a JSON object");
  }
  Credential c;
  for (const char* field : {"user", "token"}) {
    auto it = j.find(field);
    if (it == j.end() || !it->is_string() || it->get<std::string>().empty()) {
      return core::InvalidArgument(
          "credential file " + path + ": field '" + field +
          "': " + (it == j.end() ? "is missing" : "is not a non-empty string"));
    }
    (std::string(field) == "user" ? c.user : c.token) = it->get<std::string>();
  }
  return c;
}

core::Status WriteCredential(const std::string& path, const Credential& c) {
  const std::string tmp = path + ".tmp";
  const std::string text =
      nlohmann::json{{"user", c.user}, {"token", c.token}}.dump() + "\n";
  ::unlink(tmp.c_str());
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return core::IoError("cannot write credential file " + path + ": " +
                         std::strerror(errno));
  }
  const bool written = ::write(fd, text.data(), text.size()) ==
                           static_cast<ssize_t>(text.size()) &&
                       ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!written || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = written ? errno : err;
    ::unlink(tmp.c_str());
    return core::IoError("cannot write credential file " + path + ": " +
                         std::strerror(e));
  }
  return core::Status::Ok();
}

std::string NewToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    // The CSPRNG failing is not something to go on from with a weak token.
    std::abort();
  }
  return "gdv_" + Hex(bytes, sizeof bytes);
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &n, EVP_sha256(), nullptr) !=
      1) {
    std::abort();
  }
  return Hex(digest, n);
}

std::string HmacSha256Hex(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(),
           mac, &n) == nullptr) {
    std::abort();
  }
  return Hex(mac, n);
}

core::Status CheckUserName(const std::string& name) {
  if (name.empty() || name.size() > 64) {
    return core::InvalidArgument("field 'name': '" + name.substr(0, 80) +
                                 "' is not 1-64 characters long");
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       (c >= '0' && c <= '9');
    if (alnum || (i > 0 && (c == '.' || c == '_' || c == '@' || c == '-'))) {
      continue;
    }
    return core::InvalidArgument(
        "field 'name': '" + name +
        "' has a character other than A-Z, a-z, 0-9, '.', '_', '@', '-' "
        "(or starts with one of the last four)");
  }
  return core::Status::Ok();
}

void AttachCredential(const Credential& c, grpc::ClientContext* ctx) {
  ctx->AddMetadata(kAuthorizationKey, kBearerPrefix + c.token);
}

}  // namespace gandiva::runtime
