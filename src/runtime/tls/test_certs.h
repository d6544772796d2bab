// Test helper: a throwaway CA and a certificate it signed for 127.0.0.1 and
// localhost (server and client use), made with the openssl command. For
// tests only.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "runtime/tls/tls.h"

namespace gandiva::runtime::testing {

// Writes `prefix`-ca.pem, `prefix`.pem and `prefix`.key under `dir` and
// returns them as TlsFiles; empty TlsFiles when openssl failed.
inline TlsFiles MakeTestCertificates(const std::filesystem::path& dir,
                                     const std::string& prefix) {
  const std::string p = (dir / prefix).string();
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1";
  const std::string cmd =
      "set -e; cd '" + dir.string() + "'; openssl req -x509 -nodes" + ec +
      " -keyout '" + p + "-ca.key' -out '" + p +
      "-ca.pem' -days 2 -subj /CN=" + prefix + "-ca; openssl req -nodes" + ec +
      " -keyout '" + p + ".key' -out '" + p + ".csr' -subj /CN=" + prefix +
      "; printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n"
      "extendedKeyUsage=serverAuth,clientAuth\\n' > '" +
      p + ".ext'; openssl x509 -req -in '" + p + ".csr' -CA '" + p +
      "-ca.pem' -CAkey '" + p + "-ca.key' -CAcreateserial -out '" + p +
      ".pem' -days 2 -extfile '" + p + ".ext' 2>/dev/null";
  if (std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()) != 0) return {};
  return {p + "-ca.pem", p + ".pem", p + ".key", ""};
}

}  // namespace gandiva::runtime::testing
