#!/usr/bin/env bash
# Starts a local 3-master Redis Cluster and slotbridge in front of it, in the foreground.
#
#   scripts/dev-cluster.sh [extra slotbridge flags...]
#
# Installs redis-server and redis-tools with apt-get when they are missing (through sudo when
# not root), builds the proxy with `cargo build --release`, starts the cluster nodes in a temp
# directory, and runs the proxy until Ctrl-C. On exit the nodes are stopped and the directory
# removed. Nothing is persisted: every run starts with an empty cluster.
#
# Environment (defaults in brackets):
#   DEV_CLUSTER_PORTS  client ports of the three masters ["7001 7002 7003"]; each also needs
#                      its cluster bus port, port + 10000
#   DEV_PROXY_LISTEN   where clients connect [127.0.0.1:6380]
#   DEV_ADMIN_LISTEN   metrics and health endpoints [127.0.0.1:9121]
set -euo pipefail

read -r -a cluster_ports <<< "${DEV_CLUSTER_PORTS:-7001 7002 7003}"
proxy_listen="${DEV_PROXY_LISTEN:-127.0.0.1:6380}"
admin_listen="${DEV_ADMIN_LISTEN:-127.0.0.1:9121}"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work_dir=""
node_pids=()

log() { printf '[dev-cluster] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

install_redis() {
  if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
    return
  fi
  command -v apt-get >/dev/null 2>&1 ||
    die "redis-server/redis-cli are missing and apt-get is not available; install Redis 7 yourself"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
  fi
  log "installing redis-server and redis-tools with apt-get"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server redis-tools
}

stop_cluster() {
  local pid
  for pid in "${node_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${node_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if [ -n "$work_dir" ]; then
    rm -rf "$work_dir"
  fi
  if [ "${#node_pids[@]}" -gt 0 ]; then
    log "cluster stopped"
  fi
}

# Waits up to about 30 s for `redis-cli -p PORT ARGS...` to print a line matching PATTERN.
wait_for_reply() {
  local port="$1" pattern="$2"
  shift 2
  local attempt
  for attempt in $(seq 1 300); do
    if redis-cli -p "$port" "$@" 2>/dev/null | grep -q "$pattern"; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

start_cluster() {
  local port
  [ "${#cluster_ports[@]}" -eq 3 ] || die "DEV_CLUSTER_PORTS must list exactly three ports"
  for port in "${cluster_ports[@]}"; do
    if redis-cli -p "$port" ping >/dev/null 2>&1; then
      die "something already answers on port $port; stop it or set DEV_CLUSTER_PORTS"
    fi
  done
  work_dir="$(mktemp -d "${TMPDIR:-/tmp}/slotbridge-dev.XXXXXX")"
  for port in "${cluster_ports[@]}"; do
    mkdir -p "$work_dir/$port"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$work_dir/$port" \
      --logfile "$work_dir/$port/redis.log" --daemonize no \
      --save '' --appendonly no \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 &
    node_pids+=("$!")
  done
  for port in "${cluster_ports[@]}"; do
    wait_for_reply "$port" PONG ping ||
      die "redis-server on port $port did not start; log: $work_dir/$port/redis.log"
  done
  local addrs=()
  for port in "${cluster_ports[@]}"; do
    addrs+=("127.0.0.1:$port")
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$work_dir/create.log" 2>&1 ||
    die "redis-cli --cluster create failed: $(cat "$work_dir/create.log")"
  for port in "${cluster_ports[@]}"; do
    wait_for_reply "$port" 'cluster_state:ok' cluster info ||
      die "the node on port $port never reported cluster_state:ok"
  done
  log "cluster up: ${addrs[*]} (data in $work_dir)"
}

main() {
  trap stop_cluster EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  install_redis
  command -v cargo >/dev/null 2>&1 || die "cargo is missing; install Rust from https://rustup.rs"

  # Built before the cluster starts, so a failed build leaves nothing running.
  log "building slotbridge (release)"
  (cd "$repo_root" && cargo build --release)

  start_cluster

  local seeds
  seeds="$(printf '127.0.0.1:%s,' "${cluster_ports[@]}")"
  seeds="${seeds%,}"
  local proxy_port="${proxy_listen##*:}"
  cat >&2 <<INFO

  slotbridge is starting on $proxy_listen, in front of $seeds
    connect:  redis-cli -p $proxy_port
    metrics:  http://$admin_listen/metrics
  Ctrl-C stops the proxy and the cluster.

INFO
  # Not exec: the EXIT trap must still run to stop the cluster.
  "$repo_root/target/release/slotbridge" \
    --listen "$proxy_listen" \
    --cluster "$seeds" \
    --admin-listen "$admin_listen" \
    "$@"
}

main "$@"
