#!/usr/bin/env bash
# Captures the raw RESP2 reply of `COMMAND` from the installed redis-server into
# src/command/redis7_command.resp, the table `CommandTable::builtin()` ships with.
#
# Usage: scripts/capture-command-table.sh [port]   (default: first free port from 17400)
# Needs redis-server (7.0.x) and bash's /dev/tcp. The server only listens on 127.0.0.1
# and is stopped before the script exits.
set -euo pipefail

cd "$(dirname "$0")/.."
out=src/command/redis7_command.resp

port_is_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

port=${1:-}
if [[ -z $port ]]; then
    for candidate in $(seq 17400 17499); do
        if port_is_free "$candidate"; then port=$candidate; break; fi
    done
fi
[[ -n $port ]] || { echo "no free port" >&2; exit 1; }

redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no --logfile /dev/null &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true' EXIT

for _ in $(seq 50); do
    port_is_free "$port" || break
    sleep 0.1
done

# COMMAND then QUIT: the server answers +OK to QUIT and closes the socket, so reading to
# EOF gets the whole reply without knowing its length.
tmp=$(mktemp)
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf '*1\r\n$7\r\nCOMMAND\r\n*1\r\n$4\r\nQUIT\r\n' >&3
cat <&3 >"$tmp"
exec 3<&-

tail -c 5 "$tmp" | grep -q '^+OK' || { echo "unexpected reply tail" >&2; rm -f "$tmp"; exit 1; }
head -c -5 "$tmp" >"$out"
rm -f "$tmp"
echo "wrote $out ($(wc -c <"$out") bytes) from $(redis-server --version | cut -d' ' -f3)"
