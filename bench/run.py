#!/usr/bin/env python3
"""The benchmark driver behind bench/run.sh (see its header). Standard library only."""

import csv
import io
import math
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

QUICK = "--quick" in sys.argv
REPS = 1 if QUICK else 3
if "--reps" in sys.argv:
    REPS = int(sys.argv[sys.argv.index("--reps") + 1])
CLIENTS = 50
KEYSPACE = 100000
VALUE_SIZE = 64
N_P1 = 20000 if QUICK else 200000
N_P16 = 100000 if QUICK else 1500000
# `redis-benchmark --cluster` runs one thread per master, and a threaded run ends only on its
# 250 ms progress timer, so the elapsed time it reports is rounded up to the next multiple of
# 250 ms: a 1 s run may be reported as 1.25 s (20 % low). Direct runs are therefore given this
# many times the requests (about 8 s each here), and the table states the remaining bound.
DIRECT_SCALE = 1 if QUICK else 5
DIRECT_TICK_S = 0.25
PROXY = os.path.abspath("target/release/slotbridge")
# `--predixy PATH`: a predixy binary built elsewhere, measured as one more target.
PREDIXY = sys.argv[sys.argv.index("--predixy") + 1] if "--predixy" in sys.argv else None
# `--baseline PATH`: another slotbridge binary (an earlier build), measured as one more target
# in the same series: an A/B of a change on the same host at the same pace.
BASELINE = sys.argv[sys.argv.index("--baseline") + 1] if "--baseline" in sys.argv else None
# `--floor` (with `--fleet`): the floor forwarder of bench/floor.rs (built by run.sh as the
# release example `floor`) as one more target: what a proxy whose own code costs next to
# nothing reaches on this host, in the same series.
FLOOR = os.path.abspath("target/release/examples/floor") if "--floor" in sys.argv else None
# `--proxy PATH`: measure this slotbridge binary instead of the release build (a debug build
# to check that a series runs, never for figures).
if "--proxy" in sys.argv:
    PROXY = os.path.abspath(sys.argv[sys.argv.index("--proxy") + 1])
# `--keep DIR`: the profilers' output files (callgrind and cachegrind, of `--instructions` and
# `--cache`) are copied into DIR before the run's temporary directory goes, for a comparison
# function by function (`callgrind_annotate`, `cg_annotate`).
KEEP = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
# `--requests N`: every run sends N requests (a quick check of a series, not a measurement).
if "--requests" in sys.argv:
    N_P1 = N_P16 = int(sys.argv[sys.argv.index("--requests") + 1])
LAYOUT = "config/botmesh-cluster-v1.yaml"
TICK = os.sysconf("SC_CLK_TCK")


def free_port(cluster_bus=False):
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not cluster_bus or port + 10000 > 65535:
            if not cluster_bus:
                return port
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"nothing answered PING on port {port}")


class Processes:
    def __init__(self):
        self.procs = []
        self.dir = tempfile.mkdtemp(prefix="slotbridge-bench-")

    def start(self, args, name):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        self.procs.append(proc)
        return proc

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if KEEP:
            os.makedirs(KEEP, exist_ok=True)
            for name in os.listdir(self.dir):
                if name.startswith(("callgrind-", "cachegrind-")) and not name.endswith(".log"):
                    shutil.copy2(os.path.join(self.dir, name), KEEP)
        shutil.rmtree(self.dir, ignore_errors=True)


def start_cluster(procs):
    ports = [free_port(cluster_bus=True) for _ in range(3)]
    for port in ports:
        procs.start(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                     "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                     "--save", "", "--appendonly", "no", "--dir", procs.dir], f"redis-{port}")
    for port in ports:
        wait_port(port)
    subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                    "--cluster-yes"], check=True, capture_output=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        states = [subprocess.run(["redis-cli", "-p", str(p), "cluster", "info"],
                                 capture_output=True, text=True).stdout for p in ports]
        if all("cluster_state:ok" in s for s in states):
            return ports
        time.sleep(0.2)
    raise SystemExit("cluster did not become ok")


def start_proxy(procs, seeds, extra, name, program=PROXY):
    port, admin = free_port(), free_port()
    proc = procs.start([program, "--listen", f"127.0.0.1:{port}", "--admin-listen",
                        f"127.0.0.1:{admin}", "--cluster", ",".join(seeds), *extra], name)
    proc.admin_port = admin
    wait_port(port)
    return proc, port


def start_predixy(procs, seeds, wrap=(), latency=False):
    """predixy in front of the same cluster, one worker thread like the proxy's default;
    `wrap`: a command that runs it (valgrind); `latency`: with a latency monitor of every
    command over the proxy's own histogram buckets (see `in_proxy_counts`)."""
    port = free_port()
    servers = "\n".join(f"        + {seed}" for seed in seeds)
    config = os.path.join(procs.dir, "predixy.conf")
    with open(config, "w") as f:
        f.write(f"""Name bench
Bind 127.0.0.1:{port}
WorkerThreads 1
ClientTimeout 300
LogVerbSample 0
LogDebugSample 0
LogInfoSample 0
LogNoticeSample 0
LogWarnSample 1
LogErrorSample 1
Authority {{
    Auth {{
        Mode write
    }}
}}
ClusterServerPool {{
    MasterReadPriority 100
    Servers {{
{servers}
    }}
}}
""")
        if latency:
            spans = "".join(f"        + {bound}\n" for bound in IN_PROXY_BUCKETS_US)
            f.write(f"LatencyMonitor all {{\n    Commands {{\n        + all\n    }}\n"
                    f"    TimeSpan {{\n{spans}    }}\n}}\n")
    proc = procs.start([*wrap, PREDIXY, config], "predixy")
    wait_port(port, timeout=120 if wrap else 30)
    return proc, port


def cpu_seconds(pid):
    return sum(cpu_split(pid))


def cpu_split(pid):
    """(user, kernel) CPU seconds of `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def server_commands_and_reads(ports):
    """Commands the servers processed and socket reads they made so far (`INFO stats`): their
    ratio is the size of the batches they read, which sets what a command costs them."""
    commands = reads = 0
    for port in ports:
        out = subprocess.run(["redis-cli", "-p", str(port), "info", "stats"],
                             capture_output=True, text=True, timeout=30).stdout
        stats = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        commands += int(stats["total_commands_processed"])
        reads += int(stats["total_reads_processed"])
    return commands, reads


def sleeps(pid):
    """Times the main thread of `pid` went to sleep so far (`voluntary_ctxt_switches`). For
    a server, each is a pass of its event loop that found nothing more to read; waking it
    again costs a context switch and an `epoll_wait`, however few commands the next read
    brings."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise SystemExit(f"no voluntary_ctxt_switches in /proc/{pid}/status")


def children_cpu_seconds():
    """CPU seconds of the children waited for so far (each redis-benchmark run)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_ticks():
    """(idle, total) clock ticks of all CPUs so far, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return values[3] + values[4], sum(values)


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def benchmark(port, test, pipeline, n, cluster=False, clients=CLIENTS, command=None, tls=None):
    args = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients),
            "-n", str(n), "-r", str(KEYSPACE), "-d", str(VALUE_SIZE), "-P", str(pipeline),
            "--csv", "--precision", "3"]
    if tls:
        args += ["--tls", "--cacert", tls]
    if cluster:
        args.append("--cluster")
    if command:
        args += command
    else:
        args += ["-t", test]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    rows = [r for r in csv.reader(io.StringIO(out.stdout)) if r and r[0] != "test"]
    if not rows:
        raise SystemExit(f"redis-benchmark gave no result: {args}\n{out.stdout}\n{out.stderr}")
    row = rows[-1]
    return {"rps": float(row[1]), "p50": float(row[4]), "p99": float(row[6])}


def main():
    procs = Processes()
    try:
        ports = start_cluster(procs)
        servers = [proc.pid for proc in procs.procs]
        seeds = [f"127.0.0.1:{p}" for p in ports]
        plain, plain_port = start_proxy(procs, seeds, [], "proxy")
        idle_rss = rss_mb(plain.pid)
        layout_args = ["--layout", os.path.abspath(LAYOUT), "--prefix", "mybot"]
        layout, layout_port = start_proxy(procs, seeds, layout_args, "proxy-layout")
        # What recording Prometheus metrics costs: the same proxy with `admin.metrics: false`.
        no_metrics_config = os.path.join(procs.dir, "no-metrics.yaml")
        with open(no_metrics_config, "w") as f:
            f.write("admin:\n  metrics: false\n")
        no_metrics, no_metrics_port = start_proxy(
            procs, seeds, ["--config", no_metrics_config], "proxy-no-metrics")
        # The thread-count choice: the default (1 worker) against 2 workers.
        two_threads, two_threads_port = start_proxy(
            procs, seeds, ["--threads", "2"], "proxy-2-threads")
        value = "x" * VALUE_SIZE
        inside_set = ["SET", "mybot:conv:__rand_int__", value]
        inside_get = ["GET", "mybot:conv:__rand_int__"]
        inside_chat = ["SET", "mybot:chat:__rand_int__", value]
        inside_lock = ["SET", "mybot:lock:__rand_int__", value]
        cases = [
            ("SET -P 1", "set", 1, N_P1, None),
            ("GET -P 1", "get", 1, N_P1, None),
            ("SET -P 16", "set", 16, N_P16, None),
            ("GET -P 16", "get", 16, N_P16, None),
            ("MSET 10 keys", "mset", 1, N_P1 // 2, None),
            ("PING_INLINE", "ping_inline", 1, N_P1, None),
        ]
        targets = [
            ("direct --cluster", ports[0], True, None),
            ("proxy", plain_port, False, plain),
            ("proxy + layout, keys outside prefix", layout_port, False, layout),
            ("proxy, metrics off", no_metrics_port, False, no_metrics),
            ("proxy, 2 threads", two_threads_port, False, two_threads),
        ]
        if BASELINE:
            baseline, baseline_port = start_proxy(
                procs, seeds, [], "proxy-baseline", os.path.abspath(BASELINE))
            targets.append(("proxy, baseline build", baseline_port, False, baseline))
        if PREDIXY:
            predixy, predixy_port = start_predixy(procs, seeds)
            targets.append((PEER_LABEL, predixy_port, False, predixy))
        results = {}
        for rep in range(REPS):
            for label, test, pipeline, n, _ in cases:
                for target, port, cluster, proc in targets:
                    runs = n * DIRECT_SCALE if cluster else n
                    before = cpu_split(proc.pid) if proc else (0, 0)
                    servers_before = sum(cpu_seconds(pid) for pid in servers)
                    sleeps_before = sum(sleeps(pid) for pid in servers)
                    commands_before, reads_before = server_commands_and_reads(ports)
                    client_before = children_cpu_seconds()
                    idle_before, total_before = machine_ticks()
                    started = time.monotonic()
                    r = benchmark(port, test, pipeline, runs, cluster=cluster)
                    wall = time.monotonic() - started
                    idle_after, total_after = machine_ticks()
                    after = cpu_split(proc.pid) if proc else (0, 0)
                    r["cpu"] = sum(after) - sum(before)
                    r["cpu_kernel"] = after[1] - before[1]
                    r["servers_cpu"] = sum(cpu_seconds(pid) for pid in servers) - servers_before
                    r["server_sleeps"] = sum(sleeps(pid) for pid in servers) - sleeps_before
                    commands, reads = server_commands_and_reads(ports)
                    r["server_commands"] = commands - commands_before
                    r["server_reads"] = reads - reads_before
                    r["client_cpu"] = children_cpu_seconds() - client_before
                    r["n"] = runs
                    # Where the CPU went: the proxy's share of one core, and how much of the
                    # whole machine stayed idle (a funnel that waits shows both below 100 %).
                    r["busy"] = r["cpu"] / wall
                    r["idle"] = (idle_after - idle_before) / max(1, total_after - total_before)
                    results.setdefault((label, target), []).append(r)
            # Keys inside the layout prefix: unchanged names, renamed ones, and a write to an
            # index-backed family (which runs in the upkeep script).
            for label, command, pipeline, n in [
                    ("SET inside prefix (unchanged name) -P 1", inside_set, 1, N_P1),
                    ("GET inside prefix (unchanged name) -P 1", inside_get, 1, N_P1),
                    ("SET inside prefix (renamed lock) -P 1", inside_lock, 1, N_P1),
                    ("SET inside prefix (indexed chat record) -P 1", inside_chat, 1, N_P1),
                    ("SET inside prefix (unchanged name) -P 16", inside_set, 16, N_P16),
                    ("SET inside prefix (renamed lock) -P 16", inside_lock, 16, N_P16),
                    ("SET inside prefix (indexed chat record) -P 16", inside_chat, 16, N_P16 // 4)]:
                before = cpu_seconds(layout.pid)
                r = benchmark(layout_port, None, pipeline, n, command=command)
                r["cpu"] = cpu_seconds(layout.pid) - before
                r["n"] = n
                results.setdefault((label, "proxy + layout"), []).append(r)
            # Latency with one client, per hop.
            for target, port, cluster, proc in targets[:2]:
                runs = N_P1 // 8 * (DIRECT_SCALE if cluster else 1)
                r = benchmark(port, "get", 1, runs, cluster=cluster, clients=1)
                r["cpu"], r["n"] = 0, runs
                results.setdefault(("GET 1 client (latency)", target), []).append(r)
        print_table(results, targets)
        print()
        print_cpu_breakdown(results, targets)
        print()
        latency = [results[("GET 1 client (latency)", t[0])] for t in targets[:2]]
        added = {q: median(latency[1], q) - median(latency[0], q) for q in ("p50", "p99")}
        # Signed: at p99 the hop can measure below direct in a short or noisy series.
        print(f"Added by the proxy hop (GET, 1 client): p50 {added['p50'] * 1000:+.0f} us, "
              f"p99 {added['p99'] * 1000:+.0f} us")
        print()
        # The latency series is bounded apart: its direct run is short on a fast host, and
        # only its one-client ratio rests on it.
        def rounding_bound(labels):
            rows = [results[(label, targets[0][0])] for label in labels]
            shortest = min(median(r, "n") / median(r, "rps") for r in rows)
            # A reported elapsed time E stands for a true one above E - tick.
            bound = (f"at most {DIRECT_TICK_S / (shortest - DIRECT_TICK_S) * 100:.0f} %"
                     if shortest > DIRECT_TICK_S else "without bound (runs too short)")
            return shortest, bound
        shortest, bound = rounding_bound([case[0] for case in cases])
        latency_shortest, latency_bound = rounding_bound(["GET 1 client (latency)"])
        print(f"Direct runs: the shortest median lasted {shortest:.2f} s as reported, so "
              f"redis-benchmark's {DIRECT_TICK_S * 1000:.0f} ms end-of-run rounding understates a "
              f"direct rate (and overstates the ratios to it) by {bound}; the 1-client latency "
              f"series' direct run {latency_shortest:.2f} s, {latency_bound}")
        print()
        print(f"Proxy RSS: idle {idle_rss:.1f} MB, after the runs {rss_mb(plain.pid):.1f} MB; "
              f"with 1000 idle clients {idle_clients_rss(plain_port, plain.pid):.1f} MB")
    finally:
        procs.stop()


# Syscalls counted through kernel tracepoints (`perf stat`), which barely slow the proxy;
# `strace` stops it at every call, and a slowed proxy finds the replies of all masters in
# at once, so under strace it writes to clients less often than it does at speed.
SYSCALL_READS = ("read", "readv", "recvfrom", "recvmsg")
SYSCALL_WRITES = ("write", "writev", "sendto", "sendmsg")


def perf_can_count_syscalls():
    if not shutil.which("perf"):
        return False
    probe = subprocess.run(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "true"],
                           capture_output=True, text=True)
    return probe.returncode == 0


def count_syscalls(pid, during, use_perf):
    """{name: count} of the calls `pid` made while `during()` ran, and the tool used."""
    work = tempfile.mkdtemp(prefix="slotbridge-syscalls-")
    out = os.path.join(work, "counts")
    try:
        if use_perf:
            events = ["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{name}"
                                                   for name in SYSCALL_READS + SYSCALL_WRITES]
            run_traced(["perf", "stat", "-x,", "-o", out, "-e", ",".join(events),
                        "-p", str(pid)], 0.5, during)
            return perf_stat_counts(out), "perf stat"
        if not shutil.which("strace"):
            raise SystemExit("neither perf nor strace: apt-get install -y linux-perf (or strace)")
        run_traced(["strace", "-c", "-f", "-o", out, "-p", str(pid)], 1.0, during)
        return strace_counts(out), "strace (slows the proxy: fewer writes than at speed)"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_traced(tracer_command, settle_s, during):
    """Runs `during()` under a tracer attached to the proxy, given `settle_s` to attach, and
    stops it with SIGINT, on which it writes its counts."""
    tracer = subprocess.Popen(tracer_command, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    time.sleep(settle_s)
    during()
    tracer.send_signal(signal.SIGINT)
    tracer.wait(timeout=30)


def perf_stat_counts(path):
    """{syscall name: count}, with "total" for every syscall, from `perf stat -x,` output."""
    calls = {}
    with open(path) as f:
        for row in csv.reader(f):
            if len(row) > 2 and row[0].strip().isdigit():
                event = row[2].split(":")[-1]
                name = "total" if event == "sys_enter" else event.removeprefix("sys_enter_")
                calls[name] = int(row[0])
    return calls


def strace_counts(path):
    """{syscall name: count} from an `strace -c` summary."""
    calls = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 5 and fields[0][0].isdigit():
                calls[fields[-1]] = int(fields[3])
    return calls


def syscalls_per_request():
    """`bench/run.sh --syscalls`: the proxy's syscalls per request, counted by `perf stat`
    on the kernel's syscall tracepoints (or, without perf, `strace -c`, which slows the
    proxy down and changes how its writes group)."""
    procs = Processes()
    try:
        ports = start_cluster(procs)
        seeds = [f"127.0.0.1:{p}" for p in ports]
        proxy, port = start_proxy(procs, seeds, [], "proxy")
        benchmark(port, "set", 1, 2000)  # warm: backend connections open
        rows, tool = [], None
        use_perf = perf_can_count_syscalls()
        # strace slows the proxy about tenfold: fewer requests keep its runs short.
        scale = 10 if use_perf else 1
        for test, pipeline, n in [("set", 1, 20000), ("get", 1, 20000),
                                  ("set", 16, 150000), ("get", 16, 150000)]:
            n *= scale
            calls, tool = count_syscalls(
                proxy.pid, lambda: benchmark(port, test, pipeline, n), use_perf)
            total = calls.get("total") or sum(v for k, v in calls.items() if k != "total")
            writes = sum(calls.get(k, 0) for k in SYSCALL_WRITES)
            reads = sum(calls.get(k, 0) for k in SYSCALL_READS)
            rows.append(f"| {test.upper()} -P {pipeline} | {n} | {total} | {total / n:.3f} | "
                        f"{writes / n:.3f} | {reads / n:.3f} |")
        print(f"Counted with {tool}.")
        print()
        print("| case | requests | proxy syscalls | per request | writes per request | reads per request |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))
    finally:
        procs.stop()


def idle_timeout_args(procs):
    """The proxy's arguments for an idle `timeout`, as fleets often set (its clock moves with
    each reply): a configuration file in the run's directory."""
    path = os.path.join(procs.dir, "timeout.yaml")
    with open(path, "w") as f:
        f.write("timeout: 300\n")
    return ["--config", path]


def instructions_per_request():
    """`bench/run.sh --instructions`: the proxy's user-space instructions per request, counted
    by valgrind's callgrind. Unlike time on shared cores, a count repeats from run to run of
    the same build, so it shows a change in the proxy's own code that the noise of the
    throughput runs hides; it leaves out the kernel's work (the sends and receives), which is
    most of a request's cost at -P 1."""
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        raise SystemExit("valgrind missing: apt-get install -y valgrind")
    procs = Processes()
    try:
        ports = start_cluster(procs)
        seeds = [f"127.0.0.1:{p}" for p in ports]
        layout_args = ["--layout", os.path.abspath(LAYOUT), "--prefix", "mybot"]
        timeout_args = idle_timeout_args(procs)
        value = "x" * VALUE_SIZE
        print("| case | target | requests | proxy instructions per request |")
        print("|---|---|---|---|")
        builds = [("proxy", PROXY)] + ([("baseline", BASELINE)] if BASELINE else [])
        # With `--baseline`, the same counts of the earlier build, for an A/B of a change.
        targets = [(f"{name}{suffix}", binary, extra) for suffix, extra in
                   (("", []), (" + layout", layout_args), (" + timeout", timeout_args))
                   for name, binary in builds]
        for target, binary, extra in targets:
            # Every target starts from the same (empty) keyspace: a GET of a missing key
            # takes another path than one of a stored value, and the targets run in turn.
            for p in ports:
                subprocess.run(["redis-cli", "-p", str(p), "flushall"], check=True,
                               capture_output=True)
            port, admin = free_port(), free_port()
            out = os.path.join(procs.dir, f"callgrind-{port}.out")
            proxy = procs.start(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                                 binary, "--listen", f"127.0.0.1:{port}", "--admin-listen",
                                 f"127.0.0.1:{admin}", "--cluster", ",".join(seeds), *extra],
                                f"callgrind-{port}")
            wait_port(port, timeout=120)
            benchmark(port, "set", 1, 2000)  # warm: backend connections open
            cases = [("SET -P 1", "set", 1, 20000, None, CLIENTS),
                     ("GET -P 1", "get", 1, 20000, None, CLIENTS),
                     ("SET -P 16", "set", 16, 100000, None, CLIENTS),
                     ("GET -P 16", "get", 16, 100000, None, CLIENTS),
                     ("MSET 10 keys", "mset", 1, 10000, None, CLIENTS),
                     ("PING_INLINE", "ping_inline", 1, 20000, None, CLIENTS)]
            if extra == timeout_args:
                cases = [case for case in cases if case[2] == 1 and case[1] in ("set", "get")]
                cases += [("GET -P 1 -c 1,000", "get", 1, 50000, None, 1000)]
            elif extra:
                cases.append(("SET inside prefix (indexed chat record) -P 16", None, 16, 50000,
                              ["SET", "mybot:chat:__rand_int__", value], CLIENTS))
            else:
                # A fleet's per-client costs: the same requests from 1,000 connections, and
                # what taking a client in costs (1,000 clients connect, each sends one GET
                # and goes: the count per request is per client).
                cases += [("SET -P 1 -c 1,000", "set", 1, 50000, None, 1000),
                          ("GET -P 1 -c 1,000", "get", 1, 50000, None, 1000),
                          ("connect, GET once, close -c 1,000", "get", 1, 1000, None, 1000)]
            for label, test, pipeline, n, command, clients in cases:
                subprocess.run(["callgrind_control", "--zero", str(proxy.pid)], check=True,
                               capture_output=True)
                benchmark(port, test, pipeline, n, command=command, clients=clients)
                before = set(os.listdir(procs.dir))
                subprocess.run(["callgrind_control", "--dump", str(proxy.pid)], check=True,
                               capture_output=True)
                dumps = [f for f in set(os.listdir(procs.dir)) - before
                         if f.startswith(f"callgrind-{port}.out")]
                if not dumps:
                    raise SystemExit(f"callgrind wrote no dump for {label}")
                newest = max(dumps, key=lambda f: os.path.getmtime(os.path.join(procs.dir, f)))
                total = None
                with open(os.path.join(procs.dir, newest)) as f:
                    for line in f:
                        if line.startswith("summary:") or line.startswith("totals:"):
                            total = int(line.split()[1])
                if total is None:
                    raise SystemExit(f"no instruction count in the callgrind dump of {label}")
                print(f"| {label} | {target} | {n} | {total / n:,.0f} |")
            proxy.send_signal(signal.SIGTERM)
            proxy.wait(timeout=60)
    finally:
        procs.stop()


# `--fleet`: the client counts of a bot fleet. Each count runs SET then GET against every
# target in turn (direct, the proxy, and `--baseline` / `--predixy` when given), with the
# target's peak RSS (targets start afresh for each client count), its CPU per request, and redis-benchmark's p50 / p99.
# A case is (clients, pipeline, requests per client); the last is None for a run of
# FLEET_REQUESTS. The connect burst (5,000 clients, 3 requests each, every target run alike)
# is a fleet reconnecting at once: redis-benchmark connects every client before the first
# request, so all 5,000 first requests arrive together, and its p99 is how long the last of
# them waited. A run of FLEET_REQUESTS at 5,000 clients has the burst in it too: its first
# requests are 1.25 % of the run, so they weigh on its p99.
FLEET_CASES = [(1, 1, None), (50, 1, None), (1000, 1, None), (5000, 1, None), (5000, 1, 3),
               (10000, 1, None), (1000, 16, None)]
# `--clients 1000,5000`: only the cases of these client counts (a paired series of the counts
# a target is about, in the time the whole matrix would take for one repetition).
if "--clients" in sys.argv:
    _counts = {int(c) for c in sys.argv[sys.argv.index("--clients") + 1].split(",")}
    FLEET_CASES = [case for case in FLEET_CASES if case[0] in _counts]
FLEET_REQUESTS = {1: 20000, 50: 200000, 1000: 300000, 5000: 400000, 10000: 500000}
if QUICK:
    FLEET_REQUESTS = {clients: n // 10 for clients, n in FLEET_REQUESTS.items()}
# Idle connections held open to measure what one costs the proxy (and predixy).
FLEET_IDLE = [1000, 5000, 10000]
PEER_LABEL = "predixy (peer, 1 thread)"
FLOOR_LABEL = "floor (bench/floor.rs)"
# Time in the proxy: how long each proxy held a request, from its own histogram. redis-benchmark's
# latency also holds the time a reply waits for its event loop, which at 5,000 clients (its one
# thread near a whole core) is most of it; this is the proxy's part alone. The proxy's
# `slotbridge_command_duration_seconds` runs from a request's read to its reply's return from
# the master; predixy's LatencyMonitor, over the same buckets, from a request's parse to its
# reply's (a few dozen instructions a request more for predixy in `--fleet`).
IN_PROXY_BUCKETS_US = [100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000,
                       500000, 1000000]
IN_PROXY_SHOWN_US = [100, 250, 1000, 5000, 10000]


def fds_allow(clients):
    """Whether this process, and so redis-benchmark and the targets it starts, may open one
    descriptor per client with room to spare; raised to the hard limit first."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return clients + 1000 <= soft


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def held_connections_rss(port, pid, count):
    """(RSS with `count` idle connections held open, each having sent one PING, RSS after
    they closed) in MB: the difference over `count` is what an idle connection costs."""
    sockets = []
    try:
        for _ in range(count):
            sockets.append(socket.create_connection(("127.0.0.1", port)))
        for s in sockets:
            s.sendall(b"PING\r\n")
        for s in sockets:
            s.recv(16)
        time.sleep(1.0)
        held = rss_mb(pid)
    finally:
        for s in sockets:
            s.close()
    time.sleep(1.0)
    return held, rss_mb(pid)


def fleet_targets(procs, seeds, ports):
    """Fresh targets, so each one's peak RSS belongs to the case measured (a process rarely
    gives memory back to the system once it has grown)."""
    proxy, proxy_port = start_proxy(procs, seeds, [], "proxy")
    targets = [("direct --cluster", ports[0], True, None), ("proxy", proxy_port, False, proxy)]
    if BASELINE:
        baseline, baseline_port = start_proxy(
            procs, seeds, [], "proxy-baseline", os.path.abspath(BASELINE))
        targets.append(("proxy, baseline build", baseline_port, False, baseline))
    if FLOOR:
        floor, floor_port = start_proxy(procs, seeds, [], "floor", FLOOR)
        targets.append((FLOOR_LABEL, floor_port, False, floor))
    if PREDIXY:
        predixy, predixy_port = start_predixy(procs, seeds, latency=True)
        targets.append((PEER_LABEL, predixy_port, False, predixy))
    return targets


def in_proxy_counts(target, port, proc, test):
    """{bucket bound in us, `math.inf` last: `test` requests the target answered within it so
    far} from its own histogram (see IN_PROXY_BUCKETS_US); None for a target without one."""
    counts = {}
    if target == PEER_LABEL:
        out = subprocess.run(["redis-cli", "-p", str(port), "info", "Latency", "all"],
                             capture_output=True, text=True, timeout=30).stdout
        # `<= bound elapsed-sum count percent` for each bucket that has a request, then `T
        # max elapsed-sum count` (the totals), then the same per master.
        within = {}
        for line in out.splitlines():
            fields = line.split()
            if fields and fields[0] == "T":
                counts[math.inf] = int(fields[3])
                break
            if len(fields) >= 4 and fields[0] == "<=":
                within[int(fields[1])] = int(fields[3])
        for bound in IN_PROXY_BUCKETS_US:
            counts[bound] = sum(n for b, n in within.items() if b <= bound)
        return counts
    if proc is None or target == FLOOR_LABEL:
        return None
    url = f"http://127.0.0.1:{proc.admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    prefix = f'slotbridge_command_duration_seconds_bucket{{command="{test}",le="'
    for line in text.splitlines():
        if line.startswith(prefix):
            bound = line[len(prefix):].split('"')[0]
            counts[math.inf if bound == "+Inf" else round(float(bound) * 1e6)] = int(
                line.split()[-1])
    return counts


def in_proxy_shares(before, after):
    """{bound in us: the share of the requests between two readings answered within it}."""
    if not after:
        return None
    total = after[math.inf] - before.get(math.inf, 0) if math.inf in after else 0
    if total <= 0:
        return None
    return {bound: (after[bound] - before.get(bound, 0)) / total for bound in after}


# `--cache`: the cache lines a request touches, under valgrind's cachegrind, at -c 50 and
# -c 1,000. The simulated last-level cache is 1 MiB (about what one core's L2 holds of a
# proxy's data beside the kernel's): what misses it at 1,000 clients and not at 50 is the
# memory each client's request touches, and on a real core each such line is an L2 miss.
CACHE_CASES = [(50, 100000), (1000, 100000)]
CACHE_SIM = ["--cache-sim=yes", "--D1=32768,8,64", "--LL=1048576,16,64"]


def cachegrind_totals(path):
    """{event: count} of a cachegrind output file's summary line."""
    events = []
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:"):
                return dict(zip(events, map(int, line.split()[1:])))
    raise SystemExit(f"no summary in the cachegrind output {path}")


def cache_lines_per_request():
    """`bench/run.sh --cache`: instructions, first-level and last-level cache misses per GET
    of each target (the proxy, `--baseline`, `--predixy`), each case in a process of its own
    (cachegrind counts from start to exit: the start and a warm-up of 2,000 requests are
    counted too, less than 1 % of a case's lines)."""
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind missing: apt-get install -y valgrind")
    procs = Processes()
    try:
        ports = start_cluster(procs)
        for port in ports:
            subprocess.run(["redis-cli", "-p", str(port), "config", "set", "maxclients", "15000"],
                           check=True, capture_output=True)
        seeds = [f"127.0.0.1:{p}" for p in ports]
        # Each build also with an idle `timeout` set.
        timeout_args = idle_timeout_args(procs)
        builds = [("proxy", PROXY)]
        if BASELINE:
            builds.append(("proxy, baseline build", os.path.abspath(BASELINE)))
        targets = [(label, binary, []) for label, binary in builds]
        targets += [(f"{label} + timeout", binary, timeout_args) for label, binary in builds]
        if PREDIXY:
            targets.append((PEER_LABEL, PREDIXY, []))
        print("| case | target | requests | instructions per request | D1 misses per request "
              "| LL misses per request (1 MiB LL) |")
        print("|---|---|---|---|---|---|")
        for clients, n in CACHE_CASES:
            for target, binary, extra in targets:
                out = os.path.join(procs.dir, f"cachegrind-{clients}-{len(procs.procs)}.out")
                grind = ["valgrind", "--tool=cachegrind", *CACHE_SIM,
                         f"--cachegrind-out-file={out}"]
                if binary == PREDIXY:
                    proc, port = start_predixy(procs, seeds, wrap=grind)
                else:
                    port, admin = free_port(), free_port()
                    proc = procs.start([*grind, binary, "--listen", f"127.0.0.1:{port}",
                                        "--admin-listen", f"127.0.0.1:{admin}", "--cluster",
                                        ",".join(seeds), *extra],
                                       f"cachegrind-{clients}-{target}")
                    wait_port(port, timeout=120)
                benchmark(port, "set", 1, 2000, clients=min(clients, 50))
                benchmark(port, "get", 1, n, clients=clients)
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=120)
                totals = cachegrind_totals(out)
                requests = n + 2000
                d1 = (totals["D1mr"] + totals["D1mw"]) / requests
                ll = (totals["DLmr"] + totals["DLmw"]) / requests
                print(f"| GET -P 1 -c {clients:,} | {target} | {requests:,} | "
                      f"{totals['Ir'] / requests:,.0f} | {d1:.1f} | {ll:.1f} |", flush=True)
    finally:
        procs.stop()


def stop_targets(targets):
    for _, _, _, proc in targets:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def fleet_idle(procs, seeds, ports):
    print("| target | idle connections | RSS before MB | RSS held MB | bytes per connection |"
          " RSS after close MB |")
    print("|---|---|---|---|---|---|")
    for count in FLEET_IDLE:
        if not fds_allow(count):
            print(f"| - | {count:,} | file-descriptor limit too low | | | |")
            continue
        targets = fleet_targets(procs, seeds, ports)
        for target, port, _, proc in targets[1:]:
            before = rss_mb(proc.pid)
            held, after = held_connections_rss(port, proc.pid, count)
            per = (held - before) * 1024 * 1024 / count
            print(f"| {target} | {count:,} | {before:.1f} | {held:.1f} | {per:,.0f} |"
                  f" {after:.1f} |")
        stop_targets(targets)
    print()


def fleet():
    procs = Processes()
    try:
        ports = start_cluster(procs)
        servers = [proc.pid for proc in procs.procs]
        for port in ports:
            subprocess.run(["redis-cli", "-p", str(port), "config", "set", "maxclients", "15000"],
                           check=True, capture_output=True)
        seeds = [f"127.0.0.1:{p}" for p in ports]
        if "--clients" not in sys.argv:
            fleet_idle(procs, seeds, ports)
        results = {}
        labels = []
        for rep in range(REPS):
            for clients, pipeline, each in FLEET_CASES:
                if not fds_allow(clients):
                    continue
                targets = fleet_targets(procs, seeds, ports)
                labels = [t[0] for t in targets]
                n = (clients * each if each
                     else FLEET_REQUESTS[clients] * (8 if pipeline > 1 else 1))
                for test in ("set", "get"):
                    # Alternate the order of the targets from one repetition to the next, so
                    # neither always runs on a machine the other has just warmed or loaded.
                    for target, port, cluster, proc in (targets if rep % 2 == 0
                                                        else targets[:1] + targets[:0:-1]):
                        runs = n * DIRECT_SCALE if cluster and not each else n
                        held_before = in_proxy_counts(target, port, proc, test)
                        before = cpu_split(proc.pid) if proc else (0, 0)
                        servers_before = sum(cpu_seconds(pid) for pid in servers)
                        client_before = children_cpu_seconds()
                        idle_before, total_before = machine_ticks()
                        started = time.monotonic()
                        r = benchmark(port, test, pipeline, runs, cluster=cluster,
                                      clients=clients)
                        wall = time.monotonic() - started
                        idle_after, total_after = machine_ticks()
                        after = cpu_split(proc.pid) if proc else (0, 0)
                        if held_before is not None:
                            r["in_proxy"] = in_proxy_shares(
                                held_before, in_proxy_counts(target, port, proc, test))
                        r["cpu_us"] = ((sum(after) - sum(before)) / runs * 1e6
                                       if proc else None)
                        r["user_us"] = (after[0] - before[0]) / runs * 1e6
                        r["kernel_us"] = (after[1] - before[1]) / runs * 1e6
                        r["servers_us"] = (sum(cpu_seconds(pid) for pid in servers)
                                           - servers_before) / runs * 1e6
                        r["client_us"] = (children_cpu_seconds() - client_before) / runs * 1e6
                        r["client_core"] = (children_cpu_seconds() - client_before) / wall
                        r["idle"] = ((idle_after - idle_before)
                                     / max(1, total_after - total_before))
                        # The high-water mark since the target started: this case's SETs,
                        # then its SETs and GETs.
                        r["peak"] = peak_rss_mb(proc.pid) if proc else None
                        burst = f", {each} each (connect burst)" if each else ""
                        key = (f"{test.upper()} -c {clients} -P {pipeline}{burst}", target)
                        results.setdefault(key, []).append(r)
                stop_targets(targets)
        print(f"| case | target | req/s (median of {REPS}) | ratio to direct | ratio to predixy |"
              " p50 ms | p99 ms | target CPU us/req | peak RSS MB |")
        print("|---|---|---|---|---|---|---|---|---|")
        peer_label = PEER_LABEL
        for (label, target), rows in results.items():
            rps = median(rows, "rps")
            direct = median(results[(label, labels[0])], "rps")
            peer = results.get((label, peer_label))
            to_peer = (f"{rps / median(peer, 'rps'):.2f}"
                       if peer and target not in (labels[0], peer_label) else "-")
            cpu = f"{median(rows, 'cpu_us'):.1f}" if rows[0]["cpu_us"] is not None else "-"
            peak = (f"{max(r['peak'] for r in rows):.1f}" if rows[0]["peak"] is not None
                    else "-")
            print(f"| {label} | {target} | {rps:,.0f} | {rps / direct:.2f} | {to_peer} | "
                  f"{median(rows, 'p50'):.3f} | {median(rows, 'p99'):.3f} | {cpu} | {peak} |")
        print()
        print_fleet_cpu(results, labels)
        print()
        print_in_proxy(results)
    finally:
        procs.stop()


def print_in_proxy(results):
    """The share of requests each proxy answered within each bound, and the bucket its p99
    falls in (medians over the repetitions): see IN_PROXY_BUCKETS_US."""
    shown = " / ".join(f"{bound / 1000:g}" for bound in IN_PROXY_SHOWN_US)
    print(f"| case | target | answered in the proxy within {shown} ms, % | "
          "p99 in the proxy, ms (its bucket's bound) |")
    print("|---|---|---|---|")
    for (label, target), rows in results.items():
        shares = [r["in_proxy"] for r in rows if r.get("in_proxy")]
        if not shares:
            continue
        within = " / ".join(f"{statistics.median(s[bound] for s in shares) * 100:.1f}"
                            for bound in IN_PROXY_SHOWN_US)
        p99 = statistics.median(min(bound for bound, share in s.items() if share >= 0.99)
                                for s in shares)
        shown_p99 = f"> {IN_PROXY_BUCKETS_US[-1] / 1000:g}" if p99 == math.inf else (
            f"{p99 / 1000:g}")
        print(f"| {label} | {target} | {within} | {shown_p99} |")


def print_fleet_cpu(results, labels):
    """Where each request's CPU went, party by party, and what that allows against predixy.
    With the machine busy, throughput is inversely proportional to the whole machine's CPU per
    request: "ratio to predixy CPU allows" is predixy's total over the target's, and "with the
    target's code free" leaves out the target's user time but keeps its kernel time (its sends
    and receives) and what the servers and redis-benchmark spent beside it: the most a target
    that makes the same system calls could reach against predixy. redis-benchmark runs one
    thread: near 100 % of a core, it is the load generator that sets the pace."""
    peer_label = PEER_LABEL
    print("| case | target | servers us/req | redis-benchmark us/req | redis-benchmark, % of a "
          "core | target user us/req | target kernel us/req | total us/req | machine idle | "
          "ratio to predixy measured | ratio to predixy CPU allows | with the target's code "
          "free |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (label, target), rows in results.items():
        if target == labels[0]:
            continue
        parts = {key: median(rows, key) for key in
                 ("servers_us", "client_us", "user_us", "kernel_us", "rps", "idle",
                  "client_core")}
        total = (parts["servers_us"] + parts["client_us"] + parts["user_us"]
                 + parts["kernel_us"])
        peer = results.get((label, peer_label))
        ratios = ["-", "-", "-"]
        if peer and target != peer_label:
            peer_total = sum(median(peer, key) for key in
                             ("servers_us", "client_us", "user_us", "kernel_us"))
            ratios = [f"{parts['rps'] / median(peer, 'rps'):.2f}",
                      f"{peer_total / total:.2f}",
                      f"{peer_total / (total - parts['user_us']):.2f}"]
        print(f"| {label} | {target} | {parts['servers_us']:.2f} | {parts['client_us']:.2f} | "
              f"{parts['client_core'] * 100:.0f} % | {parts['user_us']:.2f} | "
              f"{parts['kernel_us']:.2f} | {total:.2f} | {parts['idle'] * 100:.0f} % | "
              f"{' | '.join(ratios)} |")


def idle_clients_rss(port, pid):
    sockets = []
    try:
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", port))
            sockets.append(s)
        for s in sockets[::100]:
            s.sendall(b"PING\r\n")
            s.recv(16)
        time.sleep(0.5)
        return rss_mb(pid)
    finally:
        for s in sockets:
            s.close()


def median(rows, key):
    return statistics.median(r[key] for r in rows)


def ratio_to_direct(rows, direct):
    return f"{median(rows, 'rps') / median(direct, 'rps'):.2f}"


def print_table(results, targets):
    print(f"| case | target | req/s (median of {REPS}) | ratio to direct | ratio, each repetition | "
          "median of those | p50 ms | p99 ms | req per proxy CPU-s | proxy CPU, % of a core | "
          "machine idle |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (label, target), rows in results.items():
        rps = median(rows, "rps")
        direct = results.get((label, targets[0][0]))
        compared = direct and target != targets[0][0]
        ratio = ratio_to_direct(rows, direct) if compared else "-"
        # Each repetition's ratio to the direct run next to it: the spread shows the noise.
        # Their median pairs runs that shared the machine's state; the ratio of the two
        # medians does not, and moves more when the whole machine runs slower for a while.
        paired = [r["rps"] / d["rps"] for r, d in zip(rows, direct)] if compared else []
        each = " ".join(f"{p:.2f}" for p in paired) or "-"
        paired_median = f"{statistics.median(paired):.2f}" if paired else "-"
        cpu = sum(r["cpu"] for r in rows)
        per_cpu = f"{sum(r['n'] for r in rows) / cpu / 1000:.0f}k" if cpu > 0 else "-"
        busy = f"{median(rows, 'busy') * 100:.0f} %" if cpu > 0 and "busy" in rows[0] else "-"
        idle = f"{median(rows, 'idle') * 100:.0f} %" if "idle" in rows[0] else "-"
        print(f"| {label} | {target} | {rps:,.0f} | {ratio} | {each} | {paired_median} | "
              f"{median(rows, 'p50'):.3f} | "
              f"{median(rows, 'p99'):.3f} | {per_cpu} | {busy} | {idle} |")


def print_cpu_breakdown(results, targets):
    """CPU microseconds per request of each party, and the ratio to direct that CPU alone
    would allow: with no idle time left, throughput is inversely proportional to the whole
    machine's CPU per request, so the gap between the two ratios is what idle time costs.
    "ratio with the proxy's code free" leaves out the target's user time but keeps its kernel
    time (its sends and receives) and what the others spent: the most a proxy that makes the
    same system calls could reach, beside servers and a client that cost what they did."""
    print("| case | target | servers us/req | commands per server read | server sleeps per 1k req | "
          "redis-benchmark us/req | proxy us/req | of which kernel | total us/req | "
          "ratio CPU allows | ratio with the proxy's code free | ratio measured |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (label, target), rows in results.items():
        if "servers_cpu" not in rows[0]:
            continue
        requests = sum(r["n"] for r in rows)
        parts = [sum(r[key] for r in rows) / requests * 1e6
                 for key in ("servers_cpu", "client_cpu", "cpu")]
        direct = results[(label, targets[0][0])]
        direct_total = sum(r["servers_cpu"] + r["client_cpu"] for r in direct) / sum(
            r["n"] for r in direct) * 1e6
        compared = target != targets[0][0]
        allowed = f"{direct_total / sum(parts):.2f}" if compared else "-"
        measured = ratio_to_direct(rows, direct) if compared else "-"
        proxy = f"{parts[2]:.2f}" if compared else "-"
        kernel = sum(r["cpu_kernel"] for r in rows) / requests * 1e6
        free = direct_total / (parts[0] + parts[1] + kernel)
        free = f"{free:.2f}" if compared else "-"
        kernel = f"{kernel:.2f}" if compared else "-"
        commands = sum(r["server_commands"] for r in rows)
        # Requests the proxy answers itself (PING) leave the servers the harness's own INFO.
        served = commands >= requests / 10
        batch = f"{commands / max(1, sum(r['server_reads'] for r in rows)):.1f}" if served else "-"
        slept = sum(r["server_sleeps"] for r in rows) / requests * 1000
        print(f"| {label} | {target} | {parts[0]:.2f} | {batch} | {slept:.1f} | {parts[1]:.2f} | "
              f"{proxy} | {kernel} | {sum(parts):.2f} | {allowed} | {free} | {measured} |")


def make_certs(directory):
    """A throwaway CA and a certificate for 127.0.0.1 signed by it; returns the CA's path."""
    if not shutil.which("openssl"):
        raise SystemExit("openssl missing (it makes the TLS series' certificates): "
                         "apt-get install -y openssl")
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *curve, "-days", "1", "-subj", "/CN=bench CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout", "ca.key", "-out", "ca.crt")
    with open(os.path.join(directory, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    openssl("req", *curve, "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", "server.ext", "-out", "server.crt")
    return os.path.join(directory, "ca.crt")


def tls_series():
    """`--tls`: clients over TLS against plain clients, one proxy each, same cluster, runs
    interleaved: the cost of client-side TLS at -P 1 and -P 16."""
    procs = Processes()
    try:
        seeds = [f"127.0.0.1:{p}" for p in start_cluster(procs)]
        ca = make_certs(procs.dir)
        plain, plain_port = start_proxy(procs, seeds, [], "proxy")
        tls_port = free_port()
        tls_args = ["--tls-listen", f"127.0.0.1:{tls_port}",
                    "--tls-cert-file", os.path.join(procs.dir, "server.crt"),
                    "--tls-key-file", os.path.join(procs.dir, "server.key")]
        tls_proxy, _ = start_proxy(procs, seeds, tls_args, "proxy-tls")
        targets = [("plain", plain_port, plain, None), ("TLS", tls_port, tls_proxy, ca)]
        cases = [("SET -P 1", "set", 1, N_P1), ("GET -P 1", "get", 1, N_P1),
                 ("SET -P 16", "set", 16, N_P16), ("GET -P 16", "get", 16, N_P16)]
        results = {}
        for _ in range(REPS):
            for label, test, pipeline, n in cases:
                for target, port, proc, cacert in targets:
                    before = cpu_seconds(proc.pid)
                    r = benchmark(port, test, pipeline, n, tls=cacert)
                    r["cpu"], r["n"] = cpu_seconds(proc.pid) - before, n
                    results.setdefault((label, target), []).append(r)
        print(f"| case | plain req/s | TLS req/s (median of {REPS}) | TLS / plain | "
              "TLS / plain, each repetition | plain req per proxy CPU-s | TLS req per proxy CPU-s |")
        print("|---|---|---|---|---|---|---|")
        for label, *_ in cases:
            plain_rows, tls_rows = results[(label, "plain")], results[(label, "TLS")]
            each = ", ".join(f"{t['rps'] / p['rps']:.2f}" for p, t in zip(plain_rows, tls_rows))
            per_cpu = [sum(r["n"] for r in rows) / max(1e-9, sum(r["cpu"] for r in rows))
                       for rows in (plain_rows, tls_rows)]
            print(f"| {label} | {median(plain_rows, 'rps'):.0f} | {median(tls_rows, 'rps'):.0f} | "
                  f"{median(tls_rows, 'rps') / median(plain_rows, 'rps'):.2f} | {each} | "
                  f"{per_cpu[0]:.0f} | {per_cpu[1]:.0f} |")
    finally:
        procs.stop()



# `--cross-slot`: the cost of an emulated cross-slot read against the same command on keys in
# one slot, same proxy, same data, runs interleaved (issue target: at most 1.5x the time).
CROSS_SLOT_MEMBERS = 10


def keys_on_two_masters(port):
    """Two key prefixes whose hash tags' slots are served by different masters. `redis-cli --cluster create` gives 3 masters 0-5460, 5461-10922, rest."""
    def slot(tag):
        out = subprocess.run(["redis-cli", "-p", str(port), "cluster", "keyslot", f"{{{tag}}}"],
                             check=True, capture_output=True, text=True)
        return int(out.stdout.strip())
    by_master = {}
    for n in range(200):
        by_master.setdefault(min(slot(f"t{n}") // 5461, 2), f"t{n}")
        if len(by_master) == 3:
            break
    return f"{{{by_master[0]}}}", f"{{{by_master[1]}}}"


def fill_cross_slot_keys(port, prefixes):
    """A set, a sorted set and a HyperLogLog under each prefix, members half shared."""
    for i, prefix in enumerate(prefixes):
        members = [f"m{j}" for j in range(i * CROSS_SLOT_MEMBERS // 2,
                                          i * CROSS_SLOT_MEMBERS // 2 + CROSS_SLOT_MEMBERS)]
        zargs = [x for j, m in enumerate(members) for x in (str(j), m)]
        for command in (["sadd", f"{prefix}:s", *members], ["zadd", f"{prefix}:z", *zargs],
                        ["pfadd", f"{prefix}:h", *members]):
            subprocess.run(["redis-cli", "-p", str(port), *command], check=True,
                           capture_output=True)


def callgrind_total(procs, pid, name):
    """Dumps callgrind's counters of `pid` (started with --callgrind-out-file in procs.dir)
    and returns the instructions counted since the last zeroing."""
    before = set(os.listdir(procs.dir))
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
    dumps = [f for f in set(os.listdir(procs.dir)) - before if f.startswith(name)]
    if not dumps:
        raise SystemExit(f"callgrind wrote no dump for {name}")
    newest = max(dumps, key=lambda f: os.path.getmtime(os.path.join(procs.dir, f)))
    with open(os.path.join(procs.dir, newest)) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise SystemExit(f"no instruction count in the callgrind dump {newest}")


def cross_slot_instructions(procs, seeds, forms, apart, together):
    """`--cross-slot --instructions`: the proxy's instructions per request of each form under
    callgrind, a count that repeats from run to run where times on shared cores do not; with
    `--baseline`, the earlier build's counts too, measured after the proxy's on the same data."""
    targets = [("proxy", PROXY)] + ([("baseline", BASELINE)] if BASELINE else [])
    n = 5000
    print("| command | target | one slot instructions per request | across slots | across / one |")
    print("|---|---|---|---|---|")
    for target, binary in targets:
        port, admin = free_port(), free_port()
        name = f"callgrind-{port}.out"
        proxy = procs.start(["valgrind", "--tool=callgrind",
                             f"--callgrind-out-file={os.path.join(procs.dir, name)}", binary,
                             "--listen", f"127.0.0.1:{port}", "--admin-listen",
                             f"127.0.0.1:{admin}", "--cluster", ",".join(seeds)], name)
        wait_port(port, timeout=120)
        for (label, one_slot), (_, across) in zip(forms(together), forms(apart)):
            counts = []
            for command in (one_slot, across):
                benchmark(port, None, 1, 500, clients=1, command=command)  # warm
                subprocess.run(["callgrind_control", "--zero", str(proxy.pid)], check=True,
                               capture_output=True)
                benchmark(port, None, 1, n, clients=1, command=command)
                counts.append(callgrind_total(procs, proxy.pid, name) / n)
            print(f"| {label} | {target} | {counts[0]:,.0f} | {counts[1]:,.0f} | "
                  f"{counts[1] / counts[0]:.2f} |")
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=60)


def cross_slot_series():
    procs = Processes()
    try:
        ports = start_cluster(procs)
        seeds = [f"127.0.0.1:{p}" for p in ports]
        proxy, port = start_proxy(procs, seeds, [], "proxy")
        apart = keys_on_two_masters(ports[0])
        # One slot: two names under the first prefix's hash tag, holding the same data.
        together = (f"{apart[0]}x", f"{apart[0]}y")
        fill_cross_slot_keys(port, apart)
        fill_cross_slot_keys(port, together)

        def forms(prefixes):
            a, b = prefixes
            return [("SUNION", ["SUNION", f"{a}:s", f"{b}:s"]),
                    ("SINTER", ["SINTER", f"{a}:s", f"{b}:s"]),
                    ("ZUNION WITHSCORES", ["ZUNION", "2", f"{a}:z", f"{b}:z", "WITHSCORES"]),
                    ("PFCOUNT", ["PFCOUNT", f"{a}:h", f"{b}:h"])]
        if "--instructions" in sys.argv:
            cross_slot_instructions(procs, seeds, forms, apart, together)
            return
        loads = [("-c 50", CLIENTS, N_P1), ("-c 1", 1, N_P1 // 4)]
        results = {}
        for _ in range(REPS):
            for load, clients, n in loads:
                for (label, one_slot), (_, across) in zip(forms(together), forms(apart)):
                    for form, command in (("one slot", one_slot), ("across slots", across)):
                        before = cpu_seconds(proxy.pid)
                        r = benchmark(port, None, 1, n, clients=clients, command=command)
                        r["cpu_us"] = (cpu_seconds(proxy.pid) - before) / n * 1e6
                        results.setdefault((label, load, form), []).append(r)
        print(f"| command | load | one slot req/s | across slots req/s (median of {REPS}) | "
              "time across / one slot, median of the repetitions' ratios (range) | "
              "p50 ms one / across | proxy CPU us/req one / across |")
        print("|---|---|---|---|---|---|---|")
        for label, _ in forms(apart):
            for load, _, _ in loads:
                one, across = results[(label, load, "one slot")], results[(label, load, "across slots")]
                # Each repetition's two forms ran back to back: the median of their ratios
                # is steadier on shared cores than the ratio of two medians.
                ratios = sorted(o["rps"] / a["rps"] for o, a in zip(one, across))
                print(f"| {label} | {load} | {median(one, 'rps'):,.0f} | "
                      f"{median(across, 'rps'):,.0f} | "
                      f"{ratios[len(ratios) // 2]:.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f}) | "
                      f"{median(one, 'p50'):.3f} / {median(across, 'p50'):.3f} | "
                      f"{median(one, 'cpu_us'):.1f} / {median(across, 'cpu_us'):.1f} |")
    finally:
        procs.stop()

if __name__ == "__main__":
    if "--tls" in sys.argv:
        tls_series()
    elif "--cross-slot" in sys.argv:
        cross_slot_series()
    elif "--syscalls" in sys.argv:
        syscalls_per_request()
    elif "--instructions" in sys.argv:
        instructions_per_request()
    elif "--cache" in sys.argv:
        cache_lines_per_request()
    elif "--fleet" in sys.argv:
        fleet()
    else:
        main()
