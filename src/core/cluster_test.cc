#include "core/cluster.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "core/policies/placement.h"

namespace gandiva::core {
namespace {

ServerSpec Spec(int gpus, int sockets = 1, int switches = 1) {
  ServerSpec s;
  s.name = "s";
  s.gpus = gpus;
  s.sockets = sockets;
  s.switches_per_socket = switches;
  return s;
}

std::vector<GpuId> G(std::initializer_list<int> ids) {
  std::vector<GpuId> out;
  for (int i : ids) out.push_back(GpuId(i));
  return out;
}

TEST(ClusterTest, TopologySplitsGpusEvenly) {
  Cluster c;
  c.AddServer(Spec(8, 2, 2));
  EXPECT_EQ(c.num_gpus(), 8);
  EXPECT_EQ(c.gpu(GpuId(3)).socket, 0);
  EXPECT_EQ(c.gpu(GpuId(4)).socket, 1);
  EXPECT_EQ(c.gpu(GpuId(1)).pcie_switch, 0);
  EXPECT_EQ(c.gpu(GpuId(2)).pcie_switch, 1);
  EXPECT_EQ(c.gpu(GpuId(7)).pcie_switch, 3);
  EXPECT_EQ(c.SpreadOf(G({0, 1})), Spread::kSameSwitch);
  EXPECT_EQ(c.SpreadOf(G({0, 2})), Spread::kAcrossSwitches);
  EXPECT_EQ(c.SpreadOf(G({0, 4})), Spread::kAcrossSockets);
  c.AddServer(Spec(8, 2, 2));
  EXPECT_EQ(c.SpreadOf(G({0, 8})), Spread::kAcrossServers);
}

// Laid out alike: the same servers in the same order, the same GPUs in
// the same order on each; how the servers' GPUs interleave in the list
// does not matter.
TEST(ClusterTest, SameLayoutComparesEachServersGpusInOrder) {
  Cluster c;
  c.AddServer(Spec(4));  // GPUs 0-3
  c.AddServer(Spec(4));  // GPUs 4-7
  EXPECT_TRUE(c.SameLayout(G({}), G({})));
  EXPECT_TRUE(c.SameLayout(G({0, 1}), G({0, 1})));
  EXPECT_FALSE(c.SameLayout(G({0, 1}), G({1, 0}))) << "other local order";
  EXPECT_FALSE(c.SameLayout(G({0, 1}), G({2, 3})));
  EXPECT_FALSE(c.SameLayout(G({0}), G({0, 1})));
  EXPECT_TRUE(c.SameLayout(G({0, 4, 1, 5}), G({0, 1, 4, 5})));
  EXPECT_FALSE(c.SameLayout(G({0, 1, 4, 5}), G({4, 5, 0, 1})))
      << "another server first (rank 0 elsewhere)";
  EXPECT_FALSE(c.SameLayout(G({0, 1, 4, 5}), G({0, 1, 5, 4})));
}

TEST(ClusterTest, ValidatesSpecs) {
  EXPECT_EQ(ValidateServerSpec(Spec(4, 2, 2)), "");
  EXPECT_NE(ValidateServerSpec(Spec(0)).find("'gpus'"), std::string::npos);
  EXPECT_NE(ValidateServerSpec(Spec(4, 3)).find("'sockets'"),
            std::string::npos);
  EXPECT_NE(ValidateServerSpec(Spec(4, 2, 3)).find("'switches_per_socket'"),
            std::string::npos);
}

TEST(ClusterTest, HeightCountsSuspendedDemandAndAffinityFollowsFirstJob) {
  Cluster c;
  const ServerId s = c.AddServer(Spec(4));
  EXPECT_EQ(c.server(s).height(), 0);
  EXPECT_EQ(c.server(s).affinity, 0);
  c.Place(JobId(1), 2, G({0, 1}));
  EXPECT_EQ(c.server(s).affinity, 2);
  EXPECT_EQ(c.server(s).height(), 1);
  EXPECT_EQ(c.server(s).free_gpus, 2);
  c.Place(JobId(2), 2, G({2, 3}));
  c.Place(JobId(3), 2, G({0, 1}));  // time-sliced with job 1
  EXPECT_EQ(c.server(s).demand, 6);
  EXPECT_EQ(c.server(s).height(), 2);  // ceil(6 / 4)
  EXPECT_EQ(c.height(), 2);
  EXPECT_TRUE(c.overloaded());
  EXPECT_EQ(c.free_gpus(), 0);
  c.Unplace(JobId(3), G({0, 1}));
  EXPECT_EQ(c.height(), 1);
  c.Unplace(JobId(1), G({0, 1}));
  c.Unplace(JobId(2), G({2, 3}));
  EXPECT_EQ(c.server(s).affinity, 0);
  EXPECT_EQ(c.free_gpus(), 4);
  EXPECT_EQ(c.height(), 0);
}

TEST(ClusterTest, IndexesOrderServers) {
  Cluster c;
  for (int i = 0; i < 3; ++i) c.AddServer(Spec(4));
  c.Place(JobId(1), 1, G({0}));  // server 0: affinity 1, demand 1
  c.Place(JobId(2), 1, G({4}));  // server 1: affinity 1, demand 1
  c.Place(JobId(3), 1, G({5}));  // server 1: demand 2
  std::vector<int> order;
  c.ForEachWithAffinity(1, [&](const Server& s) {
    order.push_back(s.id.value);
    return false;
  });
  EXPECT_EQ(order, (std::vector<int>{0, 1}));  // least demand first
  order.clear();
  c.ForEachWithFree(3, [&](const Server& s) {
    order.push_back(s.id.value);
    return false;
  });
  EXPECT_EQ(order, (std::vector<int>{0, 2}));  // fewest free first
  c.SetUp(ServerId(2), false);
  EXPECT_EQ(c.up_gpus(), 8);
  order.clear();
  c.ForEachWithAffinity(0, [&](const Server& s) {
    order.push_back(s.id.value);
    return false;
  });
  EXPECT_TRUE(order.empty());
}

// A cordoned server keeps its jobs but takes no new ones: it leaves the
// placement views and the free count, whatever happens to its jobs
// meanwhile, and comes back as it is when uncordoned.
TEST(ClusterTest, ACordonedServerLeavesThePlacementViews) {
  Cluster c;
  for (int i = 0; i < 2; ++i) c.AddServer(Spec(4));
  c.Place(JobId(1), 2, G({0, 1}));
  EXPECT_EQ(c.free_gpus(), 6);
  c.SetCordoned(ServerId(0), true);
  EXPECT_TRUE(c.server(ServerId(0)).cordoned);
  EXPECT_EQ(c.free_gpus(), 4);  // server 1's
  EXPECT_EQ(c.up_gpus(), 8);    // still up, its job still runs
  EXPECT_EQ(c.height(), 1);
  auto visited = [&](auto each) {
    std::vector<int> order;
    each([&](const Server& s) {
      order.push_back(s.id.value);
      return false;
    });
    return order;
  };
  const std::vector<int> only1 = {1};
  EXPECT_EQ(visited([&](auto f) { c.ForEachWithFree(1, f); }), only1);
  EXPECT_EQ(visited([&](auto f) { c.ForEachByDemand(f); }), only1);
  EXPECT_EQ(visited([&](auto f) { c.ForEachWithFreeDescending(f); }), only1);
  EXPECT_TRUE(visited([&](auto f) { c.ForEachWithAffinity(2, f); }).empty());
  EXPECT_FALSE(FreeGpusOn(c, c.server(ServerId(0)), 1).has_value());
  // Its job ends while it is cordoned: still nothing free there for others.
  c.Unplace(JobId(1), G({0, 1}));
  EXPECT_EQ(c.free_gpus(), 4);
  c.SetCordoned(ServerId(0), false);
  EXPECT_EQ(c.free_gpus(), 8);
  EXPECT_EQ(visited([&](auto f) { c.ForEachWithFree(4, f); }),
            (std::vector<int>{0, 1}));
  // Down and cordoned: free GPUs counted once it is both up and open.
  c.SetCordoned(ServerId(1), true);
  c.SetUp(ServerId(1), false);
  c.SetCordoned(ServerId(1), false);
  EXPECT_EQ(c.free_gpus(), 4);
  c.SetUp(ServerId(1), true);
  EXPECT_EQ(c.free_gpus(), 8);
}

// The indexed views visit exactly the servers a scan of every server in
// (demand, id) order would accept, in that order, after any sequence of
// placements, removals, losses and cordons, on servers of several sizes.
TEST(ClusterTest, IndexedViewsAgreeWithAScanAfterRandomChanges) {
  Cluster c;
  const int sizes[] = {2, 4, 8};
  for (int i = 0; i < 24; ++i) c.AddServer(Spec(sizes[i % 3]));
  std::mt19937 rng(7);
  auto pick = [&](int n) {
    return std::uniform_int_distribution<int>(0, n - 1)(rng);
  };
  // job -> its GPUs
  std::map<int, std::vector<GpuId>> placed;
  int next_job = 0;
  auto visited = [](auto each) {
    std::vector<int> order;
    each([&](const Server& s) {
      order.push_back(s.id.value);
      return false;
    });
    return order;
  };
  // Every open server `accept` takes, by (demand, id).
  auto scan = [&](auto accept) {
    std::vector<std::pair<int, int>> keyed;
    for (const Server& s : c.servers()) {
      if (s.up && !s.cordoned && accept(s)) {
        keyed.push_back({s.demand, s.id.value});
      }
    }
    std::sort(keyed.begin(), keyed.end());
    std::vector<int> order;
    for (const auto& k : keyed) order.push_back(k.second);
    return order;
  };
  for (int step = 0; step < 3000; ++step) {
    const int op = pick(10);
    if (op < 5) {
      // Place a job of 1-8 GPUs on some GPUs of one server (shared or not).
      const Server& s = c.server(ServerId(pick(c.num_servers())));
      if (!s.up) continue;
      const int d = std::min(s.num_gpus(), 1 << pick(4));
      const int base = pick(s.num_gpus() / d) * d;
      std::vector<GpuId> gpus;
      for (int i = 0; i < d; ++i) {
        gpus.push_back(GpuId(s.first_gpu.value + base + i));
      }
      c.Place(JobId(next_job), d, gpus);
      placed[next_job++] = gpus;
    } else if (op < 8 && !placed.empty()) {
      auto it = placed.begin();
      std::advance(it, pick(static_cast<int>(placed.size())));
      c.Unplace(JobId(it->first), it->second);
      placed.erase(it);
    } else if (op == 8) {
      const ServerId id(pick(c.num_servers()));
      // Only an empty server goes down here (its jobs would be requeued).
      bool empty = true;
      for (GpuId g : c.GpusOf(id)) empty = empty && c.gpu(g).jobs.empty();
      if (empty) c.SetUp(id, !c.server(id).up);
    } else {
      const ServerId id(pick(c.num_servers()));
      c.SetCordoned(id, !c.server(id).cordoned);
    }
    for (int a = 0; a <= 8; a = a == 0 ? 1 : a * 2) {
      EXPECT_EQ(visited([&](auto f) { c.ForEachWithAffinity(a, f); }),
                scan([&](const Server& s) { return s.affinity == a; }));
      for (int k = 0; k <= 8; ++k) {
        EXPECT_EQ(
            visited([&](auto f) { c.ForEachWithAffinityAndFree(a, k, f); }),
            scan([&](const Server& s) {
              return s.affinity == a && s.free_gpus >= k;
            }))
            << "affinity " << a << ", " << k << " free, step " << step;
      }
      for (int height : {0, 1, 2, 4}) {
        for (int more : {-1, 1, 2, 4}) {
          for (int min_gpus : {0, 2, 4, 8}) {
            auto room = [&](const Server& s) {
              const int m = more < 0 ? s.num_gpus() : more;
              return s.num_gpus() >= min_gpus &&
                     (height <= 0 || s.demand + m <= height * s.num_gpus());
            };
            EXPECT_EQ(visited([&](auto f) {
                        c.ForEachWithRoom(a, min_gpus, height, more, f);
                      }),
                      scan([&](const Server& s) {
                        return s.affinity == a && room(s);
                      }));
            if (a == 0) {
              EXPECT_EQ(visited([&](auto f) {
                          c.ForEachWithRoom(Cluster::kAnyAffinity, min_gpus,
                                            height, more, f);
                        }),
                        scan(room));
            }
          }
        }
      }
    }
    EXPECT_EQ(visited([&](auto f) { c.ForEachByDemand(f); }),
              scan([](const Server&) { return true; }));
    if (::testing::Test::HasFailure()) return;
  }
  // An Avoiding scope leaves its servers out, the order otherwise kept.
  std::vector<ServerId> avoid = {ServerId(1), ServerId(5)};
  const std::vector<int> all = visited(
      [&](auto f) { c.ForEachWithRoom(Cluster::kAnyAffinity, 0, 0, 0, f); });
  std::vector<int> rest;
  for (int id : all) {
    if (id != 1 && id != 5) rest.push_back(id);
  }
  Cluster::Avoiding scope(c, avoid);
  EXPECT_EQ(visited([&](auto f) { c.ForEachByDemand(f); }), rest);
}

TEST(PlacementTest, PrefersAlignedFreeBlocksAndSameSocket) {
  Cluster c;
  c.AddServer(Spec(8, 2, 2));
  c.Place(JobId(1), 1, G({0}));
  c.Place(JobId(2), 1, G({5}));
  // A 2-GPU job: the first aligned free pair is {2,3}.
  auto two = FreeGpusOn(c, c.server(ServerId(0)), 2);
  ASSERT_TRUE(two);
  EXPECT_EQ(*two, G({2, 3}));
  // A 4-GPU job: no aligned block is free; both sockets have 3 free, so the
  // first socket's three, then the other socket's fullest switch.
  auto four = FreeGpusOn(c, c.server(ServerId(0)), 4);
  ASSERT_TRUE(four);
  EXPECT_EQ(*four, G({1, 2, 3, 6}));
  EXPECT_FALSE(FreeGpusOn(c, c.server(ServerId(0)), 7));
}

TEST(PlacementTest, LeastLoadedBlockAndGather) {
  Cluster c;
  c.AddServer(Spec(4));
  c.AddServer(Spec(4));
  c.Place(JobId(1), 2, G({0, 1}));
  c.Place(JobId(2), 2, G({2, 3}));
  c.Place(JobId(3), 2, G({0, 1}));
  EXPECT_EQ(LeastLoadedBlock(c, c.server(ServerId(0)), 2), G({2, 3}));
  c.Place(JobId(4), 1, G({4}));
  auto gathered = GatherFreeGpus(c, 3);
  ASSERT_TRUE(gathered);
  EXPECT_EQ(*gathered, G({5, 6, 7}));
  EXPECT_FALSE(GatherFreeGpus(c, 4));
}

}  // namespace
}  // namespace gandiva::core
