// Leadership: leader election among gandiva-scheduler daemons sharing one
// etcd cluster, so that a standby takes over when the leader dies.
//
// Each daemon holds an etcd lease of `ttl_s` seconds, renewed every third
// of it. The leader is the daemon whose lease holds the key PREFIX/leader
// (created only if absent, in one transaction); the others wait, checking
// every half second, and one of them creates the key once the leader's
// lease lapses (the leader died, or lost etcd) or it resigned (a clean
// stop revokes the lease: the standby takes over at once).
//
// Fencing: every write of the leader's store (etcd_store.h) is a
// transaction conditioned on the leader key still being the one this
// daemon created (its create revision). A daemon that lost the lead (its
// lease lapsed while it was paused or cut off) cannot write.
//
// Pausing: when a renewal has not succeeded for two thirds of the TTL (etcd
// restarts, or this daemon is cut off from it), the leader pauses before
// etcd could let a standby take over: OnPause's callback runs, and the
// daemon handles nothing (its log cannot be written; it waits). It renews
// every quarter second meanwhile. When etcd answers again, either the
// lease held (etcd was down for everyone, or a restart refreshed it): the
// pause ends and it leads on, with no change of leader; or the lease
// lapsed: the lead is lost, and OnLost's callback runs, as it does when a
// fenced write is refused. Campaign may then be called again: a daemon
// that lost the lead stands by.
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"
#include "runtime/scheduler/etcd_client.h"

namespace gandiva::runtime {

class Leadership {
 public:
  struct Options {
    // Keys start with this ("/gandiva/" by default; one per cluster).
    std::string prefix = "/gandiva/";
    int64_t ttl_s = 5;
    // What the leader key holds: who leads, shown to the standbys.
    std::string identity;
  };
  static core::StatusOr<std::shared_ptr<Leadership>> Create(
      std::shared_ptr<EtcdClient> client, Options options);
  // Stops renewing (the lease lapses unless Resign revoked it).
  ~Leadership();
  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  // Blocks until this daemon leads (Ok) or Cancel is called (Unavailable).
  // `log` is told who leads while it waits, and when etcd cannot be
  // reached (once each time it changes).
  core::Status Campaign(const std::function<void(const std::string&)>& log);
  void Cancel();

  // Runs `f` once, on the renewal thread, when a lead held is lost (see
  // above), with the reason. Set it before Campaign returns, or right
  // after. Setting it (or OnPause's) waits for a callback under way, so
  // that what the old one uses may go once it returns.
  void OnLost(std::function<void(const std::string&)> f);
  // Runs `f(true, why)` on the renewal thread when the leader pauses (see
  // above) and `f(false, what)` when it leads on after a pause.
  void OnPause(std::function<void(bool paused, const std::string&)> f);
  // Paused: leading, but unable to renew the lease (see above).
  bool paused() const;
  // A fenced write was refused: the lead is lost.
  void MarkLost(const std::string& why);
  bool leading() const;
  // Gives up the lead: revokes the lease, so the key goes at once.
  void Resign();
  // Stops the renewal thread, waiting for an OnLost callback under way.
  // Not from that callback. The destructor does it too.
  void StopRenewing();

  EtcdClient& client() { return *client_; }
  const std::string& prefix() const { return opts_.prefix; }
  const std::string& leader_key() const { return leader_key_; }
  // The create revision of the leader key this daemon holds (valid while
  // it leads): the condition of every fenced write.
  int64_t fence() const;
  // The leader key's value, if any: who leads now.
  core::StatusOr<std::string> Leader();

 private:
  Leadership() = default;
  void RenewLoop();
  // Waits until no callback runs (unless called from one). `lock` holds mu_.
  void WaitForCallbacks(std::unique_lock<std::mutex>& lock);

  std::shared_ptr<EtcdClient> client_;
  Options opts_;
  std::string leader_key_;
  std::thread renewer_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;       // guarded by mu_
  bool cancelled_ = false;  // guarded by mu_
  int64_t lease_ = 0;       // 0: none granted (or it lapsed)
  bool leading_ = false;
  int64_t fence_ = 0;
  std::chrono::steady_clock::time_point renewed_;  // last renewal that held
  std::string last_error_;  // of the last renewal that failed
  std::string lost_why_;    // set: lost, callback due
  bool lost_reported_ = false;
  std::function<void(const std::string&)> on_lost_;
  bool paused_ = false;
  std::function<void(bool, const std::string&)> on_pause_;
  bool calling_ = false;  // a callback runs (with mu_ released)
};

}  // namespace gandiva::runtime
