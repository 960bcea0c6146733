//! redis-benchmark, the tool operators load-test with, runs through the proxy with no
//! error line and no CONFIG warning, unpipelined and with -P 16.

mod common;

use std::process::Command;

use common::{shared_cluster, Proxy};

const TESTS: &str = "ping_inline,ping_mbulk,set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100,mset";

fn run_benchmark(port: &str, pipeline: &str) -> String {
    common::require_tool("redis-benchmark");
    let output = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            port,
            "-t",
            TESTS,
            "-n",
            "20000",
            "-c",
            "50",
            "-P",
            pipeline,
            "-q",
        ])
        .output()
        .expect("redis-benchmark runs");
    assert!(
        output.status.success(),
        "redis-benchmark failed: {output:?}"
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn redis_benchmark_runs_clean_through_the_proxy() {
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let port = proxy.addr().rsplit_once(':').unwrap().1.to_string();
    for pipeline in ["1", "16"] {
        let text = run_benchmark(&port, pipeline);
        for line in text.lines() {
            let lower = line.to_ascii_lowercase();
            assert!(
                !lower.contains("error") && !lower.contains("warning"),
                "-P {pipeline}: {line}"
            );
        }
        for test in ["PING_INLINE", "SET", "GET", "LRANGE_100", "MSET"] {
            assert!(
                text.contains(test),
                "-P {pipeline}: no result for {test}:\n{text}"
            );
        }
    }
}
