//! A Ballista cluster on this machine for the tests: `tally-scheduler` and `tally-executor`
//! (the binaries of this crate) started as separate processes on 127.0.0.1, each on ports
//! the system picked free, and stopped when the test is done.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a process has to come up.
const START: Duration = Duration::from_secs(60);

/// A scheduler and its executors.
#[derive(Debug)]
pub struct LocalCluster {
    pub port: u16,
    scheduler: Child,
    executors: Vec<Child>,
    /// Lines the executors log, by executor (read in the background).
    pub logs: Vec<mpsc::Receiver<String>>,
    work: tempfile::TempDir,
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

fn wait_for_port(port: u16, who: &str, child: &mut Child) {
    let deadline = Instant::now() + START;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{who} exited with {status} before listening on {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{who} did not listen on {port} within {START:?}");
}

/// Forwards each line of `from` to a channel (and to this test's stderr when
/// `TALLY_CLUSTER_LOGS` is set).
fn lines(from: impl std::io::Read + Send + 'static, who: String) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let echo = std::env::var_os("TALLY_CLUSTER_LOGS").is_some();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if echo {
                eprintln!("[{who}] {line}");
            }
            if tx.send(line).is_err() {
                // Nobody listens any more; keep draining so the process never blocks.
                continue;
            }
        }
    });
    rx
}

impl LocalCluster {
    /// A scheduler and `executors` executors, each executor registered before this returns.
    pub fn start(executors: usize) -> LocalCluster {
        let work = tempfile::tempdir().expect("a working folder");
        let port = free_port();
        let mut scheduler = Command::new(env!("CARGO_BIN_EXE_tally-scheduler"))
            .args(["--bind-port", &port.to_string()])
            .env("RUST_LOG", "warn,ballista=info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tally-scheduler starts");
        let registrations = lines(
            scheduler.stderr.take().expect("scheduler stderr"),
            "scheduler".into(),
        );
        wait_for_port(port, "tally-scheduler", &mut scheduler);
        let mut cluster = LocalCluster {
            port,
            scheduler,
            executors: Vec::new(),
            logs: Vec::new(),
            work,
        };
        for _ in 0..executors {
            cluster.add_executor();
        }
        // Each executor registers with the scheduler when it starts (push scheduling).
        let deadline = Instant::now() + START;
        let mut registered = 0;
        while registered < executors {
            let left = deadline.saturating_duration_since(Instant::now());
            match registrations.recv_timeout(left) {
                Ok(line) if line.contains("register executor request") => registered += 1,
                Ok(_) => {}
                Err(_) => panic!(
                    "{registered} of {executors} executors registered with the scheduler within {START:?}"
                ),
            }
        }
        // Keep draining the scheduler's log.
        std::thread::spawn(move || for _ in registrations {});
        cluster
    }

    /// Starts one more executor.
    pub fn add_executor(&mut self) {
        let i = self.executors.len();
        let dir = self.work.path().join(format!("executor-{i}"));
        std::fs::create_dir_all(&dir).expect("executor folder");
        let (flight, grpc, health) = (free_port(), free_port(), free_port());
        let mut child = Command::new(env!("CARGO_BIN_EXE_tally-executor"))
            .args([
                "--scheduler-port",
                &self.port.to_string(),
                "--bind-port",
                &flight.to_string(),
                "--bind-grpc-port",
                &grpc.to_string(),
                "--bind-health-port",
                &health.to_string(),
                "--vcores",
                "2",
                "--work-dir",
            ])
            .arg(&dir)
            .env("RUST_LOG", "warn,ballista=info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tally-executor starts");
        self.logs.push(lines(
            child.stderr.take().expect("executor stderr"),
            format!("executor {i}"),
        ));
        wait_for_port(flight, "tally-executor", &mut child);
        self.executors.push(child);
    }

    /// `df://127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("df://127.0.0.1:{}", self.port)
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for child in &mut self.executors {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = self.scheduler.kill();
        let _ = self.scheduler.wait();
    }
}
