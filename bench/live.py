#!/usr/bin/env python3
"""The live-migration bench: how fast the walker moves a keyspace while clients run, and what
the move costs those clients' latency.

    python3 bench/live.py [--keys N] [--reps R] [--pace KEYS_PER_S] [--bystander | --walker-apart] [--proxy PATH]

A standalone redis-server (the source) is filled with N keys (default 200,000) named as
`redis-benchmark -r 100000` names its keys (`key:000000012345`, 64-byte values), so the
benchmark's clients touch keys that are still on the source. Per repetition, on a fresh
3-master cluster:
  1. no migration: `redis-benchmark -c 50 -P 1 -t set,get -r 100000` through a proxy, three
     times, its p50/p99 (the median run);
  2. migration: a proxy with `migration.source` (`--pace`: the walker's limit, none by
     default) and the same benchmark run again and again until the proxy's `/migration` says
     done: the walker's keys per second (keys moved over the time to done) and the
     benchmark's p50/p99 while it walked: the median run's, and the worst run's p99 (a longer
     walk has more runs, so its worst is drawn from more).
Each part also reports the share of the machine's CPU time that was busy.

`--walker-apart`: the benchmark runs through a proxy whose walker is paused (its commands
still move the keys they touch) while a second proxy walks: what the walk costs the clients
when it runs outside their proxy's thread.

`--bystander`: the control. The source's keys get names the benchmark never touches, and the
benchmark runs through the plain proxy while a second proxy migrates: its clients share the
machine (CPU, the masters) with the walk but never wait for a move. What their p99 loses is
what the walk's load costs on this host, whatever the protocol.
Prints one line per repetition and the medians. Standard library only (and bench/run.py)."""

import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402

KEYS = int(sys.argv[sys.argv.index("--keys") + 1]) if "--keys" in sys.argv else 200_000
REPS = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 3
# `--pace N`: the walker's `migration.max_keys_per_second` (0, the default: no limit).
PACE = int(sys.argv[sys.argv.index("--pace") + 1]) if "--pace" in sys.argv else 0
# `--bystander`: the benchmark's keys are not the migration's (see above).
BYSTANDER = "--bystander" in sys.argv
# `--walker-apart`: the clients' proxy migrates with its walker paused (its commands still move
# their keys); a second proxy walks.
APART = "--walker-apart" in sys.argv
PROXY = run.PROXY
BENCH_N = 20_000


def fill_source(port):
    """N keys as redis-benchmark names them, through redis-cli --pipe."""
    value = b"x" * run.VALUE_SIZE
    out = bytearray()
    for i in range(KEYS):
        key = (b"other:%012d" if BYSTANDER else b"key:%012d") % i
        out += b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value)
    subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=bytes(out), check=True,
                   capture_output=True)


def start_source(procs):
    port = run.free_port()
    procs.start(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", procs.dir], f"source-{port}")
    run.wait_port(port)
    return port


def start_proxy(procs, seeds, extra, name):
    port, admin = run.free_port(), run.free_port()
    procs.start([PROXY, "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
                 "--cluster", ",".join(seeds), *extra], name)
    run.wait_port(port, timeout=60)
    return port, admin


def status(admin):
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/migration", timeout=5) as reply:
        return json.load(reply)


def busy_since(ticks):
    """The share of every CPU's time that was busy since `ticks` (run.machine_ticks())."""
    idle, total = run.machine_ticks()
    return 1 - (idle - ticks[0]) / max(1, total - ticks[1])


def bench_pair(port):
    """SET then GET at -P 1: the worse p99 and the p50s."""
    rows = [run.benchmark(port, test, 1, BENCH_N) for test in ("set", "get")]
    return {"p50": max(r["p50"] for r in rows), "p99": max(r["p99"] for r in rows),
            "rps": min(r["rps"] for r in rows)}


def one_rep(rep):
    procs = run.Processes()
    try:
        source = start_source(procs)
        fill_source(source)
        ports = run.start_cluster(procs)
        seeds = [f"127.0.0.1:{p}" for p in ports]
        plain_port, _ = start_proxy(procs, seeds, [], f"plain-{rep}")
        ticks = run.machine_ticks()
        quiet_runs = [bench_pair(plain_port) for _ in range(3)]
        quiet = {k: statistics.median(r[k] for r in quiet_runs) for k in ("p50", "p99")}
        quiet_busy = busy_since(ticks)
        if not BYSTANDER:
            for p in ports:
                subprocess.run(["redis-cli", "-p", str(p), "flushall"], check=True,
                               capture_output=True)
        started = time.time()
        ticks = run.machine_ticks()
        live = ["--set", f"migration.source=redis://127.0.0.1:{source}",
                "--set", f"migration.max_keys_per_second={PACE}"]
        port, admin = start_proxy(procs, seeds, live, f"live-{rep}")
        if APART:
            port, _ = start_proxy(procs, seeds, live + ["--set", "migration.paused=true"],
                                  f"clients-{rep}")
        during = []
        done = threading.Event()

        def watch():
            while status(admin)["state"] != "done":
                time.sleep(0.05)
            done.set()
        threading.Thread(target=watch, daemon=True).start()
        bench_port = plain_port if BYSTANDER else port
        while not done.is_set():
            during.append(bench_pair(bench_port))
        took = time.time() - started
        walk_busy = busy_since(ticks)
        final = status(admin)
        moved = final["moved_by_walker"] + final["moved_on_touch"] + final["already_moved"]
        left = int(subprocess.run(["redis-cli", "-p", str(source), "dbsize"], capture_output=True,
                                  text=True).stdout.strip())
        assert left == 0, f"the source still holds {left} keys"
        row = {
            "keys_per_s": moved / took,
            "walker": final["moved_by_walker"], "touch": final["moved_on_touch"],
            "quiet_p99": quiet["p99"], "during_p99": statistics.median(d["p99"] for d in during),
            "worst_p99": max(d["p99"] for d in during),
            "quiet_p50": quiet["p50"], "during_p50": statistics.median(d["p50"] for d in during),
            "runs": len(during), "seconds": took,
            "quiet_busy": quiet_busy, "walk_busy": walk_busy,
        }
        print(f"rep {rep}: {row['keys_per_s']:,.0f} keys/s ({row['walker']:,} by the walker, "
              f"{row['touch']:,} on touch, {took:.1f} s); p99 {row['quiet_p99']:.2f} ms without, "
              f"{row['during_p99']:.2f} ms during (worst {row['worst_p99']:.2f}, {len(during)} runs), p50 {row['quiet_p50']:.2f} "
              f"/ {row['during_p50']:.2f} ms; CPUs busy {quiet_busy:.0%} without, {walk_busy:.0%} "
              f"during", flush=True)
        return row
    finally:
        procs.stop()


def main():
    if not os.path.exists(PROXY):
        raise SystemExit(f"{PROXY} is missing: cargo build --release (or --proxy PATH)")
    rows = [one_rep(rep) for rep in range(REPS)]
    rate = statistics.median(r["keys_per_s"] for r in rows)
    quiet = statistics.median(r["quiet_p99"] for r in rows)
    during = statistics.median(r["during_p99"] for r in rows)
    worst = statistics.median(r["worst_p99"] for r in rows)
    print(f"median: {rate:,.0f} keys/s; p99 {quiet:.2f} ms without a migration, {during:.2f} ms "
          f"during it ({during / quiet:.2f}x; worst run {worst:.2f} ms, {worst / quiet:.2f}x)")


if __name__ == "__main__":
    main()
