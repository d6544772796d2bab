#include "runtime/tls/tls.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

namespace gandiva::runtime {

namespace {

std::string OptionName(const std::string& prefix, const std::string& field) {
  if (prefix.empty() || prefix[0] != '$') return prefix + field;
  std::string upper = field;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  return prefix + upper;
}

core::StatusOr<std::string> ReadPem(const std::string& path,
                                    const std::string& option,
                                    const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return core::InvalidArgument(option + ": cannot read '" + path + "'");
  }
  std::ostringstream s;
  s << f.rdbuf();
  std::string pem = s.str();
  if (pem.find("-----BEGIN ") == std::string::npos ||
      pem.find(what) == std::string::npos) {
    return core::InvalidArgument(
        option + ": '" + path + "' is not a PEM " +
        (what == "PRIVATE KEY" ? "private key" : "certificate"));
  }
  return pem;
}

}  // namespace

core::StatusOr<std::optional<TlsConfig>> LoadTls(const TlsFiles& files,
                                                 const std::string& prefix) {
  if (files.empty()) return std::optional<TlsConfig>();
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"ca", &files.ca},
        {"cert", &files.cert},
        {"key", &files.key}}) {
    if (value->empty()) {
      return core::InvalidArgument(
          OptionName(prefix, field) + ": missing; TLS needs " +
          OptionName(prefix, "ca") + ", " + OptionName(prefix, "cert") +
          " and " + OptionName(prefix, "key") + " together");
    }
  }
  TlsConfig c;
  auto ca = ReadPem(files.ca, OptionName(prefix, "ca"), "CERTIFICATE");
  if (!ca.ok()) return ca.status();
  auto cert = ReadPem(files.cert, OptionName(prefix, "cert"), "CERTIFICATE");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(files.key, OptionName(prefix, "key"), "PRIVATE KEY");
  if (!key.ok()) return key.status();
  c.ca_pem = std::move(*ca);
  c.cert_pem = std::move(*cert);
  c.key_pem = std::move(*key);
  c.name = files.name;
  return std::optional<TlsConfig>(std::move(c));
}

std::vector<std::string> TlsArgs(const TlsFiles& files) {
  if (files.empty()) return {};
  std::vector<std::string> args = {"--tls-ca", files.ca,    "--tls-cert",
                                   files.cert, "--tls-key", files.key};
  if (!files.name.empty()) args.insert(args.end(), {"--tls-name", files.name});
  return args;
}

TlsFiles TlsFilesFromEnv() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  return {env("GANDIVA_TLS_CA"), env("GANDIVA_TLS_CERT"),
          env("GANDIVA_TLS_KEY"), env("GANDIVA_TLS_NAME")};
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const std::optional<TlsConfig>& tls) {
  if (!tls) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = tls->ca_pem;
  o.pem_key_cert_pairs.push_back({tls->key_pem, tls->cert_pem});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const std::optional<TlsConfig>& tls) {
  if (!tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls->ca_pem;
  o.pem_private_key = tls->key_pem;
  o.pem_cert_chain = tls->cert_pem;
  return grpc::SslCredentials(o);
}

void AddTlsArguments(const std::optional<TlsConfig>& tls,
                     grpc::ChannelArguments* args) {
  if (tls && !tls->name.empty()) args->SetSslTargetNameOverride(tls->name);
}

std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address, const std::optional<TlsConfig>& tls,
    grpc::ChannelArguments args,
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors) {
  AddTlsArguments(tls, &args);
  if (interceptors.empty()) {
    return grpc::CreateCustomChannel(address, ChannelCredentials(tls), args);
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, ChannelCredentials(tls), args, std::move(interceptors));
}

}  // namespace gandiva::runtime
