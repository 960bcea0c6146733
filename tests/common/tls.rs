//! TLS for the tests: a throwaway CA with server and client certificates made with the
//! `openssl` CLI, a synchronous rustls client that can show the certificate it was given,
//! and a cluster of `redis-server` nodes that speak TLS only (`--port 0`, `tls-cluster yes`).
//!
//! Invariants: certificates live in their test's own directory and are valid for a day;
//! every node is killed when its cluster drops. A missing `openssl` fails the test with the
//! package to install.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use super::cluster::run_redis_cli;
use super::ports::free_cluster_port;
use super::process::{new_dir, require_tool, ManagedProcess};
use super::raw::{read_some, reply_complete, split_replies};

/// A CA and the certificates it signed, as PEM files in one directory: `ca`, `server`
/// (CN `slotbridge-a`, for 127.0.0.1 and localhost, server and client use), `server-b`
/// (CN `slotbridge-b`, the same names), `alice` (a client, CN `alice`), and `stranger`
/// (a client signed by another CA, `other-ca`). Each has `NAME.crt` and `NAME.key`.
pub struct Certs {
    pub dir: PathBuf,
}

impl Certs {
    /// Makes the CA and certificates (P-256 keys: quick to make).
    pub fn generate() -> Certs {
        require_openssl();
        let dir = new_dir("certs");
        for ca in ["ca", "other-ca"] {
            openssl(
                &dir,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                    "-days",
                    "1",
                    "-subj",
                    &format!("/CN=slotbridge test {ca}"),
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                ],
            );
        }
        let server_ext = "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
                          extendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n";
        let client_ext = "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n";
        let certs = Certs { dir };
        certs.sign("server", "slotbridge-a", "ca", server_ext);
        certs.sign("server-b", "slotbridge-b", "ca", server_ext);
        certs.sign("alice", "alice", "ca", client_ext);
        certs.sign("stranger", "alice", "other-ca", client_ext);
        certs
    }

    fn sign(&self, name: &str, cn: &str, ca: &str, extensions: &str) {
        let ext = self.dir.join(format!("{name}.ext"));
        fs::write(&ext, extensions).expect("write extensions");
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                &format!("/CN={cn}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ],
        );
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                &format!("{ca}.crt"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.crt"),
            ],
        );
    }

    /// The path of `file` (e.g. `ca.crt`), as text for flags.
    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }
}

/// Panics unless `openssl` runs, naming the package that provides it.
pub fn require_openssl() {
    let found = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        found,
        "`openssl` was not found on PATH; the TLS tests make their certificates with it. \
         Install it with: sudo apt-get install -y openssl"
    );
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl: {e}"));
    assert!(
        output.status.success(),
        "openssl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A client connection over TLS (rustls, blocking), speaking RESP.
pub struct TlsClient {
    stream: StreamOwned<ClientConnection, TcpStream>,
}

impl TlsClient {
    /// Connects to `addr` trusting `ca`, presenting `client` (`NAME` of a [`Certs`] pair)
    /// if given, and completes the handshake.
    pub fn connect(addr: &str, certs: &Certs, client: Option<&str>) -> Result<TlsClient, String> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(certs.dir.join("ca.crt")).expect("ca.crt") {
            roots.add(cert.expect("CA PEM")).expect("CA certificate");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots);
        let config = match client {
            Some(name) => {
                let chain = CertificateDer::pem_file_iter(certs.dir.join(format!("{name}.crt")))
                    .expect("client certificate")
                    .map(|cert| cert.expect("client PEM"))
                    .collect();
                let key = PrivateKeyDer::from_pem_file(certs.dir.join(format!("{name}.key")))
                    .expect("client key");
                builder
                    .with_client_auth_cert(chain, key)
                    .expect("client auth")
            }
            None => builder.with_no_client_auth(),
        };
        let name = ServerName::try_from("localhost").expect("server name");
        let mut conn = ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
        let mut tcp = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        tcp.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)
                .map_err(|e| format!("TLS handshake with {addr}: {e}"))?;
        }
        Ok(TlsClient {
            stream: StreamOwned::new(conn, tcp),
        })
    }

    /// Sends one command and reads its reply (as raw RESP text).
    pub fn call(&mut self, args: &[&str]) -> Result<String, String> {
        self.stream
            .write_all(&super::resp_command(args))
            .and_then(|()| self.stream.flush())
            .map_err(|e| format!("write: {e}"))?;
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        while !reply_complete(&reply) {
            match read_some(&mut self.stream, &mut chunk) {
                Ok(0) => {
                    return Err(format!(
                        "closed after {:?}",
                        String::from_utf8_lossy(&reply)
                    ))
                }
                Ok(n) => reply.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
        Ok(String::from_utf8_lossy(&reply).into_owned())
    }

    /// Sends `commands` in one write, then reads their replies: how many bytes of replies
    /// came, in order, each checked to start with `+`, `$` or `:` (no error).
    pub fn pipeline(&mut self, commands: &[Vec<String>]) -> Result<usize, String> {
        let wire: Vec<u8> = commands
            .iter()
            .flat_map(|args| super::resp_command(args))
            .collect();
        self.stream
            .write_all(&wire)
            .and_then(|()| self.stream.flush())
            .map_err(|e| format!("write: {e}"))?;
        let mut data = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        while split_replies(&data).len() < commands.len() {
            match read_some(&mut self.stream, &mut chunk) {
                Ok(0) => return Err("closed before every reply".to_string()),
                Ok(n) => data.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
        for reply in split_replies(&data) {
            if !matches!(reply.first(), Some(b'+' | b'$' | b':')) {
                return Err(format!("error reply {:?}", String::from_utf8_lossy(&reply)));
            }
        }
        Ok(data.len())
    }

    /// The CN of the certificate the server presented.
    pub fn server_cn(&self) -> Option<String> {
        let certs = self.stream.conn.peer_certificates()?;
        slotbridge::tls::common_name(certs.first()?)
    }
}

/// A cluster of redis-server nodes reached only over TLS (`--port 0 --tls-port P`,
/// `tls-cluster yes`, `tls-replication yes`), requiring client certificates, all masters.
pub struct TlsCluster {
    nodes: Vec<(String, ManagedProcess)>,
    cli_tls: Vec<String>,
}

impl TlsCluster {
    /// Starts `masters` nodes with `certs`'s `server` certificate and builds the cluster.
    pub fn start(certs: &Certs, masters: usize) -> TlsCluster {
        require_tool("redis-server");
        let cli_tls = vec![
            "--tls".to_string(),
            "--cacert".to_string(),
            certs.path("ca.crt"),
            "--cert".to_string(),
            certs.path("server.crt"),
            "--key".to_string(),
            certs.path("server.key"),
        ];
        let mut cluster = TlsCluster {
            nodes: Vec::new(),
            cli_tls,
        };
        for _ in 0..masters {
            let port = free_cluster_port();
            let dir = new_dir(&format!("redis-tls-{port}"));
            let mut command = Command::new("redis-server");
            command
                .current_dir(&dir)
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--tls-cert-file", &certs.path("server.crt")])
                .args(["--tls-key-file", &certs.path("server.key")])
                .args(["--tls-ca-cert-file", &certs.path("ca.crt")])
                .args(["--tls-auth-clients", "yes"])
                .args(["--tls-cluster", "yes", "--tls-replication", "yes"])
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
                .args(["--logfile", &dir.join("redis.log").display().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let process = ManagedProcess::spawn(&mut command, &dir)
                .unwrap_or_else(|e| panic!("cannot spawn redis-server: {e}"));
            cluster.nodes.push((format!("127.0.0.1:{port}"), process));
        }
        for addr in cluster.addrs() {
            cluster.wait_for(&addr, &["PING"], "PONG");
        }
        let mut create = vec!["--cluster".to_string(), "create".to_string()];
        create.extend(cluster.addrs());
        create.extend(["--cluster-yes".to_string()]);
        let args: Vec<&str> = cluster
            .cli_tls
            .iter()
            .chain(&create)
            .map(String::as_str)
            .collect();
        run_redis_cli(&args, Duration::from_secs(60)).expect("redis-cli --cluster create");
        for addr in cluster.addrs() {
            cluster.wait_for(&addr, &["CLUSTER", "INFO"], "cluster_state:ok");
        }
        cluster
    }

    /// The nodes' addresses (their TLS ports).
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|(addr, _)| addr.clone()).collect()
    }

    /// `redis-cli` over TLS to `addr`, running `args`.
    pub fn cli(&self, addr: &str, args: &[&str]) -> String {
        let (host, port) = addr.rsplit_once(':').expect("host:port");
        let mut all: Vec<&str> = self.cli_tls.iter().map(String::as_str).collect();
        all.extend(["-h", host, "-p", port]);
        all.extend(args);
        run_redis_cli(&all, Duration::from_secs(10)).unwrap_or_else(|e| e)
    }

    fn wait_for(&self, addr: &str, args: &[&str], wanted: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let output = self.cli(addr, args);
            if output.contains(wanted) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{addr}: no {wanted} in reply to {args:?}: {output}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Gives `slot` (empty) to the node at `to`, telling every node.
    pub fn move_empty_slot(&self, slot: u16, to: &str) {
        let id = self.cli(to, &["CLUSTER", "MYID"]).trim().to_string();
        let slot = slot.to_string();
        for addr in self.addrs() {
            let reply = self.cli(&addr, &["CLUSTER", "SETSLOT", &slot, "NODE", &id]);
            assert!(reply.contains("OK"), "{addr}: SETSLOT: {reply}");
        }
    }
}
