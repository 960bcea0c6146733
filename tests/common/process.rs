//! Child processes that never outlive the test binary, and the temp dirs they live in.
//!
//! Invariants: every process a test starts runs in its own directory under one per-process run
//! directory, and its pid is written to `proc.pid` in that directory while it may be alive.
//! A `ManagedProcess` is killed (SIGKILL) and reaped on drop, also while unwinding from a panic.
//! Statics are never dropped, so a watchdog shell started with the run directory waits for the
//! test process to disappear (normal exit, panic, or SIGKILL) and then kills every pid still
//! listed and removes the run directory. A test binary that runs past [`HANG_LIMIT`] has a
//! test that hangs: it exits with a message saying so (see `node::try_connect`, whose reads
//! have no timeout), naming the tests still running that started a process or opened a
//! connection through the harness ([`note_test`]).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Name of the file that holds the pid of a directory's process while it runs.
const PID_FILE: &str = "proc.pid";

/// The shell loop that outlives the test process; `$1` is its pid, `$2` the run directory.
const WATCHDOG_SCRIPT: &str = r#"
while kill -0 "$1" 2>/dev/null; do sleep 1; done
for f in "$2"/*/proc.pid; do
  [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
done
rm -rf "$2"
"#;

/// How long one test binary may run before it is taken to hang (the longest takes about a
/// minute).
const HANG_LIMIT: Duration = Duration::from_secs(20 * 60);

/// Panics unless `tool` is on PATH, naming the Debian packages that provide it.
pub fn require_tool(tool: &str) {
    require_tool_for(
        tool,
        "the integration tests need a real Redis",
        "sudo apt-get install -y redis-server redis-tools",
    );
}

/// Panics unless `tool` answers `--version`, saying `why` it is needed and how to `install` it.
pub fn require_tool_for(tool: &str, why: &str, install: &str) {
    let found = Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        found,
        "`{tool}` was not found on PATH; {why}. Install it with: {install}"
    );
}

/// The per-process directory that holds every test server's directory; created once, together
/// with the watchdog that removes it when the test process is gone.
pub fn run_dir() -> &'static Path {
    static RUN_DIR: OnceLock<PathBuf> = OnceLock::new();
    RUN_DIR.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir =
            std::env::temp_dir().join(format!("slotbridge-it-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create test directory {}: {e}", dir.display()));
        start_watchdog(&dir);
        start_hang_limit();
        dir
    })
}

fn start_hang_limit() {
    std::thread::spawn(|| {
        std::thread::sleep(HANG_LIMIT);
        let running = running_tests();
        let named = if running.is_empty() {
            "no test that started a process or opened a connection through the harness is \
             still running"
                .to_string()
        } else {
            format!("still running: {}", running.join(", "))
        };
        eprintln!(
            "this test binary has run for {} minutes: a test hangs (a read waiting for a reply \
             that never comes?); {named}",
            HANG_LIMIT.as_secs() / 60
        );
        std::process::exit(101);
    });
}

/// The tests running now that called [`note_test`], by name.
fn running() -> &'static Mutex<BTreeSet<String>> {
    static RUNNING: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
    RUNNING.get_or_init(Mutex::default)
}

/// A test counted as running; uncounted when its thread ends.
struct Running(String);

impl Drop for Running {
    fn drop(&mut self) {
        running()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.0);
    }
}

thread_local! {
    static THIS_TEST: RefCell<Option<Running>> = const { RefCell::new(None) };
}

/// Counts the calling test as running until its thread ends, so that the hang limit can name
/// it: the test harness runs each test on a thread named after it. Called where tests start
/// processes and open connections; a thread without a name, `main` and a runtime's workers
/// (`tokio-runtime-worker`) are not a test's.
pub fn note_test() {
    let _ = THIS_TEST.try_with(|this| {
        let mut this = this.borrow_mut();
        if this.is_some() {
            return;
        }
        let thread = std::thread::current();
        let Some(name) = thread
            .name()
            .filter(|name| *name != "main" && !name.starts_with("tokio-"))
        else {
            return;
        };
        let name = name.to_string();
        running()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.clone());
        *this = Some(Running(name));
    });
}

/// The names of the tests counted as running now (see [`note_test`]), in order.
pub fn running_tests() -> Vec<String> {
    running()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .cloned()
        .collect()
}

fn start_watchdog(dir: &Path) {
    // The handle is dropped on purpose: the watchdog must outlive this process.
    let spawned = Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG_SCRIPT)
        .arg("slotbridge-test-watchdog")
        .arg(std::process::id().to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        panic!("cannot start the cleanup watchdog (`sh`): {e}");
    }
}

/// A fresh, empty directory under the run directory; `label` makes it recognisable.
pub fn new_dir(label: &str) -> PathBuf {
    note_test();
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = run_dir().join(format!("{label}-{seq}"));
    fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create test directory {}: {e}", dir.display()));
    dir
}

/// Removes a directory tree, ignoring one that is already gone.
pub fn remove_dir(dir: &Path) {
    if let Err(e) = fs::remove_dir_all(dir) {
        if e.kind() != io::ErrorKind::NotFound {
            eprintln!("warning: cannot remove {}: {e}", dir.display());
        }
    }
}

/// A running child process, registered with the watchdog, killed and reaped on drop.
pub struct ManagedProcess {
    child: Child,
    pid_file: PathBuf,
    exited: Option<ExitStatus>,
}

impl ManagedProcess {
    /// Spawns `command` and records its pid in `dir` (a directory made by [`new_dir`]).
    pub fn spawn(command: &mut Command, dir: &Path) -> io::Result<ManagedProcess> {
        let child = command.stdin(Stdio::null()).spawn()?;
        let pid_file = dir.join(PID_FILE);
        let process = ManagedProcess {
            child,
            pid_file,
            exited: None,
        };
        // Written after spawn: a window in which the watchdog would miss the pid exists, but
        // the normal Drop path still covers it.
        fs::write(&process.pid_file, process.child.id().to_string())?;
        Ok(process)
    }

    /// The operating-system pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by name (`"HUP"`, `"STOP"`, `"SIGTERM"`...) with `kill -s`.
    pub fn send_signal(&self, signal: &str) {
        let name = signal.strip_prefix("SIG").unwrap_or(signal);
        let status = Command::new("kill")
            .args(["-s", name, &self.pid().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(
            status.success(),
            "kill -s {name} {} failed ({status})",
            self.pid()
        );
    }

    /// The exit status if the process has exited, without blocking.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.mark_exited(status);
            }
        }
        self.exited
    }

    /// Waits up to `timeout` for the process to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit_status() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process with SIGKILL (no-op once it has exited) and reaps it.
    pub fn kill(&mut self) {
        if self.try_exit_status().is_some() {
            return;
        }
        let _ = self.child.kill();
        if let Ok(status) = self.child.wait() {
            self.mark_exited(status);
        }
    }

    fn mark_exited(&mut self, status: ExitStatus) {
        self.exited = Some(status);
        // The pid may be reused by an unrelated process from now on.
        let _ = fs::remove_file(&self.pid_file);
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
