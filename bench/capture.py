#!/usr/bin/env python3
"""Where a fleet's requests wait: `redis-benchmark` through each target under a packet capture,
each request followed from its arrival at the proxy to its reply.

    python3 bench/capture.py [--clients N] [--requests N] [--tests set,get] [--reps R]
                             [--baseline PATH] [--predixy PATH] [--proxy PATH] [--no-capture]

Per repetition, a fresh proxy of each target (the release build, `--baseline`, `--predixy`)
in front of one 3-master cluster runs `redis-benchmark -c N -n N -P 1 -r 100000 -d 64` once per
test while `tcpdump` records loopback (the first 128 bytes of each packet). Defaults: 5,000
clients, 15,000 requests (the `--fleet` connect burst: 3 requests a client); `--requests
100000` measures a steady run. For each run it prints:
  - `redis-benchmark`'s p99;
  - first requests (all sent at once once every client connected): p50 / p99 of the time from
    a request's packet to its reply's, and the same for the last tenth sent;
  - later requests: the same, and the time from a reply to the client's next request (the
    time the request spent in `redis-benchmark` rather than in the proxy);
  - to master: from a request's arrival to its write to its master (requests matched to their
    master by their key's slot, in order; SET and GET only).
The capture costs CPU on shared cores: its p99s read higher than uncaptured runs; compare
targets within one run. `--no-capture` runs the same series without it and prints only the
p99s (the JSON line at the end has every run's, by target and test). Needs `tcpdump` (Debian package `tcpdump`) and root. Standard
library only (and bench/run.py); the pcap reader is a few lines, so no parsing library."""

import collections
import json
import os
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


CLIENTS = int(arg("--clients", "5000"))
REQUESTS = int(arg("--requests", "15000"))
TESTS = arg("--tests", "set,get").split(",")
REPS = int(arg("--reps", "1"))
CAPTURE = "--no-capture" not in sys.argv
SNAPLEN = 128
# A request's and a reply's bytes on the wire, as `redis-benchmark -d 64` sends them
# (`key:` and 12 digits), to count a master's stream in requests.
REQUEST_BYTES = {"set": 107, "get": 36}


def packets(path):
    """(time, source port, destination port, payload) of each IPv4 TCP packet with a
    payload, from a pcap file of an Ethernet-framed capture (loopback on Linux)."""
    with open(path, "rb") as f:
        data = f.read()
    nanos = struct.unpack("<I", data[:4])[0] == 0xA1B23C4D
    offset = 24
    while offset + 16 <= len(data):
        seconds, fraction, length, _ = struct.unpack("<IIII", data[offset:offset + 16])
        frame = data[offset + 16:offset + 16 + length]
        offset += 16 + length
        ip = frame[14:]
        if len(ip) < 20 or ip[0] >> 4 != 4:
            continue
        header = (ip[0] & 15) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[header:]
        source, destination = struct.unpack(">HH", tcp[:4])
        tcp_header = (tcp[12] >> 4) * 4
        if total - header - tcp_header > 0:
            when = seconds + fraction / (1e9 if nanos else 1e6)
            yield when, source, destination, total - header - tcp_header, tcp[tcp_header:]


def crc16(data):
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc


def master_of(payload, masters):
    """The index of the master a captured SET or GET request goes to: `redis-cli --cluster
    create` gives the masters, in order, ranges of 16384 / masters slots, rounded."""
    parts = payload.split(b"\r\n")
    if len(parts) < 5 or parts[2] not in (b"SET", b"GET"):
        return None
    slot = crc16(parts[4]) % 16384
    each = 16384 / masters
    for index in range(masters - 1):
        if slot <= round(index * each + each - 1):
            return index
    return masters - 1


def percentile(values, share):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * share))] * 1e3 if values else float("nan")


def spread(values):
    return f"{percentile(values, 0.5):.1f} / {percentile(values, 0.99):.1f}"


def analyse(pcap, port, masters, test):
    """The lines this script prints for one captured run."""
    turns = collections.defaultdict(list)  # client port -> [(time, "q" | "r", master)]
    written = collections.defaultdict(list)  # master index -> [(time, bytes)]
    for when, source, destination, length, payload in packets(pcap):
        if destination == port:
            turns[source].append((when, "q", master_of(payload, len(masters))))
        elif source == port:
            turns[destination].append((when, "r", None))
        elif destination in masters:
            written[masters.index(destination)].append((when, length))
    first, later, gaps, sent_first = [], [], [], []
    arrivals = collections.defaultdict(list)
    for events in turns.values():
        asked = [(when, master) for when, kind, master in events if kind == "q"]
        answered = [when for when, kind, _ in events if kind == "r"]
        for k, ((when, master), reply) in enumerate(zip(asked, answered)):
            (first if k == 0 else later).append(reply - when)
            if k == 0:
                sent_first.append((when, reply - when))
            if k + 1 < len(asked):
                gaps.append(asked[k + 1][0] - reply)
            if master is not None:
                arrivals[master].append(when)
    # The first requests are those of the burst: the connection `redis-benchmark` opens first
    # to read the server's configuration is left out.
    sent_first.sort()
    last_tenth = [wait for _, wait in sent_first[-len(sent_first) // 10:]]
    to_master = []
    per_request = REQUEST_BYTES.get(test)
    for index, times in arrivals.items():
        if per_request is None:
            break
        done, total = [], 0
        for when, length in written[index]:
            total += length
            done.extend([when] * (total // per_request - len(done)))
        times.sort()
        # A master's stream holds the proxy's own commands too (its slot map reads): match
        # the last requests, which are the run's.
        shift = len(done) - len(times)
        to_master += [done[i + shift] - t for i, t in enumerate(times) if i + shift >= 0]
    return [
        f"first requests {spread(first)} ms (p50 / p99), the last tenth sent {spread(last_tenth)}",
        f"later requests {spread(later)} ms in the proxy, {spread(gaps)} from a reply to the "
        f"client's next request",
        f"to master {spread(to_master)} ms from arrival" if to_master else "to master: -",
    ]


def captured(directory, port, masters, test):
    """Runs `redis-benchmark` once under `tcpdump`; its p99 and the lines of `analyse`."""
    pcap = os.path.join(directory, f"capture-{port}-{test}.pcap")
    ports = " or ".join(f"tcp port {p}" for p in [port, *masters])
    tcpdump = subprocess.Popen(["tcpdump", "-i", "lo", "-s", str(SNAPLEN), "-B", "65536", "-n",
                                "-w", pcap, ports], stderr=subprocess.PIPE)
    time.sleep(1.0)
    p99 = run.benchmark(port, test, 1, REQUESTS, clients=CLIENTS)["p99"]
    time.sleep(0.5)
    tcpdump.terminate()
    dropped = [line for line in tcpdump.communicate()[1].decode().splitlines()
               if "dropped by kernel" in line and not line.startswith("0 ")]
    lines = analyse(pcap, port, masters, test)
    os.remove(pcap)
    if dropped:
        lines.append(f"tcpdump: {dropped[0]} (the figures above miss those packets)")
    return p99, lines


def main():
    if CAPTURE and shutil.which("tcpdump") is None:
        raise SystemExit("tcpdump is needed: apt-get install tcpdump")
    if not run.fds_allow(CLIENTS):
        raise SystemExit(f"the open files limit is too low for {CLIENTS} clients: ulimit -n")
    procs = run.Processes()
    results = collections.defaultdict(list)
    try:
        masters = run.start_cluster(procs)
        seeds = [f"127.0.0.1:{port}" for port in masters]
        for port in masters:
            subprocess.run(["redis-cli", "-p", str(port), "config", "set", "maxclients",
                            str(CLIENTS + 1000)], check=True, capture_output=True)
        programs = [("proxy", run.PROXY)]
        if run.BASELINE:
            programs.append(("proxy, baseline build", os.path.abspath(run.BASELINE)))
        for rep in range(REPS):
            targets = [(name, *run.start_proxy(procs, seeds, [], f"{name}-{rep}", program))
                       for name, program in programs]
            if run.PREDIXY:
                targets.append(("predixy", *run.start_predixy(procs, seeds)))
            for name, proc, port in targets:
                for test in TESTS:
                    if CAPTURE:
                        p99, lines = captured(procs.dir, port, masters, test)
                    else:
                        p99 = run.benchmark(port, test, 1, REQUESTS, clients=CLIENTS)["p99"]
                        lines = []
                    results[(name, test)].append(p99)
                    print(f"rep {rep} {name} {test}: redis-benchmark p99 {p99:.1f} ms", flush=True)
                    for line in lines:
                        print(f"    {line}", flush=True)
            for _, proc, _ in targets:
                proc.terminate()
                proc.wait()
    finally:
        procs.stop()
    print(json.dumps({f"{name} {test}": p99s for (name, test), p99s in results.items()}))


if __name__ == "__main__":
    main()
