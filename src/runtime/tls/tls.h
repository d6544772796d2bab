// Mutual TLS for gandiva's gRPC connections (CLI -> daemon, daemon <->
// agents, agent -> agent).
//
// Every component holds a certificate and key signed by the cluster's CA and
// trusts only that CA: a server accepts a connection only from a client
// presenting a certificate the CA signed, and a client talks only to a
// server whose certificate the CA signed and names the host it dialled (or
// `name`, when set: one name every certificate carries, for clusters that
// issue one certificate for all). Without TLS (no file given) connections
// are plain, as on a single machine.
//
// The agents' bulk checkpoint channel (plain TCP) is not encrypted: with TLS
// an agent moves checkpoints over its TLS gRPC stream instead, unless told
// the network is safe (--bulk-plaintext); the bulk channel then admits only
// a connection presenting the single-use token handed out over TLS gRPC.
//
// Plain functions and values; thread-compatible.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace gandiva::runtime {

// PEM files as given on a command line (or in the environment).
struct TlsFiles {
  std::string ca;    // the cluster's CA certificate
  std::string cert;  // this component's certificate
  std::string key;   // and its private key
  std::string name;  // optional: the server name to expect (see above)
  bool empty() const {
    return ca.empty() && cert.empty() && key.empty() && name.empty();
  }
};

// The files' contents.
struct TlsConfig {
  std::string ca_pem, cert_pem, key_pem;
  std::string name;
};

// Reads the files. nullopt when none is given (plain connections).
// InvalidArgument naming the option (`prefix` + "ca", "cert", "key",
// "name": e.g. "--tls-" or "$GANDIVA_TLS_" with upper-case names) when
// only some are given, a file cannot be read, or is not PEM.
core::StatusOr<std::optional<TlsConfig>> LoadTls(const TlsFiles& files,
                                                 const std::string& prefix);

// The --tls-* arguments naming `files` (none when it is empty), for
// starting a daemon or an agent with them.
std::vector<std::string> TlsArgs(const TlsFiles& files);

// The environment's files: $GANDIVA_TLS_CA, $GANDIVA_TLS_CERT,
// $GANDIVA_TLS_KEY, $GANDIVA_TLS_NAME.
TlsFiles TlsFilesFromEnv();

// Credentials for a server (client certificates required and verified
// against the CA) and for a client; insecure ones without TLS.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const std::optional<TlsConfig>& tls);
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const std::optional<TlsConfig>& tls);
// Sets the expected server name on `args` when `tls` has one.
void AddTlsArguments(const std::optional<TlsConfig>& tls,
                     grpc::ChannelArguments* args);
// A channel to `address` with both of the above, its calls passed through
// `interceptors` (none: a plain channel).
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address, const std::optional<TlsConfig>& tls,
    grpc::ChannelArguments args = {},
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors = {});

}  // namespace gandiva::runtime
