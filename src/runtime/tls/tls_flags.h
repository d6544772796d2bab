// The --tls-* flags of gandiva-scheduler and gandiva-agent (see tls.h).
#pragma once

#include <CLI/CLI.hpp>

#include "runtime/tls/tls.h"

namespace gandiva::runtime {

inline void AddTlsFlags(CLI::App& app, TlsFiles* files) {
  app.add_option("--tls-ca", files->ca,
                 "PEM file: the cluster's CA certificate (mutual TLS on every "
                 "gRPC connection; needs --tls-cert and --tls-key)");
  app.add_option("--tls-cert", files->cert,
                 "PEM file: this component's certificate, signed by the CA");
  app.add_option("--tls-key", files->key,
                 "PEM file: the private key of --tls-cert");
  app.add_option("--tls-name", files->name,
                 "the server name every certificate carries (default: the "
                 "host dialled)");
}

}  // namespace gandiva::runtime
