#include "runtime/auth/control_token.h"

#include <openssl/crypto.h>

#include <charconv>

#include "runtime/auth/credentials.h"

namespace gandiva::runtime {
namespace {

bool SameSecret(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string LogTicketMac(const std::string& token, int64_t job,
                         int64_t expires_us) {
  return HmacSha256Hex(token, "tail-log:" + std::to_string(job) + ":" +
                                  std::to_string(expires_us));
}

}  // namespace

std::string MakeLogTicket(const std::string& token, int64_t job,
                          int64_t expires_us) {
  return std::to_string(job) + "." + std::to_string(expires_us) + "." +
         LogTicketMac(token, job, expires_us);
}

void AttachControlToken(const std::string& token, grpc::ClientContext* ctx) {
  if (!token.empty()) ctx->AddMetadata(kControlTokenKey, token);
}

ControlGate::ControlGate(bool has_daemon)
    : state_(has_daemon ? State::kAwaiting : State::kOpen) {}

void ControlGate::Set(const std::string& token) {
  {
    std::lock_guard lock(mu_);
    token_ = token;
    state_ = token.empty() ? State::kOpen : State::kSet;
  }
  set_.notify_all();
}

grpc::Status ControlGate::Admit(const grpc::ServerContext& ctx,
                                std::string_view call) const {
  return Check(ctx, call, /*wait=*/true);
}

grpc::Status ControlGate::Check(const grpc::ServerContext& ctx,
                                std::string_view call, bool wait) const {
  std::unique_lock lock(mu_);
  if (wait) {
    set_.wait_for(lock, kAwaitReply,
                  [&] { return state_ != State::kAwaiting; });
  }
  if (state_ == State::kOpen) return grpc::Status::OK;
  if (state_ == State::kAwaiting) {
    return {grpc::StatusCode::UNAVAILABLE,
            std::string(call) +
                ": this agent has not registered with its daemon yet; it "
                "takes job calls only from its cluster, once registered"};
  }
  const auto& md = ctx.client_metadata();
  auto it = md.find(kControlTokenKey);
  if (it == md.end()) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            std::string(call) +
                ": refused: only the daemon and the cluster's agents may "
                "call it (the call carries no control token)"};
  }
  const std::string_view got(it->second.data(), it->second.size());
  if (!SameSecret(got, token_)) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            std::string(call) +
                ": refused: only the daemon and the cluster's agents may "
                "call it (the call's control token is not this cluster's)"};
  }
  return grpc::Status::OK;
}

bool ControlGate::Admits(const grpc::ServerContext& ctx) const {
  return Check(ctx, "", /*wait=*/false).ok();
}

grpc::Status ControlGate::AdmitLogRead(const grpc::ServerContext& ctx,
                                       int64_t job, const std::string& ticket,
                                       int64_t now_us) const {
  grpc::Status by_token = Admit(ctx, "TailLog");
  if (by_token.ok() || ticket.empty() ||
      by_token.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return by_token;
  }
  std::string token;
  {
    std::lock_guard lock(mu_);
    token = token_;
  }
  // JOB.EXPIRES_US.MAC
  const size_t a = ticket.find('.');
  const size_t b = a == std::string::npos ? a : ticket.find('.', a + 1);
  int64_t for_job = 0;
  int64_t expires_us = 0;
  const char* s = ticket.data();
  if (b == std::string::npos ||
      std::from_chars(s, s + a, for_job).ptr != s + a ||
      std::from_chars(s + a + 1, s + b, expires_us).ptr != s + b ||
      !SameSecret(std::string_view(ticket).substr(b + 1),
                  LogTicketMac(token, for_job, expires_us))) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "TailLog: refused: the ticket is not one this cluster's daemon "
            "gave"};
  }
  if (for_job != job) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "TailLog: refused: the ticket is for job " +
                std::to_string(for_job) + ", not job " + std::to_string(job)};
  }
  if (expires_us < now_us) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "TailLog: refused: the ticket expired (ask the daemon for "
            "another: gandiva logs does)"};
  }
  return grpc::Status::OK;
}

void ControlGate::Attach(grpc::ClientContext* ctx) const {
  std::lock_guard lock(mu_);
  AttachControlToken(token_, ctx);
}

}  // namespace gandiva::runtime
