#include "runtime/auth/control_token.h"

#include <grpc/grpc_security_constants.h>
#include <openssl/crypto.h>

#include <charconv>
#include <chrono>
#include <vector>

#include "runtime/auth/credentials.h"
#include "runtime/auth/subject.h"

namespace gandiva::runtime {
namespace {

int64_t WallNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool SameSecret(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// The MAC of a ticket of `kind` for `job` until `expires_us`; `tail` (a
// fetch ticket's destination) is signed too when not empty.
std::string TicketMac(const std::string& token, std::string_view kind,
                      int64_t job, int64_t expires_us, std::string_view tail) {
  std::string what = std::string(kind) + ":" + std::to_string(job) + ":" +
                     std::to_string(expires_us);
  if (!tail.empty()) what += ":" + std::string(tail);
  return HmacSha256Hex(token, what);
}

std::string MakeTicket(const std::string& token, std::string_view kind,
                       int64_t job, int64_t expires_us,
                       const std::string& tail) {
  std::string t = std::to_string(job) + "." + std::to_string(expires_us) + "." +
                  TicketMac(token, kind, job, expires_us, tail);
  if (!tail.empty()) t += "." + tail;
  return t;
}

class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string& token) : token_(token) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      m->GetSendInitialMetadata()->insert({kControlTokenKey, token_});
    }
    m->Proceed();
  }

 private:
  const std::string& token_;  // the factory's, which outlives the channel
};

class TokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string token)
      : token_(std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(token_);
  }

 private:
  const std::string token_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
ControlTokenInterceptor(const std::string& token) {
  if (token.empty()) return nullptr;
  return std::make_unique<TokenInterceptorFactory>(token);
}

std::string AgentControlToken(const std::string& master,
                              const std::string& name) {
  if (master.empty()) return "";
  return "gdv_agent_" + HmacSha256Hex(master, "agent:" + name);
}

std::string MakeLogTicket(const std::string& token, int64_t job,
                          int64_t expires_us) {
  return MakeTicket(token, "tail-log", job, expires_us, "");
}

std::string MakeFetchTicket(const std::string& token, int64_t job,
                            const std::string& destination,
                            int64_t expires_us) {
  return MakeTicket(token, "fetch", job, expires_us, destination);
}

void AttachControlToken(const std::string& token, grpc::ClientContext* ctx) {
  if (!token.empty()) ctx->AddMetadata(kControlTokenKey, token);
}

void AttachFetchTicket(const std::string& ticket, grpc::ClientContext* ctx) {
  if (!ticket.empty()) ctx->AddMetadata(kFetchTicketKey, ticket);
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

grpc::Status ControlGate::AdmitFetch(const grpc::ServerContext& ctx,
                                     std::string_view call, int64_t job) const {
  grpc::Status by_token = Admit(ctx, call);
  if (by_token.ok() || by_token.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return by_token;
  }
  const auto& md = ctx.client_metadata();
  auto it = md.find(kFetchTicketKey);
  if (it == md.end()) return by_token;
  const std::string_view ticket(it->second.data(), it->second.size());
  std::string_view destination;
  if (grpc::Status s = CheckTicket(call, "fetch", ticket, job, &destination);
      !s.ok()) {
    return s;
  }
  // A caller with an agent's certificate is the agent the ticket names
  // (JOB.EXPIRES.MAC.DESTINATION; the MAC covers the destination).
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return grpc::Status::OK;
  std::vector<std::string> subjects;
  for (const auto& v :
       auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME)) {
    subjects.emplace_back(v.data(), v.size());
  }
  if (std::string why = CheckFetchCaller(subjects, destination); !why.empty()) {
    return {grpc::StatusCode::PERMISSION_DENIED,
            std::string(call) + ": refused: " + why};
  }
  return grpc::Status::OK;
}

grpc::Status ControlGate::AdmitLogRead(const grpc::ServerContext& ctx,
                                       int64_t job,
                                       const std::string& ticket) const {
  grpc::Status by_fetch = AdmitFetch(ctx, "TailLog", job);
  if (by_fetch.ok() || ticket.empty() ||
      by_fetch.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return by_fetch;
  }
  return CheckTicket("TailLog", "tail-log", ticket, job);
}

grpc::Status ControlGate::CheckTicket(std::string_view call,
                                      std::string_view kind,
                                      std::string_view ticket, int64_t job,
                                      std::string_view* tail_out) const {
  std::string token;
  {
    std::lock_guard lock(mu_);
    token = token_;
  }
  // JOB.EXPIRES_US.MAC[.TAIL]
  const size_t a = ticket.find('.');
  const size_t b = a == std::string_view::npos ? a : ticket.find('.', a + 1);
  const size_t c = b == std::string_view::npos ? b : ticket.find('.', b + 1);
  const std::string_view tail =
      c == std::string_view::npos ? "" : ticket.substr(c + 1);
  int64_t for_job = 0;
  int64_t expires_us = 0;
  const char* s = ticket.data();
  if (b == std::string_view::npos ||
      std::from_chars(s, s + a, for_job).ptr != s + a ||
      std::from_chars(s + a + 1, s + b, expires_us).ptr != s + b ||
      !SameSecret(ticket.substr(b + 1, c == std::string_view::npos
                                           ? std::string_view::npos
                                           : c - b - 1),
                  TicketMac(token, kind, for_job, expires_us, tail))) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            std::string(call) + ": refused: the " +
                (kind == "fetch" ? "fetch" : "log") +
                " ticket is not one this cluster's daemon gave for this agent"};
  }
  if (for_job != job) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            std::string(call) + ": refused: the ticket is for job " +
                std::to_string(for_job) + ", not job " + std::to_string(job)};
  }
  if (expires_us < WallNowUs()) {
    return {
        grpc::StatusCode::UNAUTHENTICATED,
        std::string(call) + ": refused: the ticket expired" +
            (kind == "fetch" ? std::string(" (the move that gave it is over)")
                             : " (ask the daemon for another: gandiva "
                               "logs does)")};
  }
  if (tail_out != nullptr) *tail_out = tail;
  return grpc::Status::OK;
}

}  // namespace gandiva::runtime
