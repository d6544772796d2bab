#!/bin/sh
# The long chaos run: ChaosE2eTest.LongWithADaemonPairOnEtcd of
# tests/runtime/partition_e2e_test.cc, in a network namespace of its own
# (needs root, unshare, ip, nft and etcd). A daemon pair on etcd, two agents,
# GANDIVA_CHAOS_JOBS real PyTorch jobs (default 6) of GANDIVA_CHAOS_STEPS
# mini-batches (default 3,000) and GANDIVA_CHAOS_FAULTS faults of each kind
# (default 4): the leading daemon, an agent and a job's process SIGKILLed,
# agent-0 cut off for 1-4 s, etcd restarted after 0.5-3 s down, in an order
# and at moments drawn from GANDIVA_CHAOS_SEED (default 1). It prints the
# faults as they come, then per fault kind the runs they caused and the
# mini-batches redone, how soon the CLI's submission was answered after each
# etcd restart, and whether every job finished exactly once with the
# parameters of an undisturbed run.
#
#   bench/chaos_bench.sh [BUILD_DIR]      (default: build)
set -eu
build=${1:-build}
exec env GANDIVA_CHAOS_LONG=1 "$build/tests/gandiva_partition_e2e_test" \
  --gtest_filter=ChaosE2eTest.LongWithADaemonPairOnEtcd
