//! Issue 39, the daemon's doors: a flood of connections on the metrics port, oneshot logs past
//! `log_max_total`, and a database whose file system turns read-only under the daemon.

use crate::common::*;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(300);

/// A port on loopback that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A daemon killed when the test lets go of it (a test that fails before it exits).
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `sweepd run` for `sweep` with its descriptors limited to `nofile` (soft and hard:
/// the daemon may raise its soft limit, never past the hard one).
fn spawn_limited(sweep: &Sweep, nofile: u64) -> Daemon {
    let mut cmd = sweep.sweepd(&["run"]);
    let log = std::fs::File::create(sweep.path("sweepd.stderr")).unwrap();
    cmd.stdout(Stdio::null()).stderr(log);
    // SAFETY: setrlimit(2) is async-signal-safe and touches nothing but the child.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Daemon(cmd.spawn().expect("spawn sweepd"))
}

/// A thread that floods a port until stopped (or dropped).
struct Flood {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl Flood {
    /// Stops the flood; the most connections it held at once.
    fn stop(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap())
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Opens connections to `addr` and holds them without a byte sent, `hold` at a time, opening a
/// new one whenever the daemon closes one, until stopped.
fn flood(addr: SocketAddr, hold: usize) -> Flood {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let thread = std::thread::spawn(move || {
        let stop = stopped;
        let mut held: Vec<TcpStream> = Vec::new();
        let mut most = 0;
        let mut buf = [0u8; 64];
        while !stop.load(Ordering::Relaxed) {
            // Connections the daemon closed (end of file, a reset) make room for new ones.
            held.retain_mut(|s| {
                matches!(s.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            });
            while held.len() < hold && !stop.load(Ordering::Relaxed) {
                // Past the listen backlog a connect hangs until the daemon accepts.
                match TcpStream::connect_timeout(&addr, Duration::from_millis(50)) {
                    Ok(s) => {
                        s.set_nonblocking(true).unwrap();
                        held.push(s);
                        most = most.max(held.len());
                    }
                    Err(_) => break,
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        most
    });
    Flood {
        stop,
        thread: Some(thread),
    }
}

/// Waits (bounded) for `child` to exit; kills it past the limit.
fn wait_child(child: &mut Child, sweep: &Sweep) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "sweepd did not exit within {LIMIT:?}:\n{}",
                sweep.daemon_stderr()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The descriptors the daemon may hold in this test: enough for its database, its runtime and
/// two workers, far fewer than the flood's connections.
const DAEMON_NOFILE: u64 = 64;

#[test]
fn a_connection_flood_on_the_metrics_port_leaves_the_study_finishing_every_trial() {
    // Regression: the metrics listener accepted every connection, so a local loop of idle
    // connections took all of the daemon's descriptors; the next worker start failed with
    // "Too many open files" and `sweepd run` exited 1. Oneshot workers: every trial starts one.
    let port = free_port();
    let n_trials = 30;
    let cfg = Cfg {
        n_trials: Some(n_trials),
        max_par: 2,
        mode: "oneshot",
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.05");
    let toml = format!(
        "{}\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n",
        cfg.to_toml()
    );
    let sweep = Sweep::with_toml(&toml);
    let mut daemon = spawn_limited(&sweep, DAEMON_NOFILE);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_until(LIMIT, "the metrics port to listen", || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok()
    });
    let flooding = flood(addr, 4 * DAEMON_NOFILE as usize);
    let status = wait_child(&mut daemon.0, &sweep);
    let most = flooding.stop();
    let err = sweep.daemon_stderr();
    eprintln!("the flood held up to {most} connections at once");
    assert!(
        most as u64 > DAEMON_NOFILE,
        "the flood must hold more connections than the daemon has descriptors"
    );
    assert!(status.success(), "exit {status} under the flood:\n{err}");
    assert_eq!(
        sweep.count("COMPLETE"),
        n_trials as usize,
        "{:?}\n{err}",
        sweep.states()
    );
}

/// The `worker-*` files in `dir` and their total size.
fn worker_logs(dir: &Path) -> (usize, u64) {
    let mut files = 0;
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with("worker-") {
            files += 1;
            total += e.metadata().unwrap().len();
        }
    }
    (files, total)
}

#[test]
fn three_hundred_oneshot_trials_leave_their_logs_within_log_max_total() {
    // Regression: the log directory was trimmed to `log_max_total` only when a log rotated,
    // which a oneshot worker's short log never does: 300 trials with a 64 KiB cap left 300
    // files, 1.2 MiB.
    const PRINTED: usize = 4000;
    let n_trials = 300;
    let max_par = 4;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("oneshot.py");
    std::fs::write(
        &script,
        format!(
            "import os, sys\nsys.stderr.write('x' * {PRINTED} + '\\n')\n\
             with open(os.environ['SWEEPD_RESULT_FILE'], 'w') as f:\n    f.write('1.5')\n"
        ),
    )
    .unwrap();
    let cfg = Cfg {
        n_trials: Some(n_trials),
        max_par,
        mode: "oneshot",
        command: vec![python(), "-S".into(), script.to_str().unwrap().into()],
        worker_extra: "log_max_bytes = \"16KiB\"\nlog_max_total = \"64KiB\"\n".into(),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sweep.count("COMPLETE"), n_trials as usize);
    let (files, total) = worker_logs(&sweep.path("logs"));
    eprintln!("{files} worker logs, {total} bytes");
    // The cap, give or take the logs of the last trials, written after the last trim.
    let slack = max_par as u64 * (PRINTED as u64 + 1024);
    assert!(
        total <= (64 << 10) + slack,
        "{files} worker logs hold {total} bytes, past log_max_total (64 KiB)"
    );
}

#[test]
fn a_database_turned_read_only_ends_the_run_saying_so_not_with_a_transaction_depth_error() {
    // Regression: a write that failed on a file system turned read-only left SQLite's
    // connection, as sqlx counts it, inside a transaction SQLite had already rolled back (its
    // ROLLBACK then failed too); that write's error was only logged (a heartbeat, an
    // intermediate value), and the next transaction on the pool's one connection ended the run
    // with sqlx's "attempted to call begin_with at non-zero transaction depth".
    // Long trials: the housekeeping's writes, whose failures are only logged, meet the
    // read-only file system before a trial's finish does.
    let cfg = Cfg {
        n_trials: Some(100),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "2");
    let ms = mounted_sweep(&cfg, |dir| {
        Mount::ext4(&dir.join("fs.img"), &dir.join("fs"))
    });
    let sweep = &*ms;
    let mut child = sweep.spawn_run();
    wait_until(LIMIT, "a trial to complete", || {
        count_in(sweep, "COMPLETE") >= 1
    });
    must("sync", &["-f", sweep.db.to_str().unwrap()]);
    let dev = ms.mount.source();
    let dev = Path::new(&dev).file_name().unwrap().to_str().unwrap();
    // What `errors=remount-ro` does on an error; `mount -o remount,ro` is refused while the
    // database is open for writing.
    std::fs::write(format!("/sys/fs/ext4/{dev}/trigger_fs_error"), "1")
        .expect("trigger an ext4 error");
    let status = wait_child(&mut child, sweep);
    let err = sweep.daemon_stderr();
    let last = err
        .lines()
        .rev()
        .find(|l| l.starts_with("sweepd: "))
        .unwrap_or_default();
    eprintln!("exit {status}: {last}");
    assert!(
        !err.contains("transaction depth"),
        "sqlx's words reached the operator:\n{err}"
    );
    assert_eq!(status.code(), Some(3), "the database's exit code:\n{err}");
    assert!(
        last.contains(&sweep.db.display().to_string()) && last.contains("read-only"),
        "the last word names the database and says its file system is read-only: {last:?}"
    );
}

#[test]
fn a_worker_start_short_of_descriptors_waits_for_them_instead_of_ending_the_run() {
    // Regression: a worker start that failed with "Too many open files" (creating the channel's
    // socket pair, the log, the pipes) ended `sweepd run` with exit 1, and its trial was failed.
    // Now it is a shortage that passes: here eight oneshot slots want more descriptors than the
    // daemon has (about 15 of its own, 5 a worker and a few more while one starts), and each
    // start waits until a finished trial's worker gives some back.
    let n_trials = 24;
    let cfg = Cfg {
        n_trials: Some(n_trials),
        max_par: 8,
        mode: "oneshot",
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.3");
    let sweep = Sweep::new(&cfg);
    let mut daemon = spawn_limited(&sweep, 32);
    let status = wait_child(&mut daemon.0, &sweep);
    let err = sweep.daemon_stderr();
    assert!(status.success(), "exit {status}:\n{err}");
    assert!(
        err.contains("cannot start a worker for now"),
        "no start was short of descriptors: the limit is too high to test anything\n{err}"
    );
    // Every trial ran once: none was failed (and charged) for its worker's start.
    assert_eq!(
        sweep.count("COMPLETE"),
        n_trials as usize,
        "{:?}",
        sweep.states()
    );
    assert_eq!(sweep.count("FAIL"), 0, "{err}");
}
