//! Shared harness for the integration tests: a study in a temp dir, the real `sweepd` binary,
//! real Python workers, and the database read back with sqlx or with real Optuna.
#![allow(dead_code)]

mod gpu;
mod postgres;
#[allow(unused_imports)] // not every test file uses GPUs
pub use gpu::*;
#[allow(unused_imports)] // not every test file uses PostgreSQL
pub use postgres::*;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Python that has Optuna: `make test` sets SWEEPD_TEST_PYTHON to the venv's.
pub fn python() -> String {
    if let Ok(p) = std::env::var("SWEEPD_TEST_PYTHON") {
        return p;
    }
    let venv = repo().join(".venv/bin/python");
    assert!(
        venv.exists(),
        "no test Python: run the tests through `make test` (it creates .venv with optuna)"
    );
    venv.to_string_lossy().into_owned()
}

/// A CPU study of `n_trials` on one slot whose worker is the Python `script`, run as
/// `python script HELPER_DIR gate`: the helper's directory (`python/`) to import
/// `sweepd_worker` from, then the path of a file the test creates to let a trial go on.
pub fn gated_study(n_trials: u64, script: &Path, gate: &Path) -> Cfg {
    Cfg {
        n_trials: Some(n_trials),
        max_par: 1,
        command: vec![
            python(),
            script.to_str().unwrap().to_owned(),
            repo().join("python").to_str().unwrap().to_owned(),
            gate.to_str().unwrap().to_owned(),
        ],
        params: String::new(),
        ..Cfg::default()
    }
}

/// A study config. `Default` is a persistent faulty_worker study over four params.
#[derive(Clone)]
pub struct Cfg {
    pub name: String,
    pub n_trials: Option<u64>,
    pub max_par: usize,
    pub mode: &'static str,
    pub sampler: &'static str,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Extra lines for the [worker] table.
    pub worker_extra: String,
    /// Extra lines for the [study] table.
    pub study_extra: String,
    pub params: String,
    pub shutdown_grace: &'static str,
    /// `[storage]` lines; `None`: the SQLite file `study.db` in the study dir.
    pub storage: Option<String>,
}

pub const DEFAULT_PARAMS: &str = r#"
[params.x]
type = "float"
low = -2.0
high = 2.0

[params.lr]
type = "float"
low = 1e-5
high = 1e-1
log = true

[params.n]
type = "int"
low = 0
high = 10
step = 2

[params.opt]
type = "categorical"
choices = ["adam", "sgd", "rmsprop"]
"#;

impl Default for Cfg {
    fn default() -> Cfg {
        Cfg {
            name: "t".into(),
            n_trials: Some(10),
            max_par: 2,
            mode: "persistent",
            sampler: "random",
            command: vec![
                python(),
                repo()
                    .join("tests/workers/faulty_worker.py")
                    .to_string_lossy()
                    .into_owned(),
            ],
            env: Vec::new(),
            worker_extra: String::new(),
            study_extra: String::new(),
            params: DEFAULT_PARAMS.into(),
            shutdown_grace: "5s",
            storage: None,
        }
    }
}

impl Cfg {
    pub fn env(mut self, k: &str, v: &str) -> Cfg {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn to_toml(&self) -> String {
        let q = |s: &str| serde_json::to_string(s).expect("string");
        let mut t = format!(
            "[study]\nname = {}\ndirection = \"minimize\"\nsampler = \"{}\"\nseed = 7\n",
            q(&self.name),
            self.sampler
        );
        if let Some(n) = self.n_trials {
            t.push_str(&format!("n_trials = {n}\n"));
        }
        t.push_str(&self.study_extra);
        match &self.storage {
            Some(lines) => t.push_str(&format!("\n[storage]\n{lines}\n\n[worker]\n")),
            None => t.push_str("\n[storage]\nurl = \"sqlite:///study.db\"\n\n[worker]\n"),
        }
        let argv: Vec<String> = self.command.iter().map(|a| q(a)).collect();
        t.push_str(&format!(
            "command = [{}]\nmode = \"{}\"\nmax_par = {}\nshutdown_grace = \"{}\"\nlog_dir = \"logs\"\n",
            argv.join(", "),
            self.mode,
            self.max_par,
            self.shutdown_grace
        ));
        t.push_str(&self.worker_extra);
        t.push_str("\n[worker.env]\n");
        for (k, v) in &self.env {
            t.push_str(&format!("{k} = {}\n", q(v)));
        }
        t.push_str(&self.params);
        t
    }
}

/// A study directory with its config written.
pub struct Sweep {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub db: PathBuf,
    /// Environment for the daemon (and so its workers), e.g. the fake NVML.
    pub env: Vec<(String, String)>,
    /// The umask the daemon starts with; `None` keeps the test process's own.
    pub umask: Option<u32>,
    /// Daemons started in the background: killed when the study is dropped, so that a test
    /// that fails before waiting for its daemon leaves none behind.
    spawned: std::sync::Mutex<Vec<u32>>,
}

impl Drop for Sweep {
    fn drop(&mut self) {
        for pid in self.spawned.lock().unwrap().iter() {
            if alive(*pid as i32) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

impl Sweep {
    pub fn new(cfg: &Cfg) -> Sweep {
        Sweep::with_toml(&cfg.to_toml())
    }

    pub fn with_toml(toml: &str) -> Sweep {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("supervisor.toml");
        std::fs::write(&config, toml).expect("write config");
        let db = dir.path().join("study.db");
        Sweep {
            dir,
            config,
            db,
            env: Vec::new(),
            umask: None,
            spawned: Default::default(),
        }
    }

    /// A study whose config and database live where the caller says (e.g. on a mount).
    pub fn at(dir: tempfile::TempDir, config: PathBuf, db: PathBuf) -> Sweep {
        Sweep {
            dir,
            config,
            db,
            env: Vec::new(),
            umask: None,
            spawned: Default::default(),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn sweepd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sweepd"));
        cmd.args(args).arg("-c").arg(&self.config);
        cmd.env("SWEEPD_LOG", "info");
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(mask) = self.umask {
            use std::os::unix::process::CommandExt;
            // SAFETY: umask(2) is async-signal-safe and touches nothing but the child.
            unsafe {
                cmd.pre_exec(move || {
                    libc::umask(mask as libc::mode_t);
                    Ok(())
                });
            }
        }
        cmd
    }

    /// `sweepd run` to its end. A hang guard, not a speed assertion: past `limit` the daemon
    /// is killed and the test fails.
    pub fn run(&self, extra: &[&str], limit: Duration) -> Output {
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        let child = self
            .sweepd(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sweepd");
        wait_output(child, limit)
    }

    /// `sweepd run` in the background; its stderr goes to `sweepd.stderr` in the study dir.
    pub fn spawn_run(&self) -> Child {
        self.spawn_run_with(&[])
    }

    /// [`Sweep::spawn_run`] with `extra` arguments (`--par 2`).
    pub fn spawn_run_with(&self, extra: &[&str]) -> Child {
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("sweepd.stderr"))
            .expect("stderr file");
        let child = self
            .sweepd(&args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn sweepd");
        self.spawned.lock().unwrap().push(child.id());
        child
    }

    /// `sweepd run` on a pseudo-terminal (`tests/py/pty_run.py`, 160x40), as a person runs it
    /// from a shell: its exit status and everything it wrote to the screen, escape sequences
    /// included. A hang guard as in [`Sweep::run`].
    pub fn run_on_terminal(&self, extra: &[&str], limit: Duration) -> (ExitStatus, String) {
        let mut cmd = Command::new(python());
        cmd.arg(repo().join("tests/py/pty_run.py"))
            .args(["160", "40", env!("CARGO_BIN_EXE_sweepd"), "run"])
            .args(extra)
            .arg("-c")
            .arg(&self.config);
        cmd.env("SWEEPD_LOG", "info");
        // A test run under systemd must not make sweepd think its terminal is the journal.
        cmd.env_remove("JOURNAL_STREAM");
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pty_run.py");
        let out = wait_output(child, limit);
        assert!(
            out.stderr.is_empty(),
            "pty_run.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    pub fn daemon_stderr(&self) -> String {
        std::fs::read_to_string(self.path("sweepd.stderr")).unwrap_or_default()
    }

    /// `sweepd trials --json`, parsed. A daemon that is just starting may not have created the
    /// tables or the study yet: that is waited for (bounded), anything else fails the test.
    pub fn trials(&self) -> Vec<Value> {
        let start = Instant::now();
        let out = loop {
            let out = self
                .sweepd(&["trials", "--json"])
                .output()
                .expect("sweepd trials");
            // The database file not made yet, migrations not applied yet, or the study row not
            // created yet.
            let err = String::from_utf8_lossy(&out.stderr);
            let starting = err.contains("no database at")
                || err.contains("has no study tables")
                || (err.contains("study `") && err.contains("` not found in"));
            if !starting || start.elapsed() > Duration::from_secs(10) {
                break out;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            out.status.success(),
            "trials failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout)
            .expect("trials JSON")
            .as_array()
            .expect("array")
            .clone()
    }

    pub fn states(&self) -> Vec<String> {
        self.trials()
            .iter()
            .map(|t| t["state"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    pub fn count(&self, state: &str) -> usize {
        self.states().iter().filter(|s| *s == state).count()
    }

    /// A query's first column as text, for checks sweepd's own CLI does not show.
    pub fn sql(&self, sql: &str) -> Vec<String> {
        sql_column(&self.db, sql)
    }

    /// Runs a script of tests/py with the Optuna venv and returns its stdout.
    pub fn optuna(&self, script: &str, args: &[&str]) -> String {
        let out = Command::new(python())
            .arg(repo().join("tests/py").join(script))
            .arg(&self.db)
            .args(args)
            .output()
            .expect("run python");
        assert!(
            out.status.success(),
            "{script} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }
}

/// The study as Optuna reads it through a storage URL or a SQLite file's path
/// (`tests/py/optuna_dump.py`).
pub fn optuna_dump(storage: &str, study: &str) -> Value {
    let out = Command::new(python())
        .arg(repo().join("tests/py/optuna_dump.py"))
        .args([storage, study])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "optuna_dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("dump JSON")
}

/// Runs a future to its end on a runtime of its own: a test's sessions with a database.
/// Not inside another runtime: the query helpers here each start one.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// A one-trial study run to its end, `sql` run on its database, then the daemon run on it again
/// (within `limit`): how a test hands sweepd a database that another version of sweepd or of
/// Optuna left behind.
pub fn rerun_after(sql: &str, limit: Duration) -> Output {
    let cfg = Cfg {
        n_trials: Some(1),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], limit);
    assert!(out.status.success(), "{}", stderr(&out));
    sql_column(&sweep.db, sql);
    sweep.run(&[], limit)
}

pub fn sql_column(db: &Path, sql: &str) -> Vec<String> {
    use sqlx::{Connection, Row};
    block_on(async {
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .expect("open db");
        // The daemon creates the file a moment before its migrations create the tables: a
        // test polling a starting daemon waits for the schema (bounded) instead of failing.
        let start = Instant::now();
        let rows = loop {
            match sqlx::query(sql).fetch_all(&mut conn).await {
                Ok(rows) => break rows,
                Err(e)
                    if e.to_string().contains("no such table")
                        && start.elapsed() < Duration::from_secs(10) =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("query {sql:?}: {e}"),
            }
        };
        rows.iter()
            .map(|r| {
                r.try_get::<String, _>(0)
                    .or_else(|_| r.try_get::<i64, _>(0).map(|v| v.to_string()))
                    .or_else(|_| r.try_get::<f64, _>(0).map(|v| v.to_string()))
                    .unwrap_or_default()
            })
            .collect()
    })
}

pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    // The pipes are read while the child runs: a daemon that writes more than a pipe holds
    // (64 KiB of log lines) would otherwise block on its stderr and never exit.
    fn drain(
        pipe: Option<impl std::io::Read + Send + 'static>,
    ) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    }
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "sweepd did not finish within {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&err.join().unwrap_or_default())
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Waits (bounded) until `cond` holds.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether a pid is a live (non-zombie) process.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s[s.rfind(')').unwrap() + 2..].chars().next().unwrap();
            state != 'Z' && state != 'X'
        }
        Err(_) => false,
    }
}

/// Pids recorded by faulty_worker's SWEEPD_TEST_RECORD file, with trial numbers.
pub fn recorded(path: &Path) -> Vec<(i32, i64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect()
}

/// A simulated GPU box: the fake libnvidia-ml built by build.rs, and its state file.
pub struct FakeGpus {
    pub state: PathBuf,
}

impl FakeGpus {
    /// `gpus`: (total, name) per device. Dead pids release their memory, as the driver does.
    pub fn new(dir: &Path, gpus: &[&str]) -> FakeGpus {
        let state = dir.join("nvml.state");
        let mut text = String::from("prune_dead_pids\n");
        for (i, g) in gpus.iter().enumerate() {
            text.push_str(&format!("gpu {i} {g}\n"));
        }
        std::fs::write(&state, text).unwrap();
        FakeGpus { state }
    }

    /// Appends whole lines (atomic for the fake's readers).
    pub fn append(&self, line: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.state)
            .unwrap();
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
    }

    /// Replaces the state by write-then-rename.
    pub fn replace(&self, text: &str) {
        let tmp = self.state.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.state).unwrap();
    }

    pub fn env(&self) -> Vec<(String, String)> {
        let lib = env!("SWEEPD_FAKE_NVML");
        assert!(
            !lib.is_empty(),
            "the fake libnvidia-ml was not built (no C compiler?)"
        );
        vec![
            ("SWEEPD_NVML_LIB".into(), lib.into()),
            (
                "FAKE_NVML_STATE".into(),
                self.state.to_string_lossy().into_owned(),
            ),
            // The fake card's own GPU ledger: daemons of other tests on this host, on other
            // fake cards, must not count against it.
            (
                "SWEEPD_LEDGER".into(),
                ledger_of(self).to_string_lossy().into_owned(),
            ),
        ]
    }
}

/// A study of `cfg` on simulated GPUs (`gpus`: one "TOTAL NAME" per device, as `FakeGpus`
/// takes them), with `gpu_table` as the lines of its `[gpu]` table.
pub fn gpu_study(cfg: &Cfg, gpus: &[&str], gpu_table: &str) -> (Sweep, FakeGpus) {
    let toml = format!("{}\n[gpu]\n{gpu_table}\n", cfg.to_toml());
    let mut sweep = Sweep::with_toml(&toml);
    let fake = FakeGpus::new(sweep.dir.path(), gpus);
    sweep.env = fake.env();
    (sweep, fake)
}

pub fn gpu_sim_worker() -> Vec<String> {
    vec![
        python(),
        repo()
            .join("tests/workers/gpu_sim_worker.py")
            .to_string_lossy()
            .into_owned(),
    ]
}

// ---------------------------------------------------------------------------------------------
// File systems under the database: mounted for a test (these tests need root, as CI has).

/// A program from PATH or the sbin directories (PATH may lack them).
pub fn tool(name: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("`{name}` is needed by this test and was not found"))
}

pub fn sh(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(tool(program))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"))
}

pub fn must(program: &str, args: &[&str]) {
    let out = sh(program, args);
    assert!(
        out.status.success(),
        "`{program} {}` failed ({}): {}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A mounted file system, lazily unmounted when dropped.
pub struct Mount {
    pub at: PathBuf,
}

impl Mount {
    pub fn tmpfs(at: &Path, size: &str) -> Mount {
        std::fs::create_dir_all(at).unwrap();
        must(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "tmpfs",
                at.to_str().unwrap(),
            ],
        );
        Mount { at: at.to_owned() }
    }

    /// An ext4 image that turns read-only on an error, as `errors=remount-ro` file systems do.
    pub fn ext4(image: &Path, at: &Path) -> Mount {
        std::fs::create_dir_all(at).unwrap();
        let f = std::fs::File::create(image).unwrap();
        f.set_len(32 << 20).unwrap();
        drop(f);
        must("mkfs.ext4", &["-q", "-F", image.to_str().unwrap()]);
        must(
            "mount",
            &[
                "-o",
                "loop,errors=remount-ro",
                image.to_str().unwrap(),
                at.to_str().unwrap(),
            ],
        );
        Mount { at: at.to_owned() }
    }

    /// Cuts the file system off as a power loss would: `FS_IOC_SHUTDOWN` with
    /// `FS_SHUTDOWN_FLAGS_NOLOGFLUSH` writes nothing more, so whatever was not yet synced is
    /// gone once it is mounted again, and every later write fails.
    pub fn power_loss(&self) {
        use std::os::fd::AsRawFd;
        const FS_IOC_SHUTDOWN: libc::c_ulong = 0x8004_587d; // _IOR('X', 125, __u32)
        const NOLOGFLUSH: u32 = 2;
        let dir = std::fs::File::open(&self.at).unwrap();
        let flags = NOLOGFLUSH;
        // SAFETY: the ioctl reads one u32 from a valid pointer on an open descriptor.
        let rc = unsafe { libc::ioctl(dir.as_raw_fd(), FS_IOC_SHUTDOWN, &flags) };
        assert_eq!(
            rc,
            0,
            "FS_IOC_SHUTDOWN: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Unmounts and mounts the image again (after a [`Mount::power_loss`]: what survived).
    pub fn remount(&self, image: &Path) {
        must("umount", &[self.at.to_str().unwrap()]);
        must(
            "mount",
            &[
                "-o",
                "loop",
                image.to_str().unwrap(),
                self.at.to_str().unwrap(),
            ],
        );
    }

    pub fn options(&self) -> String {
        let out = sh("findmnt", &["-no", "OPTIONS", self.at.to_str().unwrap()]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    pub fn source(&self) -> String {
        let out = sh("findmnt", &["-no", "SOURCE", self.at.to_str().unwrap()]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = sh("umount", &["-l", self.at.to_str().unwrap()]);
    }
}

/// A study whose config and database live on a mounted file system and whose worker logs and
/// daemon stderr live outside it. The mount goes first so that it is unmounted before the
/// temp dir is removed.
pub struct MountedSweep {
    pub mount: Mount,
    pub sweep: Sweep,
}

impl std::ops::Deref for MountedSweep {
    type Target = Sweep;
    fn deref(&self) -> &Sweep {
        &self.sweep
    }
}

pub fn mounted_toml(cfg: &Cfg, logs: &Path) -> String {
    let toml = cfg.to_toml();
    let q = serde_json::to_string(logs.to_str().unwrap()).unwrap();
    let out = toml.replace("log_dir = \"logs\"", &format!("log_dir = {q}"));
    assert_ne!(out, toml);
    out
}

pub fn mounted_sweep(cfg: &Cfg, mount: impl FnOnce(&Path) -> Mount) -> MountedSweep {
    let dir = tempfile::tempdir().unwrap();
    let fs = dir.path().join("fs");
    let mount = mount(dir.path());
    assert_eq!(mount.at, fs);
    let config = fs.join("supervisor.toml");
    std::fs::write(&config, mounted_toml(cfg, &dir.path().join("logs"))).unwrap();
    let db = fs.join("study.db");
    MountedSweep {
        mount,
        sweep: Sweep::at(dir, config, db),
    }
}

// ---------------------------------------------------------------------------------------------
// Signals, counts and the checks every stop must pass.

/// Sends `sig` to a child process (the daemon).
pub fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

/// What `systemctl stop` sends the daemon.
pub fn sigterm(child: &Child) {
    signal(child, nix::sys::signal::Signal::SIGTERM);
}

/// What Ctrl-C at a terminal sends the daemon.
pub fn sigint(child: &Child) {
    signal(child, nix::sys::signal::Signal::SIGINT);
}

/// A query's first column, or `None` while the database or its tables do not exist yet (the
/// daemon is still creating them) or the query fails for any other reason.
pub fn try_sql(db: &Path, sql: &str) -> Option<Vec<String>> {
    use sqlx::{Connection, Row};
    if !db.exists() {
        return None;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let opts = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(db)
            .busy_timeout(Duration::from_secs(10));
        let mut conn = sqlx::SqliteConnection::connect_with(&opts).await.ok()?;
        let rows = sqlx::query(sql).fetch_all(&mut conn).await.ok()?;
        let _ = conn.close().await;
        Some(
            rows.iter()
                .map(|r| {
                    r.try_get::<String, _>(0)
                        .or_else(|_| r.try_get::<i64, _>(0).map(|v| v.to_string()))
                        .or_else(|_| r.try_get::<f64, _>(0).map(|v| v.to_string()))
                        .unwrap_or_default()
                })
                .collect(),
        )
    })
}

pub fn try_count(db: &Path, sql: &str) -> Option<usize> {
    try_sql(db, sql)?.first()?.parse().ok()
}

/// Trials in `state` (0 while the database is not there yet).
pub fn count_in(sweep: &Sweep, state: &str) -> usize {
    try_count(
        &sweep.db,
        &format!("SELECT COUNT(*) FROM trials WHERE state = '{state}'"),
    )
    .unwrap_or(0)
}

pub fn running(sweep: &Sweep) -> usize {
    count_in(sweep, "RUNNING")
}

/// Trials with a final outcome: what `n_trials` counts (a FAIL with a retry copy does not).
pub fn finished(sweep: &Sweep) -> usize {
    try_count(
        &sweep.db,
        "SELECT COUNT(*) FROM trials t WHERE t.state IN ('COMPLETE', 'PRUNED') OR (t.state = 'FAIL' \
         AND NOT EXISTS (SELECT 1 FROM trial_system_attributes a WHERE a.trial_id = t.trial_id \
         AND a.key = 'sweepd:retried_as'))",
    )
    .unwrap_or(0)
}

/// COMPLETE trials: number -> (value, params), from `sweepd trials --json`.
pub fn complete_trials(sweep: &Sweep) -> BTreeMap<i64, (Value, Value)> {
    sweep
        .trials()
        .into_iter()
        .filter(|t| t["state"] == "COMPLETE")
        .map(|t| {
            (
                t["number"].as_i64().unwrap(),
                (t["value"].clone(), t["params"].clone()),
            )
        })
        .collect()
}

/// No trial RUNNING; every FAIL an interruption with a retry copy of the same params.
pub fn assert_nothing_lost(sweep: &Sweep) {
    let trials = sweep.trials();
    assert!(
        trials.iter().all(|t| t["state"] != "RUNNING"),
        "a trial was left RUNNING: {trials:#?}"
    );
    for t in trials.iter().filter(|t| t["state"] == "FAIL") {
        assert_eq!(t["fail_kind"], "interrupted", "{t}");
        let copy = sweep.sql(&format!(
            "SELECT value_json FROM trial_system_attributes WHERE trial_id = {} AND key = 'sweepd:retried_as'",
            t["trial_id"]
        ));
        let copy: i64 = copy
            .first()
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("an interrupted trial has no retry copy: {t}"));
        let copy = trials
            .iter()
            .find(|c| c["number"] == copy)
            .unwrap_or_else(|| panic!("the retry copy {copy} of {t} does not exist"));
        assert_eq!(copy["params"], t["params"], "the copy has the same params");
    }
}

pub fn integrity_ok(sweep: &Sweep) {
    assert_eq!(sweep.sql("PRAGMA integrity_check"), vec!["ok".to_owned()]);
}
