#!/usr/bin/env bash
# Throughput and latency of slotbridge against a direct cluster-aware client, same run.
#
#   bench/run.sh [--quick] [--reps N] [--syscalls] [--instructions] [--predixy PATH]
#                [--baseline PATH] [--fleet [--clients N,N...]] [--cache] [--tls] [--cross-slot]
#                [--floor] [--keep DIR]
#
# Builds the release proxy, starts a 3-master cluster on free loopback ports, and runs
# redis-benchmark interleaved against (a) the cluster directly (--cluster), (b) the proxy,
# (c) the proxy with config/botmesh-cluster-v1.yaml loaded, on keys outside and inside its
# prefix. Prints a markdown table of medians over 3 repetitions, ratios to (a), requests per
# proxy CPU-second (from /proc) and RSS. Direct runs get 5 times the requests: a `--cluster`
# run ends on redis-benchmark's 250 ms timer, which rounds its elapsed time up, and only a
# long run makes that small (the output states the bound). Two more proxies run as targets:
# one with `admin.metrics: false` (the cost of metrics) and one with 2 worker threads (the
# default is 1). `--predixy PATH` adds a predixy binary (built separately) as one more target,
# in front of the same cluster; `--baseline PATH` another slotbridge binary (an earlier
# build, for an A/B of a change in one series). `--syscalls` instead counts the proxy's syscalls per request
# (`perf stat` on the syscall tracepoints; strace where perf is missing); `--instructions`
# the proxy's user-space instructions per request under valgrind's callgrind (a count that
# repeats from run to run, unlike time on shared cores; with `--baseline`, the earlier build's
# counts too), plain, with the layout loaded, and at -P 1 with an idle `timeout` set, and
# what taking a client in costs (1,000 clients connect, send one GET each and close). `--tls` instead measures clients over TLS against plain clients (two proxies in
# front of one cluster, runs interleaved) at -P 1 and -P 16: the cost of client-side TLS.
# A second table splits the CPU per request between the servers, redis-benchmark
# and the proxy (with the proxy's kernel time apart), and gives the size of the batches the
# servers read (commands per read, from INFO stats) and how often they went to sleep for
# want of input (voluntary context switches, from /proc). Stops everything it started.
# `--fleet` instead measures client counts of a bot fleet (1, 50, 1,000, 5,000 and, where the
# file-descriptor limit allows, 10,000 clients at -P 1; 1,000 at -P 16; a connect burst of
# 5,000 clients sending 3 requests each) against direct and every target, with p50/p99, CPU
# per request and peak RSS per run, and the RSS an idle connection costs at 1,000 / 5,000 /
# 10,000 held connections; a second table splits each
# request's CPU between the servers, redis-benchmark and the target (user and kernel apart)
# and gives the ratio to predixy that CPU allows; a third the share of requests each proxy
# answered within 0.1 to 10 ms, from its own histogram (predixy's LatencyMonitor), the
# proxy's part of the latency apart from redis-benchmark's. `--clients 1000,5000` runs only the cases
# of those client counts (and no idle-connection table). `--cache` instead counts, under
# valgrind's cachegrind, the instructions and the first- and last-level cache misses per GET at
# 50 and 1,000 clients (a simulated 1 MiB last level): the memory each client's request
# touches, which sets what a request costs once there are more clients than a core's cache
# holds (with `--predixy` and `--baseline`, theirs too; each build also with an idle `timeout`). `--cross-slot` instead measures
# emulated cross-slot reads (SUNION, SINTER, ZUNION WITHSCORES, PFCOUNT of two keys on two
# masters) against the same commands on two keys of one slot, same data, at -c 50 and -c 1;
# with `--instructions`, the proxy's instructions per request of each (and with `--baseline`,
# the earlier build's). `--keep DIR` copies the callgrind and cachegrind output files of
# `--instructions` and `--cache` into DIR, for a comparison function by function. `--floor`
# (with `--fleet`) adds the floor forwarder of bench/floor.rs as a target: one epoll loop
# that forwards each request's bytes to its master and each reply back and does nothing
# else, so the series shows what a proxy whose own code costs next to nothing reaches here.
# Loopback only; every run is bounded by its request count.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v redis-benchmark >/dev/null || { echo "redis-benchmark missing: apt-get install -y redis-tools" >&2; exit 1; }
cargo build --release --quiet
if [[ " $* " == *" --floor "* ]]; then
  cargo build --release --quiet --example floor
fi
exec python3 bench/run.py "$@"
