#include "runtime/scheduler/leadership.h"

#include <algorithm>
#include <utility>

namespace gandiva::runtime {

namespace ep = etcdserverpb;
using Clock = std::chrono::steady_clock;

core::StatusOr<std::shared_ptr<Leadership>> Leadership::Create(
    std::shared_ptr<EtcdClient> client, Options options) {
  if (options.ttl_s < 2) {
    return core::InvalidArgument("--lease-ttl-s: must be at least 2, got " +
                                 std::to_string(options.ttl_s));
  }
  if (options.prefix.empty()) {
    return core::InvalidArgument("--etcd-prefix: must not be empty");
  }
  std::shared_ptr<Leadership> l(new Leadership());
  l->client_ = std::move(client);
  l->opts_ = std::move(options);
  l->leader_key_ = l->opts_.prefix + "leader";
  Leadership* raw = l.get();
  l->renewer_ = std::thread([raw] { raw->RenewLoop(); });
  return l;
}

Leadership::~Leadership() { StopRenewing(); }

void Leadership::StopRenewing() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (renewer_.joinable() && renewer_.get_id() != std::this_thread::get_id()) {
    renewer_.join();
  }
}

core::Status Leadership::Campaign(
    const std::function<void(const std::string&)>& log) {
  std::string last_note;
  auto note = [&](const std::string& s) {
    if (s != last_note) log(s);
    last_note = s;
  };
  for (;;) {
    int64_t lease;
    {
      std::lock_guard lock(mu_);
      if (cancelled_) {
        return core::Status(core::StatusCode::kUnavailable,
                            "stopped before this daemon led");
      }
      lease = lease_;
    }
    core::Status failed = core::Status::Ok();
    if (lease == 0) {
      auto granted = client_->LeaseGrant(opts_.ttl_s);
      if (granted.ok()) {
        lease = *granted;
        std::lock_guard lock(mu_);
        lease_ = lease;
        renewed_ = Clock::now();
      } else {
        failed = granted.status();
      }
    }
    if (failed.ok()) {
      ep::TxnRequest t;
      ep::Compare* c = t.add_compare();
      c->set_key(leader_key_);
      c->set_target(ep::Compare::CREATE);
      c->set_result(ep::Compare::EQUAL);
      c->set_create_revision(0);  // absent
      ep::PutRequest* put = t.add_success()->mutable_request_put();
      put->set_key(leader_key_);
      put->set_value(opts_.identity);
      put->set_lease(lease);
      t.add_failure()->mutable_request_range()->set_key(leader_key_);
      auto rep = client_->Txn(t);
      if (rep.ok() && rep->succeeded()) {
        std::lock_guard lock(mu_);
        leading_ = true;
        paused_ = false;
        lost_why_.clear();
        lost_reported_ = false;
        fence_ = rep->header().revision();
        renewed_ = Clock::now();
        return core::Status::Ok();
      }
      if (rep.ok()) {
        const auto& kvs = rep->responses(0).response_range().kvs();
        note(kvs.empty() ? "standby: the leader key just went; trying again"
                         : "standby: " + kvs[0].value() + " leads");
      } else {
        failed = rep.status();
      }
    }
    if (!failed.ok()) note("standby: cannot reach etcd: " + failed.message());
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(500),
                 [&] { return cancelled_; });
  }
}

void Leadership::Cancel() {
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
  }
  cv_.notify_all();
}

void Leadership::OnLost(std::function<void(const std::string&)> f) {
  {
    std::unique_lock lock(mu_);
    WaitForCallbacks(lock);
    on_lost_ = std::move(f);
  }
  cv_.notify_all();
}

void Leadership::WaitForCallbacks(std::unique_lock<std::mutex>& lock) {
  if (std::this_thread::get_id() == renewer_.get_id()) return;
  cv_.wait(lock, [&] { return !calling_; });
}

void Leadership::OnPause(
    std::function<void(bool paused, const std::string&)> f) {
  std::unique_lock lock(mu_);
  WaitForCallbacks(lock);
  on_pause_ = std::move(f);
}

bool Leadership::paused() const {
  std::lock_guard lock(mu_);
  return paused_;
}

void Leadership::MarkLost(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (!leading_) return;
    leading_ = false;
    paused_ = false;
    lost_why_ = why;
  }
  cv_.notify_all();
}

bool Leadership::leading() const {
  std::lock_guard lock(mu_);
  return leading_;
}

int64_t Leadership::fence() const {
  std::lock_guard lock(mu_);
  return fence_;
}

void Leadership::Resign() {
  int64_t lease;
  {
    std::lock_guard lock(mu_);
    lease = lease_;
    leading_ = false;
    lease_ = 0;
  }
  if (lease != 0) (void)client_->LeaseRevoke(lease);
}

core::StatusOr<std::string> Leadership::Leader() {
  ep::RangeRequest r;
  r.set_key(leader_key_);
  auto rep = client_->Range(r);
  if (!rep.ok()) return rep.status();
  return rep->kvs().empty() ? std::string() : rep->kvs(0).value();
}

void Leadership::RenewLoop() {
  const auto every = std::chrono::milliseconds(opts_.ttl_s * 1000 / 3);
  // Pause before etcd can let a standby in: at 2/3 of the TTL without a
  // renewal. etcd's lease runs from when it handled the last renewal,
  // before `renewed_`: the margin is a third of the TTL less one network
  // delay.
  const auto give_up = std::chrono::milliseconds(opts_.ttl_s * 2000 / 3);
  // While paused: how often to try again.
  const auto retry = std::chrono::milliseconds(250);
  std::unique_lock lock(mu_);
  // Calls `f` with the lock released.
  auto tell = [&](const auto& f, auto... args) {
    if (!f) return;
    auto copy = f;
    calling_ = true;
    lock.unlock();
    copy(args...);
    lock.lock();
    calling_ = false;
    cv_.notify_all();
  };
  for (;;) {
    // Renew every third of the TTL; while renewals fail, up to the moment
    // of pausing (a failed call does not delay it); while paused, often.
    auto wake = Clock::now() + (paused_ ? retry : every);
    if (leading_ && !paused_) wake = std::min(wake, renewed_ + give_up);
    cv_.wait_until(lock, wake, [&] {
      return stop_ || (!lost_why_.empty() && on_lost_ && !lost_reported_);
    });
    if (stop_) return;
    if (!lost_why_.empty() && on_lost_ && !lost_reported_) {
      lost_reported_ = true;
      tell(on_lost_, lost_why_);
      continue;
    }
    const int64_t lease = lease_;
    if (lease == 0) continue;
    const auto now = Clock::now();
    auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(every);
    if (leading_ && !paused_) {
      if (now >= renewed_ + give_up) {
        paused_ = true;
        tell(on_pause_, true,
             "the etcd lease could not be renewed for " +
                 std::to_string(give_up.count()) + " ms (" + last_error_ +
                 "): handling nothing until etcd answers");
        continue;
      }
      timeout = std::min(timeout,
                         std::chrono::duration_cast<std::chrono::milliseconds>(
                             renewed_ + give_up - now));
    }
    lock.unlock();
    auto ttl = client_->LeaseKeepAlive(lease, timeout);
    lock.lock();
    if (lease_ != lease) continue;  // resigned meanwhile
    if (ttl.ok() && *ttl > 0) {
      renewed_ = Clock::now();
      if (paused_ && leading_) {
        paused_ = false;
        tell(on_pause_, false,
             "etcd answers again and the lease held: leading on");
      }
      continue;
    }
    if (!ttl.ok()) {
      last_error_ = ttl.status().message();
      continue;  // tried again soon
    }
    lease_ = 0;  // etcd says it is gone; a campaign grants a new one
    if (leading_) {
      leading_ = false;
      lost_why_ = paused_ ? "the etcd lease expired while etcd could not be "
                            "reached"
                          : "the etcd lease expired";
      paused_ = false;
    }
  }
}

}  // namespace gandiva::runtime
