//! TLS on both sides, against real servers: the TLS listener (beside the plain one or
//! alone; redis-cli, a rustls client, large pipelined replies, a plain or silent client on
//! the TLS port and the handshake timeout), mutual TLS (`yes`, `optional`), a client
//! certificate's CN as the ACL user, certificate rotation by reload, and a TLS-only 3-master
//! cluster behind the proxy (every kind of node connection, large pipelined writes, a MOVED
//! to a TLS port) and under `migrate`/`inspect` with `rediss://`. Certificates are made per
//! test by `common::Certs` (openssl).

mod common;

use std::fs;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{
    free_port, http_get, http_raw, new_dir, read_until_close, run_redis_cli, Certs, Proxy,
    Standalone, TlsClient, TlsCluster,
};

/// A proxy in front of `upstream` with a TLS listener (certificate `server`) on a free port,
/// then `extra` flags. Returns it and the TLS address.
fn tls_proxy(upstream: &Standalone, certs: &Certs, extra: &[&str]) -> (Proxy, String) {
    let tls_addr = format!("127.0.0.1:{}", free_port());
    let cert = certs.path("server.crt");
    let key = certs.path("server.key");
    let mut args = vec![
        "--standalone",
        upstream.addr(),
        "--tls-listen",
        &tls_addr,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
    ];
    args.extend_from_slice(extra);
    (Proxy::start(&args), tls_addr)
}

fn redis_cli_tls(addr: &str, certs: &Certs, args: &[&str]) -> Result<String, String> {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let ca = certs.path("ca.crt");
    let mut all = vec!["--tls", "--cacert", &ca, "-h", host, "-p", port];
    all.extend_from_slice(args);
    run_redis_cli(&all, Duration::from_secs(10))
}

#[test]
fn redis_cli_reaches_the_upstream_through_the_tls_listener() {
    let certs = Certs::generate();
    let upstream = Standalone::start();
    let (proxy, tls_addr) = tls_proxy(&upstream, &certs, &[]);
    let set = redis_cli_tls(&tls_addr, &certs, &["SET", "tls:k", "over-tls"]).unwrap();
    assert_eq!(set.trim(), "OK");
    // The value is on the upstream, and the plain listener still serves beside the TLS one.
    let mut plain = proxy.connect();
    let value: String = redis::cmd("GET").arg("tls:k").query(&mut plain).unwrap();
    assert_eq!(value, "over-tls");
    let get = redis_cli_tls(&tls_addr, &certs, &["GET", "tls:k"]).unwrap();
    assert_eq!(get.trim(), "over-tls");
    // A pipeline whose replies outgrow a TLS record arrives whole and in order.
    let mut client = TlsClient::connect(&tls_addr, &certs, None).unwrap();
    assert_eq!(client.server_cn().as_deref(), Some("slotbridge-a"));
    let big = "x".repeat(300_000);
    assert_eq!(client.call(&["SET", "tls:big", &big]).unwrap(), "+OK\r\n");
    let reply = client.call(&["GET", "tls:big"]).unwrap();
    assert_eq!(reply, format!("$300000\r\n{big}\r\n"));
    // 12 MB of replies to one write: the proxy's TLS writes meet a full socket many times,
    // and the tail of the last reply must still leave.
    let gets: Vec<Vec<String>> = (0..40)
        .map(|_| vec!["GET".into(), "tls:big".into()])
        .collect();
    let received = client.pipeline(&gets).unwrap();
    assert_eq!(received, 40 * reply.len());
    assert_eq!(client.call(&["PING"]).unwrap(), "+PONG\r\n");
}

#[test]
fn a_plain_or_silent_client_on_the_tls_port_gets_no_reply_and_a_close() {
    let certs = Certs::generate();
    let upstream = Standalone::start();
    let (proxy, tls_addr) = tls_proxy(
        &upstream,
        &certs,
        &["--set", "tls.handshake_timeout_ms=500"],
    );
    // A client that never starts the handshake is closed once its time is up.
    let mut silent = TcpStream::connect(&tls_addr).unwrap();
    let started = Instant::now();
    let (data, closed) = read_until_close(&mut silent, Duration::from_secs(5));
    assert!(closed && data.is_empty(), "a silent client kept: {data:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "closed before its timeout"
    );
    let mut stream = TcpStream::connect(&tls_addr).unwrap();
    stream.write_all(b"PING\r\n").unwrap();
    let (data, closed) = read_until_close(&mut stream, Duration::from_secs(5));
    assert!(
        closed,
        "the proxy keeps a plain client on its TLS port open"
    );
    // Nothing Redis-like comes back: at most a TLS alert record (content type 21).
    assert!(
        data.is_empty() || data[0] == 21,
        "a plain client got {:?}",
        String::from_utf8_lossy(&data)
    );
    let pong: String = redis::cmd("PING").query(&mut proxy.connect()).unwrap();
    assert_eq!(pong, "PONG", "the proxy serves on after refusing it");
}

/// Kills the child on drop, also when the test panics.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn with_an_empty_listen_only_the_tls_listener_serves() {
    // An empty `listen` was refused before there was a TLS listener to serve instead.
    let certs = Certs::generate();
    let upstream = Standalone::start();
    let tls_addr = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let (cert, key) = (certs.path("server.crt"), certs.path("server.key"));
    let _proxy = Killed(
        std::process::Command::new(env!("CARGO_BIN_EXE_slotbridge"))
            .args([
                "--listen",
                "",
                "--admin-listen",
                &admin,
                "--standalone",
                upstream.addr(),
            ])
            .args([
                "--tls-listen",
                &tls_addr,
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn slotbridge"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut client = loop {
        match TlsClient::connect(&tls_addr, &certs, None) {
            Ok(client) => break client,
            Err(e) => assert!(Instant::now() < deadline, "no TLS listener: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(client.call(&["PING"]).unwrap(), "+PONG\r\n");
}

#[test]
fn mutual_tls_yes_takes_only_certificates_of_the_ca() {
    let certs = Certs::generate();
    let upstream = Standalone::start();
    let ca = certs.path("ca.crt");
    let (_proxy, tls_addr) = tls_proxy(
        &upstream,
        &certs,
        &["--tls-ca-cert-file", &ca, "--set", "tls.auth_clients=yes"],
    );
    let mut alice = TlsClient::connect(&tls_addr, &certs, Some("alice")).unwrap();
    assert_eq!(alice.call(&["PING"]).unwrap(), "+PONG\r\n");
    // TLS 1.3 clients learn of a refused certificate on their first read.
    for client in [None, Some("stranger")] {
        let outcome = TlsClient::connect(&tls_addr, &certs, client)
            .and_then(|mut refused| refused.call(&["PING"]));
        assert!(outcome.is_err(), "{client:?} was served: {outcome:?}");
    }
    let without = redis_cli_tls(&tls_addr, &certs, &["PING"]).unwrap_or_else(|e| e);
    assert!(
        !without.contains("PONG"),
        "redis-cli without a certificate: {without}"
    );
    let cert = certs.path("alice.crt");
    let key = certs.path("alice.key");
    let with = redis_cli_tls(&tls_addr, &certs, &["--cert", &cert, "--key", &key, "PING"]);
    assert_eq!(with.unwrap().trim(), "PONG");
}

#[test]
fn mutual_tls_optional_takes_clients_without_a_certificate_but_no_bad_one() {
    let certs = Certs::generate();
    let upstream = Standalone::start();
    let ca = certs.path("ca.crt");
    let (_proxy, tls_addr) = tls_proxy(
        &upstream,
        &certs,
        &[
            "--tls-ca-cert-file",
            &ca,
            "--set",
            "tls.auth_clients=optional",
        ],
    );
    for client in [None, Some("alice")] {
        let mut served = TlsClient::connect(&tls_addr, &certs, client).unwrap();
        assert_eq!(served.call(&["PING"]).unwrap(), "+PONG\r\n", "{client:?}");
    }
    let outcome = TlsClient::connect(&tls_addr, &certs, Some("stranger"))
        .and_then(|mut refused| refused.call(&["PING"]));
    assert!(outcome.is_err(), "a certificate of another CA was taken");
}

#[test]
fn a_client_certificates_cn_names_its_acl_user() {
    let certs = Certs::generate();
    let upstream = Standalone::start();
    let config = new_dir("tls-config").join("slotbridge.yaml");
    fs::write(
        &config,
        "requirepass: default-secret\nusers:\n  - name: alice\n    password: alice-secret\n    \
         commands: [\"+@all\"]\n    keys: [\"~*\"]\n",
    )
    .unwrap();
    let ca = certs.path("ca.crt");
    let config = config.display().to_string();
    let (_proxy, tls_addr) = tls_proxy(
        &upstream,
        &certs,
        &[
            "--config",
            &config,
            "--tls-ca-cert-file",
            &ca,
            "--set",
            "tls.auth_clients=optional",
            "--set",
            "tls.auth_clients_user=CN",
        ],
    );
    let mut alice = TlsClient::connect(&tls_addr, &certs, Some("alice")).unwrap();
    assert_eq!(alice.call(&["ACL", "WHOAMI"]).unwrap(), "$5\r\nalice\r\n");
    assert_eq!(alice.call(&["SET", "cn:k", "1"]).unwrap(), "+OK\r\n");
    // Without a certificate a client logs in as usual.
    let mut anonymous = TlsClient::connect(&tls_addr, &certs, None).unwrap();
    let refused = anonymous.call(&["GET", "cn:k"]).unwrap();
    assert!(refused.starts_with("-NOAUTH"), "{refused}");
    assert_eq!(
        anonymous.call(&["AUTH", "alice", "alice-secret"]).unwrap(),
        "+OK\r\n"
    );
}

/// The count of configuration reloads with `result` on the proxy's metrics.
fn reloads(proxy: &Proxy, result: &str) -> u64 {
    let (_, body) = http_get(proxy.admin_addr(), "/metrics");
    let line = format!("slotbridge_config_reloads_total{{result=\"{result}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&line)?.trim().parse().ok())
        .unwrap_or(0)
}

fn reload_and_wait(proxy: &Proxy, result: &str) {
    let before = reloads(proxy, result);
    let (status, body) = http_raw(
        proxy.admin_addr(),
        b"POST /reload HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    );
    assert!(status < 300, "POST /reload: {status} {body}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while reloads(proxy, result) == before {
        assert!(Instant::now() < deadline, "no {result} reload counted");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn certificates_rotate_on_reload_and_a_bad_one_changes_nothing() {
    let certs = Certs::generate();
    let upstream = Standalone::start();
    let live = new_dir("tls-live");
    let (cert, key) = (live.join("proxy.crt"), live.join("proxy.key"));
    fs::copy(certs.dir.join("server.crt"), &cert).unwrap();
    fs::copy(certs.dir.join("server.key"), &key).unwrap();
    let config = live.join("slotbridge.yaml");
    fs::write(
        &config,
        format!(
            "tls:\n  cert_file: {}\n  key_file: {}\n",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let tls_addr = format!("127.0.0.1:{}", free_port());
    let config_arg = config.display().to_string();
    let proxy = Proxy::start(&[
        "--config",
        &config_arg,
        "--standalone",
        upstream.addr(),
        "--tls-listen",
        &tls_addr,
    ]);
    let mut connected = TlsClient::connect(&tls_addr, &certs, None).unwrap();
    assert_eq!(connected.server_cn().as_deref(), Some("slotbridge-a"));
    assert_eq!(connected.call(&["SET", "rot:k", "1"]).unwrap(), "+OK\r\n");

    fs::copy(certs.dir.join("server-b.crt"), &cert).unwrap();
    fs::copy(certs.dir.join("server-b.key"), &key).unwrap();
    reload_and_wait(&proxy, "ok");
    assert_eq!(connected.call(&["INCR", "rot:k"]).unwrap(), ":2\r\n");
    let fresh = TlsClient::connect(&tls_addr, &certs, None).unwrap();
    assert_eq!(fresh.server_cn().as_deref(), Some("slotbridge-b"));

    fs::write(
        &cert,
        "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    reload_and_wait(&proxy, "error");
    assert!(
        proxy.output().contains("tls.cert_file"),
        "the error names the option"
    );
    // `check-config` reads the files too, and says the same.
    let standalone = format!("standalone={}", upstream.addr());
    let tls_listen = format!("tls.listen={tls_addr}");
    let check = common::slotbridge(&[
        "check-config",
        &config_arg,
        "--set",
        &standalone,
        "--set",
        &tls_listen,
    ]);
    let said = String::from_utf8_lossy(&check.stderr);
    assert!(
        !check.status.success() && said.contains("tls.cert_file"),
        "{said}"
    );
    assert_eq!(connected.call(&["INCR", "rot:k"]).unwrap(), ":3\r\n");
    let after_bad = TlsClient::connect(&tls_addr, &certs, None).unwrap();
    assert_eq!(after_bad.server_cn().as_deref(), Some("slotbridge-b"));
}

/// `--set` flags for TLS to `certs`'s nodes, with the proxy's client certificate.
fn backend_tls_flags(certs: &Certs) -> Vec<String> {
    [
        "backend.tls.enabled=true".to_string(),
        format!("backend.tls.ca_cert_file={}", certs.path("ca.crt")),
        format!("backend.tls.cert_file={}", certs.path("alice.crt")),
        format!("backend.tls.key_file={}", certs.path("alice.key")),
    ]
    .into_iter()
    .flat_map(|set| ["--set".to_string(), set])
    .collect()
}

fn redirects(proxy: &Proxy) -> u64 {
    let (_, body) = http_get(proxy.admin_addr(), "/metrics");
    body.lines()
        .filter(|l| l.starts_with("slotbridge_redirects_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn a_tls_only_cluster_behind_the_proxy_including_a_moved_to_a_tls_port() {
    let certs = Certs::generate();
    let cluster = TlsCluster::start(&certs, 3);
    let seeds = cluster.addrs().join(",");
    let mut args = vec!["--cluster".to_string(), seeds];
    args.extend(backend_tls_flags(&certs));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let proxy = Proxy::start(&args);
    let mut con = proxy.connect();
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    for i in 0..50 {
        let value: i64 = redis::cmd("GET")
            .arg(format!("k{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(value, i);
    }
    // The other kinds of node connection speak TLS too: blocking, transaction, script and
    // Pub/Sub ones.
    let _: () = redis::cmd("RPUSH")
        .arg("q")
        .arg("job")
        .query(&mut con)
        .unwrap();
    let popped: (String, String) = redis::cmd("BLPOP").arg("q").arg(1).query(&mut con).unwrap();
    assert_eq!(popped.1, "job");
    let (incr,): (i64,) = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("tx{1}")
        .query(&mut con)
        .unwrap();
    assert_eq!(incr, 1);
    let script: String = redis::cmd("EVAL")
        .arg("return redis.call('GET', KEYS[1])")
        .arg(1)
        .arg("k7")
        .query(&mut con)
        .unwrap();
    assert_eq!(script, "7");
    let mut subscriber = proxy.connect();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe("news").unwrap();
    let published: i64 = redis::cmd("PUBLISH")
        .arg("news")
        .arg("hello")
        .query(&mut con)
        .unwrap();
    assert_eq!(published, 1);
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let message: String = pubsub.get_message().unwrap().get_payload().unwrap();
    assert_eq!(message, "hello");
    drop(pubsub);
    // 16 MB of writes in one pipeline: node connections over TLS meet a full socket, and
    // what rustls holds must reach the nodes without another request to push it.
    let big = "v".repeat(200_000);
    let mut pipe = redis::pipe();
    for i in 0..80 {
        pipe.cmd("SET").arg(format!("big{i}")).arg(&big).ignore();
    }
    pipe.query::<()>(&mut con).unwrap();
    let lens: Vec<usize> = (0..80)
        .map(|i| {
            redis::cmd("STRLEN")
                .arg(format!("big{i}"))
                .query(&mut con)
                .unwrap()
        })
        .collect();
    assert!(lens.iter().all(|&len| len == big.len()), "{lens:?}");
    // A key whose (empty) slot moves to another master: the proxy's map is stale, the old
    // owner answers MOVED with the new one's TLS port, and the proxy follows it over TLS.
    let key = "moved:{tls}";
    let slot: u16 = cluster
        .cli(&cluster.addrs()[0], &["CLUSTER", "KEYSLOT", key])
        .trim()
        .parse()
        .unwrap();
    let owner = cluster
        .addrs()
        .into_iter()
        .find(|addr| !cluster.cli(addr, &["GET", key]).contains("MOVED"))
        .expect("the slot's owner");
    let target = cluster.addrs().into_iter().find(|a| *a != owner).unwrap();
    let before = redirects(&proxy);
    cluster.move_empty_slot(slot, &target);
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("after-move")
        .query(&mut con)
        .unwrap();
    assert!(redirects(&proxy) > before, "no MOVED was followed");
    assert_eq!(cluster.cli(&target, &["GET", key]).trim(), "after-move");
    let value: String = redis::cmd("GET").arg(key).query(&mut con).unwrap();
    assert_eq!(value, "after-move");
}

#[test]
fn migrate_and_inspect_reach_a_tls_cluster_by_rediss_urls() {
    let certs = Certs::generate();
    let cluster = TlsCluster::start(&certs, 3);
    let legacy = Standalone::start();
    let mut con = legacy.connect();
    for key in ["tm:chat:c1", "tm:chat:c2", "tm:checkpoint:k"] {
        let _: () = redis::cmd("SET").arg(key).arg("v").query(&mut con).unwrap();
    }
    let ca = certs.path("ca.crt");
    let cert = certs.path("alice.crt");
    let key = certs.path("alice.key");
    let tls = [
        "--tls-ca-cert-file",
        &ca,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
    ];
    let seed = format!("rediss://{}", cluster.addrs()[1]);
    let source = format!("redis://{}", legacy.addr());
    let mut migrate = vec![
        "migrate",
        "--source",
        &source,
        "--cluster",
        &seed,
        "--prefix",
        "tm",
    ];
    migrate.extend(tls);
    let out = common::slotbridge(&migrate);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let mut inspect = vec!["inspect", "--source", &seed, "--prefix", "tm"];
    inspect.extend(tls);
    let out = common::slotbridge(&inspect);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("cluster ("), "{text}");
    let family = |name: &str| {
        text.lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|words| words.first() == Some(&name))
            .and_then(|words| words.get(1)?.parse::<u64>().ok())
    };
    assert_eq!(family("chat"), Some(2), "{text}");
    assert_eq!(family("checkpoint"), Some(1), "{text}");
    assert!(text.contains("marker: cluster:v1"), "{text}");
    // Nodes with `tls-auth-clients yes` refuse a client without a certificate.
    let out = common::slotbridge(&[
        "inspect",
        "--source",
        &seed,
        "--prefix",
        "tm",
        "--tls-insecure-skip-verify",
    ]);
    assert!(
        !out.status.success(),
        "the nodes require a client certificate"
    );
    // `server_name` is the name checked instead of the nodes' IP address: one the
    // certificate has passes, another fails on the certificate.
    for (name, passes) in [("localhost", true), ("other.example", false)] {
        let mut args = vec!["inspect", "--source", &seed, "--prefix", "tm"];
        args.extend(tls);
        args.extend(["--tls-server-name", name]);
        let out = common::slotbridge(&args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), passes, "{name}: {text}");
        if !passes {
            assert!(text.contains("certificate"), "{name}: {text}");
        }
    }
}
