//! sweepd as a service: the sd_notify protocol, one daemon per study, SIGHUP reloads, the
//! Prometheus endpoint, and the storage going wrong under it (kill -9 at random moments, a
//! database locked by another writer, a full disk, a file system turning read-only).
//!
//! Everything here is bounded in time (hang guards, never speed assertions) and loopback only.
//! The disk tests mount file systems, so they need root (as the test machines and CI have); a
//! mount that fails fails the test with the mount's error rather than skipping it.

mod common;

use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// faulty_worker's objective, recomputed from a trial's external params.
fn expected_value(params: &Value) -> f64 {
    params
        .as_object()
        .unwrap()
        .values()
        .map(|v| match v {
            Value::Number(n) => n.as_f64().unwrap().powi(2),
            Value::String(s) => s.chars().count() as f64,
            other => other.to_string().len() as f64,
        })
        .sum()
}

/// A Cfg with its environment replaced.
fn with_env(cfg: &Cfg, env: &[(&str, &str)]) -> Cfg {
    let mut c = Cfg {
        env: Vec::new(),
        ..cfg.clone()
    };
    for (k, v) in env {
        c = c.env(k, v);
    }
    c
}

/// A small xorshift64* generator: the kill schedule is reproducible from the printed seed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

// ---------------------------------------------------------------------------------------------
// 1. sd_notify
// ---------------------------------------------------------------------------------------------

/// `STATUS=running N/M on cpu, K/T done, ...` -> (N, M, K, T).
fn parse_status(line: &str) -> Option<(u64, u64, u64, u64)> {
    let rest = line.strip_prefix("STATUS=running ")?;
    let (par, rest) = rest.split_once(" on cpu, ")?;
    let (n, m) = par.split_once('/')?;
    let (done, _) = rest.split_once(" done")?;
    let (k, t) = done.split_once('/')?;
    Some((
        n.parse().ok()?,
        m.parse().ok()?,
        k.parse().ok()?,
        t.parse().ok()?,
    ))
}

#[test]
fn notify_protocol_ready_status_watchdog_stopping() {
    let n_trials = 6u64;
    let cfg = Cfg {
        n_trials: Some(n_trials),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "1.0");
    let sweep = Sweep::new(&cfg);
    let sock_path = sweep.path("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("bind the notify socket");
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Each line received, with (for READY=1) the number of COMPLETE trials at that moment.
    let reader = {
        let stop = stop.clone();
        let db = sweep.db.clone();
        std::thread::spawn(move || {
            let mut got: Vec<(String, Option<usize>)> = Vec::new();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match sock.recv(&mut buf) {
                    Ok(k) => {
                        let text = String::from_utf8_lossy(&buf[..k]).into_owned();
                        for line in text.lines().filter(|l| !l.is_empty()) {
                            let complete = (line == "READY=1").then(|| {
                                try_count(
                                    &db,
                                    "SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'",
                                )
                                .unwrap_or(0)
                            });
                            got.push((line.to_owned(), complete));
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        if stop.load(Ordering::SeqCst) {
                            return got;
                        }
                    }
                    Err(e) => panic!("notify socket: {e}"),
                }
            }
        })
    };
    let child = sweep
        .sweepd(&["run"])
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "2000000")
        .env_remove("WATCHDOG_PID")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sweepd");
    let out = wait_output(child, LIMIT);
    stop.store(true, Ordering::SeqCst);
    let got = reader.join().expect("reader thread");
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<&str> = got.iter().map(|(l, _)| l.as_str()).collect();
    eprintln!("notify messages: {lines:#?}");

    let ready: Vec<usize> = (0..lines.len())
        .filter(|i| lines[*i] == "READY=1")
        .collect();
    assert_eq!(ready.len(), 1, "READY=1 exactly once: {lines:?}");
    let ready = ready[0];
    assert_eq!(
        got[ready].1,
        Some(0),
        "READY=1 came after a trial had completed: {lines:?}"
    );

    let statuses: Vec<(usize, (u64, u64, u64, u64))> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("STATUS="))
        .map(|(i, l)| {
            (
                i,
                parse_status(l).unwrap_or_else(|| panic!("STATUS line not understood: {l}")),
            )
        })
        .collect();
    assert!(!statuses.is_empty(), "no STATUS= line: {lines:?}");
    let mut last_done = 0;
    for (i, (n, m, k, t)) in &statuses {
        assert_eq!(*m, 2, "max_par in {}", lines[*i]);
        assert_eq!(*t, n_trials, "budget in {}", lines[*i]);
        assert!(n <= m, "{}", lines[*i]);
        assert!(k <= t, "{}", lines[*i]);
        assert!(*k >= last_done, "done went backwards: {lines:?}");
        last_done = *k;
        if *k > 0 {
            assert!(
                *i > ready,
                "a STATUS with trials done before READY=1: {lines:?}"
            );
        }
    }
    assert!(
        statuses.iter().any(|(_, (n, ..))| *n >= 1),
        "no STATUS line showed a running trial: {lines:?}"
    );
    assert!(lines.contains(&"WATCHDOG=1"), "no WATCHDOG=1: {lines:?}");
    let stopping: Vec<usize> = (0..lines.len())
        .filter(|i| lines[*i] == "STOPPING=1")
        .collect();
    assert_eq!(stopping.len(), 1, "STOPPING=1 exactly once: {lines:?}");
    assert!(stopping[0] > ready, "STOPPING=1 before READY=1: {lines:?}");
    assert_eq!(
        stopping[0],
        lines.len() - 1,
        "nothing after STOPPING=1: {lines:?}"
    );
    assert_eq!(sweep.count("COMPLETE"), n_trials as usize);
}

// ---------------------------------------------------------------------------------------------
// 2. One daemon per study
// ---------------------------------------------------------------------------------------------

#[test]
fn second_daemon_on_the_same_study_is_refused_naming_the_first() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let cfg = Cfg {
        n_trials: Some(50),
        max_par: 1,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "30")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let mut first = sweep.spawn_run();
    wait_until(LIMIT, "the first daemon runs a trial", || {
        running(&sweep) == 1 && !recorded(record.path()).is_empty()
    });

    let out = sweep.run(&[], LIMIT);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!("pid {}", first.id())),
        "the refusal names the first daemon's pid {}: {err}",
        first.id()
    );
    // The refused daemon touched nothing: the first still runs its trial, unreconciled.
    assert!(first.try_wait().unwrap().is_none(), "the first daemon died");
    assert_eq!(running(&sweep), 1);
    assert_eq!(count_in(&sweep, "FAIL"), 0, "{:?}", sweep.trials());
    let status: Value =
        serde_json::from_slice(&sweep.sweepd(&["status", "--json"]).output().unwrap().stdout)
            .unwrap();
    assert_eq!(status["daemon"]["pid"], first.id() as i64, "{status}");
    assert_eq!(status["daemon"]["state"], "RUNNING", "{status}");

    // kill -9: the lock row stays behind, naming a dead pid. The next daemon takes it over.
    first.kill().unwrap();
    first.wait().unwrap();
    let cfg2 = Cfg {
        n_trials: Some(3),
        ..with_env(
            &cfg,
            &[
                ("SWEEPD_TEST_SLEEP", "0.05"),
                ("SWEEPD_TEST_RECORD", record.path().to_str().unwrap()),
            ],
        )
    };
    std::fs::write(&sweep.config, cfg2.to_toml()).unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("another sweepd"), "{}", stderr(&out));
    assert_nothing_lost(&sweep);
    assert_eq!(finished(&sweep), 3);
    assert_eq!(
        count_in(&sweep, "FAIL"),
        1,
        "the killed trial was interrupted"
    );
    for (pid, _) in recorded(record.path()) {
        assert!(!alive(pid), "worker {pid} is still alive");
    }
}

/// `status` and `run` judge a daemon by the same heartbeat age (status once said "gone" after
/// 30 s while run refused to take over for 60): a row from another host whose heartbeat is 45 s
/// old is alive for both, one 90 s old is gone for both.
#[test]
fn status_and_run_agree_on_when_a_daemon_on_another_host_is_gone() {
    let sweep = Sweep::new(&Cfg {
        n_trials: Some(1),
        ..Cfg::default()
    });
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let held_elsewhere = |age_s: i64| {
        let at = chrono::Local::now().naive_local() - chrono::Duration::seconds(age_s);
        sweep.sql(&format!(
            "UPDATE sweepd_daemon SET host = 'elsewhere', pid = 4242, pid_start = NULL, \
             state = 'RUNNING', heartbeat_at = '{}'",
            at.format("%Y-%m-%d %H:%M:%S%.6f")
        ));
    };
    let status_says_alive = || {
        let out = sweep.sweepd(&["status", "--json"]).output().unwrap();
        let status: Value = serde_json::from_slice(&out.stdout).unwrap();
        status["daemon_alive"].as_bool().expect("daemon_alive")
    };

    held_elsewhere(45);
    assert!(status_says_alive());
    let out = sweep.run(&[], LIMIT);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("pid 4242 on elsewhere"),
        "{}",
        stderr(&out)
    );

    held_elsewhere(90);
    assert!(!status_says_alive());
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_ne!(
        sweep.sql("SELECT host FROM sweepd_daemon"),
        ["elsewhere"],
        "taken over"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. SIGHUP
// ---------------------------------------------------------------------------------------------

/// A study of trials that take a second each, one at a time, with a budget far off.
fn one_second_trials() -> Cfg {
    Cfg {
        n_trials: Some(200),
        max_par: 1,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "1.0")
}

#[test]
fn sighup_applies_max_par_and_budget_and_rejects_a_bad_file() {
    let cfg = one_second_trials();
    let sweep = Sweep::new(&cfg);
    let mut child = sweep.spawn_run();
    wait_until(LIMIT, "one trial running", || running(&sweep) == 1);

    // An invalid file is rejected; the daemon keeps running with what it had.
    let bad = cfg.to_toml().replace("max_par = 1\n", "max_par = 0\n");
    assert_ne!(bad, cfg.to_toml());
    std::fs::write(&sweep.config, &bad).unwrap();
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    wait_until(LIMIT, "the reload to be rejected", || {
        sweep.daemon_stderr().contains("reload rejected")
    });
    assert!(
        child.try_wait().unwrap().is_none(),
        "the daemon died on a bad reload:\n{}",
        sweep.daemon_stderr()
    );
    assert!(
        sweep.daemon_stderr().contains("max_par"),
        "the rejection says what is wrong:\n{}",
        sweep.daemon_stderr()
    );
    assert!(running(&sweep) <= 1);

    // A good file: more parallelism, a smaller budget, and a key that needs a restart.
    let n_new = finished(&sweep) as u64 + 9;
    let mut good = Cfg {
        n_trials: Some(n_new),
        max_par: 3,
        ..cfg.clone()
    };
    good.command.push("--ignored-extra-arg".into());
    std::fs::write(&sweep.config, good.to_toml()).unwrap();
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    wait_until(LIMIT, "three trials running at once", || {
        running(&sweep) == 3
    });
    let err = sweep.daemon_stderr();
    assert!(err.contains("need a restart"), "{err}");
    assert!(err.contains("worker.command"), "{err}");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the daemon stopped early"
    );
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the run did not end at the new budget"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{}", sweep.daemon_stderr());
    assert_eq!(finished(&sweep) as u64, n_new, "{:?}", sweep.trials());
    assert_eq!(
        sweep.trials().len() as u64,
        n_new,
        "no trial past the budget"
    );
    assert_eq!(sweep.count("COMPLETE") as u64, n_new);
}

#[test]
fn sighup_keeps_the_command_lines_par_over_the_files_max_par() {
    let cfg = one_second_trials();
    let sweep = Sweep::new(&cfg);
    let mut child = sweep.spawn_run_with(&["--par", "2"]);
    wait_until(LIMIT, "two trials running at once", || running(&sweep) == 2);

    // A reload of a file that still says max_par = 1, with a smaller budget (a live key).
    let n_new = finished(&sweep) as u64 + 6;
    let smaller = Cfg {
        n_trials: Some(n_new),
        ..cfg.clone()
    };
    std::fs::write(&sweep.config, smaller.to_toml()).unwrap();
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    wait_until(LIMIT, "the reload to be applied", || {
        sweep
            .daemon_stderr()
            .contains("reload: applied the new config")
    });
    let err = sweep.daemon_stderr();
    let applied = err
        .lines()
        .find(|l| l.contains("reload: applied the new config"))
        .unwrap();
    assert!(applied.contains("max_par=2"), "{applied}");
    assert!(!err.contains("need a restart"), "{err}");
    let status = child.wait().unwrap();
    assert!(status.success(), "{}", sweep.daemon_stderr());
    assert_eq!(finished(&sweep) as u64, n_new, "{:?}", sweep.trials());
}

// ---------------------------------------------------------------------------------------------
// 4. Prometheus
// ---------------------------------------------------------------------------------------------

/// A port no other test of this process is handed, and free when asked. Asking the kernel for
/// port 0 and releasing it lets two parallel tests get the same port (then one scrapes the
/// other's daemon), so ports come from a counter over a range below the ephemeral ones.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 500) as u16 * 20;
    loop {
        let port = base + NEXT.fetch_add(1, Ordering::Relaxed) % 10_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// `GET path` over a raw HTTP/1.1 connection: (status line, headers lower-cased, body).
fn http_get(port: u16, path: &str) -> std::io::Result<(String, HashMap<String, String>, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\n\r\n").as_bytes(),
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let raw = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no header end: {raw:?}")))?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default().to_owned();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect::<HashMap<_, _>>();
    if let Some(len) = headers.get("content-length") {
        assert_eq!(
            len.parse::<usize>().unwrap(),
            body.len(),
            "Content-Length matches the body"
        );
    }
    Ok((status, headers, body.to_owned()))
}

/// A Prometheus / OpenMetrics text exposition, parsed.
#[derive(Debug, Default)]
struct Exposition {
    help: HashMap<String, String>,
    types: HashMap<String, String>,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    // name="value",name="value" with \" \\ \n escapes in values.
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' {
                break;
            }
            name.push(c);
            chars.next();
        }
        if name.is_empty() {
            return out;
        }
        assert_eq!(chars.next(), Some('='), "label {name} without =: {s}");
        assert_eq!(chars.next(), Some('"'), "label {name} value unquoted: {s}");
        let mut value = String::new();
        loop {
            match chars
                .next()
                .unwrap_or_else(|| panic!("unterminated label value: {s}"))
            {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => panic!("dangling escape: {s}"),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.insert(name.trim().to_owned(), value);
    }
}

fn parse_exposition(text: &str) -> Exposition {
    let mut e = Exposition::default();
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            e.help.insert(name.to_owned(), help.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("TYPE without a type: {line}"));
            let old = e.types.insert(name.to_owned(), ty.to_owned());
            assert!(old.is_none(), "a second TYPE line for {name}");
            continue;
        }
        if line.starts_with('#') {
            continue; // # EOF, # UNIT, comments
        }
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let close = line.rfind('}').unwrap_or_else(|| panic!("no }}: {line}"));
                (
                    &line[..open],
                    parse_labels(&line[open + 1..close]),
                    &line[close + 1..],
                )
            }
            None => {
                let (n, r) = line
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("sample without value: {line}"));
                (n, BTreeMap::new(), r)
            }
        };
        let value_text = rest
            .split_whitespace()
            .next()
            .unwrap_or_else(|| panic!("sample without value: {line}"));
        let value: f64 = value_text
            .parse()
            .unwrap_or_else(|_| panic!("bad sample value {value_text:?} in {line}"));
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name {name:?}"
        );
        e.samples.push((name.to_owned(), labels, value));
    }
    e
}

impl Exposition {
    /// The TYPE of a family, whether declared under its base name (OpenMetrics) or under the
    /// sample name (the classic text format's counters).
    fn family_type(&self, base: &str) -> Option<&str> {
        self.types
            .get(base)
            .or_else(|| self.types.get(&format!("{base}_total")))
            .map(String::as_str)
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| *v)
    }

    fn of(&self, name: &str) -> Vec<&(String, BTreeMap<String, String>, f64)> {
        self.samples.iter().filter(|(n, _, _)| n == name).collect()
    }

    /// Buckets monotone, `+Inf` equal to `_count`, `_sum` present. Returns the count.
    fn check_histogram(&self, base: &str) -> f64 {
        let mut buckets: Vec<(f64, f64)> = self
            .of(&format!("{base}_bucket"))
            .iter()
            .map(|(_, l, v)| {
                let le = l
                    .get("le")
                    .unwrap_or_else(|| panic!("{base} bucket without le"));
                (
                    le.parse::<f64>().unwrap_or_else(|_| panic!("le {le:?}")),
                    *v,
                )
            })
            .collect();
        assert!(!buckets.is_empty(), "{base}: no buckets");
        buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        for w in buckets.windows(2) {
            assert!(
                w[1].1 >= w[0].1,
                "{base}: bucket le={} has {} < le={} with {}",
                w[1].0,
                w[1].1,
                w[0].0,
                w[0].1
            );
        }
        let (le, inf) = *buckets.last().unwrap();
        assert!(le.is_infinite(), "{base}: no le=\"+Inf\" bucket");
        let count = self
            .get(&format!("{base}_count"), &[])
            .unwrap_or_else(|| panic!("{base}_count missing"));
        assert_eq!(inf, count, "{base}: +Inf bucket equals _count");
        assert!(
            self.get(&format!("{base}_sum"), &[]).is_some(),
            "{base}_sum missing"
        );
        count
    }
}

/// Scrapes `/metrics` until `cond` holds on the parsed exposition (bounded); returns the last
/// scrape: headers, body, parsed.
fn scrape_until(
    port: u16,
    limit: Duration,
    what: &str,
    mut cond: impl FnMut(&Exposition) -> bool,
) -> (HashMap<String, String>, String, Exposition) {
    let start = Instant::now();
    let mut last = None;
    let mut error = None;
    loop {
        let got = http_get(port, "/metrics");
        if let Err(e) = &got {
            error = Some(e.to_string());
        }
        if let Ok((status, headers, body)) = got {
            assert!(status.starts_with("HTTP/1.1 200"), "{status}");
            let e = parse_exposition(&body);
            let done = cond(&e);
            last = Some((headers, body, e));
            if done {
                return last.unwrap();
            }
        }
        if start.elapsed() > limit {
            let body = last
                .map(|(_, b, _)| b)
                .unwrap_or_else(|| format!("(none succeeded: {error:?})"));
            panic!("timed out waiting for /metrics to show {what}; last scrape:\n{body}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn assert_family(e: &Exposition, body: &str, family: &str, ty: &str) {
    assert_eq!(e.family_type(family), Some(ty), "TYPE of {family}:\n{body}");
    assert!(
        e.help.contains_key(family) || e.help.contains_key(&format!("{family}_total")),
        "HELP of {family}:\n{body}"
    );
}

/// Every sample belongs to a family with a TYPE (under its OpenMetrics base name).
fn assert_all_typed(e: &Exposition, body: &str) {
    for (name, _, _) in &e.samples {
        let known = e.types.keys().any(|f| {
            name == f
                || ["_total", "_bucket", "_count", "_sum", "_created"]
                    .iter()
                    .any(|s| *name == format!("{f}{s}"))
        });
        assert!(known, "sample {name} has no TYPE:\n{body}");
    }
}

#[test]
fn metrics_export_each_objectives_best_and_the_pareto_fronts_size() {
    let port = free_port();
    let cfg = Cfg {
        n_trials: Some(10_000),
        max_par: 2,
        command: vec![
            python(),
            repo()
                .join("tests/workers/multi_worker.py")
                .to_string_lossy()
                .into_owned(),
        ],
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.05");
    let toml = metrics_toml(&cfg, &format!("127.0.0.1:{port}")).replace(
        "direction = \"minimize\"\n",
        "directions = [\"minimize\", \"maximize\"]\nmetric_names = [\"loss\", \"accuracy\"]\n",
    );
    let sweep = Sweep::with_toml(&toml);
    let child = sweep.spawn_run();
    let (_, body, e) = scrape_until(port, Duration::from_secs(90), "a Pareto front", |e| {
        e.get("sweepd_pareto_front_trials", &[]).unwrap_or(0.0) >= 1.0
            && e.get(
                "sweepd_best_value",
                &[("objective", "1"), ("name", "accuracy")],
            )
            .is_some()
    });
    assert_family(&e, &body, "sweepd_best_value", "gauge");
    assert_family(&e, &body, "sweepd_pareto_front_trials", "gauge");
    let loss = e
        .get("sweepd_best_value", &[("objective", "0"), ("name", "loss")])
        .unwrap_or_else(|| panic!("the loss's best:\n{body}"));
    let accuracy = e
        .get(
            "sweepd_best_value",
            &[("objective", "1"), ("name", "accuracy")],
        )
        .unwrap();
    // multi_worker.py: the loss lies in [0, 1], the accuracy at most 1.
    assert!((0.0..=1.0).contains(&loss) && accuracy <= 1.0, "{body}");
    sigterm(&child);
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
}

fn metrics_toml(cfg: &Cfg, listen: &str) -> String {
    format!("{}\n[metrics]\nlisten = \"{listen}\"\n", cfg.to_toml())
}

#[test]
fn metrics_endpoint_serves_prometheus_text() {
    let port = free_port();
    let cfg = Cfg {
        n_trials: Some(10_000),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.15")
    .env("SWEEPD_TEST_RAISE_ON", "1");
    let sweep = Sweep::with_toml(&metrics_toml(&cfg, &format!("127.0.0.1:{port}")));
    let check = sweep.sweepd(&["check"]).output().unwrap();
    assert!(check.status.success(), "{}", stderr(&check));
    let child = sweep.spawn_run();

    // Counts by state are refreshed every few housekeeping ticks: wait for them (bounded).
    let (headers, body, e) = scrape_until(
        port,
        Duration::from_secs(90),
        "COMPLETE trials and a user_error",
        |e| {
            e.get("sweepd_trials", &[("state", "COMPLETE")])
                .unwrap_or(0.0)
                > 0.0
                && e.get("sweepd_trial_failures_total", &[("kind", "user_error")])
                    .unwrap_or(0.0)
                    >= 1.0
        },
    );
    let ctype = headers.get("content-type").cloned().unwrap_or_default();
    assert!(
        ctype.starts_with("text/plain") || ctype.starts_with("application/openmetrics-text"),
        "{ctype}"
    );
    for (family, ty) in [
        ("sweepd_trials", "gauge"),
        ("sweepd_trial_duration_seconds", "histogram"),
        ("sweepd_trial_peak_memory_bytes", "histogram"),
        ("sweepd_trial_failures", "counter"),
        ("sweepd_worker_restarts", "counter"),
    ] {
        assert_family(&e, &body, family, ty);
    }
    for state in ["RUNNING", "WAITING", "COMPLETE", "PRUNED", "FAIL"] {
        assert!(
            e.get("sweepd_trials", &[("state", state)]).is_some(),
            "sweepd_trials{{state=\"{state}\"}}:\n{body}"
        );
    }
    assert!(
        e.get("sweepd_trials", &[("state", "FAIL")]).unwrap() >= 1.0,
        "{body}"
    );
    assert!(
        e.get("sweepd_worker_restarts_total", &[]).is_some(),
        "{body}"
    );
    let count = e.check_histogram("sweepd_trial_duration_seconds");
    assert!(count >= 2.0, "finished trials observed: {count}\n{body}");
    assert_eq!(
        e.check_histogram("sweepd_trial_peak_memory_bytes"),
        0.0,
        "no GPU, no peak"
    );
    assert_all_typed(&e, &body);
    // Only /metrics is served.
    let (status, _, _) = http_get(port, "/").unwrap();
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");

    sigterm(&child);
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());

    // A listen address beyond loopback needs allow_remote.
    let remote = metrics_toml(&cfg, &format!("0.0.0.0:{port}"));
    let s2 = Sweep::with_toml(&remote);
    let out = s2.sweepd(&["check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("allow_remote"), "{}", stderr(&out));
    let out = s2.run(&[], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!s2.db.exists(), "a refused config creates no database");
    std::fs::write(&s2.config, format!("{remote}allow_remote = true\n")).unwrap();
    let out = s2.sweepd(&["check"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Every sample of every family carries the daemon's `host` label (`SWEEPD_HOST_ID`, else the
/// hostname), histogram buckets and counters included: the daemons of several hosts on one
/// study report the same families, and one Prometheus scraping them all tells them apart.
#[test]
fn metrics_carry_the_host_label_on_every_family() {
    let port = free_port();
    let cfg = Cfg {
        n_trials: Some(10_000),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.1")
    .env("SWEEPD_TEST_RAISE_ON", "1");
    let mut sweep = Sweep::with_toml(&metrics_toml(&cfg, &format!("127.0.0.1:{port}")));
    sweep.env.push(("SWEEPD_HOST_ID".into(), "box-7".into()));
    let mut child = sweep.spawn_run();
    let result = std::panic::catch_unwind(|| {
        let (_, body, e) = scrape_until(
            port,
            Duration::from_secs(90),
            "a finished trial, a failure and the counts",
            |e| {
                e.get("sweepd_trial_failures_total", &[("kind", "user_error")])
                    .is_some()
                    && e.get("sweepd_trials", &[("state", "COMPLETE")])
                        .unwrap_or(0.0)
                        > 0.0
            },
        );
        assert_all_typed(&e, &body);
        assert!(!e.samples.is_empty(), "{body}");
        for (name, labels, _) in &e.samples {
            assert_eq!(
                labels.get("host").map(String::as_str),
                Some("box-7"),
                "{name} {labels:?} has no host label:\n{body}"
            );
        }
        // Every family, not only those that happen to have samples: each TYPE'd family has one.
        for family in e.types.keys() {
            assert!(
                e.samples
                    .iter()
                    .any(|(n, _, _)| n.starts_with(family.as_str())),
                "family {family} has no sample to carry the label:\n{body}"
            );
        }
        assert_family(&e, &body, "sweepd_database_up", "gauge");
        assert_eq!(
            e.get("sweepd_database_up", &[("host", "box-7")]),
            Some(1.0),
            "{body}"
        );
    });
    sigterm(&child);
    let _ = wait_exit(&mut child, LIMIT, "after SIGTERM", &sweep);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn metrics_endpoint_serves_gpu_families_on_simulated_gpus() {
    let port = free_port();
    let cfg = Cfg {
        n_trials: Some(10_000),
        max_par: 4,
        command: gpu_sim_worker(),
        params: "[params.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n".into(),
        ..Cfg::default()
    }
    .env("SIM_MEM", "2G")
    .env("SIM_HOLD_S", "0.3");
    let toml = format!(
        "{}\n[gpu]\ndevices = \"all\"\nheadroom = \"1GiB\"\npoll_interval = \"100ms\"\n",
        metrics_toml(&cfg, &format!("127.0.0.1:{port}"))
    );
    let mut sweep = Sweep::with_toml(&toml);
    let fake = FakeGpus::new(sweep.dir.path(), &["24G Fake A10", "24G Fake A10"]);
    sweep.env = fake.env();
    let child = sweep.spawn_run();
    let (_, body, e) = scrape_until(
        port,
        Duration::from_secs(90),
        "trials running on the GPUs and measured peaks",
        |e| {
            let running: f64 = ["0", "1"]
                .iter()
                .filter_map(|g| e.get("sweepd_running_trials", &[("gpu", g)]))
                .sum();
            running >= 1.0
                && e.get("sweepd_trial_peak_memory_bytes_count", &[])
                    .unwrap_or(0.0)
                    >= 1.0
        },
    );
    for (family, ty) in [
        ("sweepd_running_trials", "gauge"),
        ("sweepd_par", "gauge"),
        ("sweepd_gpu_memory_free_bytes", "gauge"),
        ("sweepd_gpu_memory_used_bytes", "gauge"),
        ("sweepd_trial_peak_memory_bytes", "histogram"),
    ] {
        assert_family(&e, &body, family, ty);
    }
    let total = 24.0 * (1u64 << 30) as f64;
    for gpu in ["0", "1"] {
        let free = e.get("sweepd_gpu_memory_free_bytes", &[("gpu", gpu)]);
        let used = e.get("sweepd_gpu_memory_used_bytes", &[("gpu", gpu)]);
        let (Some(free), Some(used)) = (free, used) else {
            panic!("gpu {gpu} memory missing:\n{body}");
        };
        assert!(
            free >= 0.0 && used >= 0.0 && free + used <= total * 1.001,
            "{body}"
        );
        assert!(e.get("sweepd_par", &[("gpu", gpu)]).is_some(), "{body}");
        assert!(
            e.get("sweepd_running_trials", &[("gpu", gpu)]).is_some(),
            "{body}"
        );
    }
    assert!(e.check_histogram("sweepd_trial_peak_memory_bytes") >= 1.0);
    e.check_histogram("sweepd_trial_duration_seconds");
    assert_all_typed(&e, &body);
    sigterm(&child);
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
}

/// Regression: `sweepd_running_trials` is documented as "Trials running now, by GPU (cpu when
/// CPU-only)", but a CPU-only daemon used to never export `sweepd_running_trials{gpu="cpu"}`.
#[test]
fn metrics_running_trials_is_reported_on_a_cpu_only_run() {
    let port = free_port();
    let cfg = Cfg {
        n_trials: Some(10_000),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "2");
    let sweep = Sweep::with_toml(&metrics_toml(&cfg, &format!("127.0.0.1:{port}")));
    let mut child = sweep.spawn_run();
    wait_until(LIMIT, "two trials running", || running(&sweep) == 2);
    // A few housekeeping ticks with two trials running all along.
    let result = std::panic::catch_unwind(|| {
        scrape_until(
            port,
            Duration::from_secs(5),
            "sweepd_running_trials{gpu=\"cpu\"} = 2",
            |e| e.get("sweepd_running_trials", &[("gpu", "cpu")]) == Some(2.0),
        )
    });
    sigterm(&child);
    let _ = wait_exit(&mut child, LIMIT, "after SIGTERM", &sweep);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// Regression: the body is prometheus-client's OpenMetrics 1.0 text (`# EOF`, counters
/// typed under their base name with `_total` samples), but it is served as the classic
/// Prometheus format `text/plain; version=0.0.4` until this was fixed. A scraper parses by Content-Type, and the
/// classic format types a sample by its own name, so `sweepd_trial_failures_total` and
/// `sweepd_worker_restarts_total` arrive untyped. The type must match the body:
/// `application/openmetrics-text; version=1.0.0; charset=utf-8`.
#[test]
fn metrics_content_type_names_the_format_of_the_body() {
    let port = free_port();
    let cfg = Cfg {
        n_trials: Some(10_000),
        max_par: 1,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.1");
    let sweep = Sweep::with_toml(&metrics_toml(&cfg, &format!("127.0.0.1:{port}")));
    let mut child = sweep.spawn_run();
    let result = std::panic::catch_unwind(|| {
        let (headers, body, e) =
            scrape_until(port, Duration::from_secs(60), "a worker counter", |e| {
                e.get("sweepd_worker_restarts_total", &[]).is_some()
            });
        let ctype = headers.get("content-type").cloned().unwrap_or_default();
        let openmetrics_body = body.trim_end().ends_with("# EOF");
        if ctype.starts_with("application/openmetrics-text") {
            assert!(openmetrics_body, "OpenMetrics without # EOF:\n{body}");
        } else {
            assert!(ctype.starts_with("text/plain"), "{ctype}");
            // Classic text format: every sample typed under its own name (histograms aside).
            for (name, _, _) in &e.samples {
                let typed = e.types.contains_key(name)
                    || ["_bucket", "_count", "_sum"].iter().any(|s| {
                        name.strip_suffix(s)
                            .is_some_and(|base| e.types.get(base).is_some_and(|t| t == "histogram"))
                    });
                assert!(
                    typed,
                    "served as {ctype:?} (the classic format), but sample {name} has no TYPE \
                     line of its own name; the body is OpenMetrics ({}):\n{body}",
                    if openmetrics_body {
                        "it ends with # EOF"
                    } else {
                        "no # EOF"
                    }
                );
            }
        }
    });
    sigterm(&child);
    let _ = wait_exit(&mut child, LIMIT, "after SIGTERM", &sweep);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

// ---------------------------------------------------------------------------------------------
// 5. kill -9 at random moments
// ---------------------------------------------------------------------------------------------

#[test]
fn kill_9_at_random_moments_thirty_times_loses_nothing() {
    let seed: u64 = std::env::var("SWEEPD_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("kill schedule seed: {seed} (rerun with SWEEPD_TEST_SEED={seed})");
    let mut rng = XorShift(seed);
    let record = tempfile::NamedTempFile::new().unwrap();
    let n_trials = 200u64;
    let kills_wanted = 32;
    let cfg = Cfg {
        n_trials: Some(n_trials),
        max_par: 3,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.2")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let mut kills = 0;
    let mut schedule = Vec::new();
    for _ in 0..kills_wanted {
        let mut child = sweep.spawn_run();
        let after = rng.range(50, 800);
        schedule.push(after);
        std::thread::sleep(Duration::from_millis(after));
        if let Some(status) = child.try_wait().unwrap() {
            // The budget was spent before this kill: nothing more to interrupt.
            assert!(status.success(), "{}", sweep.daemon_stderr());
            break;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
    }
    eprintln!("killed after (ms): {schedule:?}");
    let interrupted_by_kills = count_in(&sweep, "RUNNING");
    let before_final: HashSet<i32> = recorded(record.path()).iter().map(|(p, _)| *p).collect();
    eprintln!(
        "{kills} kills; before the final run: {} COMPLETE, {} FAIL, {} RUNNING, {} WAITING; {} worker pids seen",
        count_in(&sweep, "COMPLETE"),
        count_in(&sweep, "FAIL"),
        interrupted_by_kills,
        count_in(&sweep, "WAITING"),
        before_final.len()
    );
    assert!(
        kills >= 30,
        "only {kills} kills before the budget ran out: the test needs a larger budget"
    );
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));

    let trials = sweep.trials();
    assert_nothing_lost(&sweep);
    assert_eq!(count_in(&sweep, "RUNNING"), 0);
    assert_eq!(
        finished(&sweep) as u64,
        n_trials,
        "COMPLETE + PRUNED + final FAIL is the budget"
    );
    assert!(
        count_in(&sweep, "FAIL") > 0,
        "the kills interrupted some trials"
    );
    // Numbers are 0..N-1, each once.
    let numbers: Vec<i64> = sweep
        .sql("SELECT number FROM trials ORDER BY number")
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(numbers, (0..numbers.len() as i64).collect::<Vec<_>>());
    // Every value recorded once, and it is the value the worker computed for those params.
    let dup = sweep.sql(
        "SELECT COUNT(*) FROM (SELECT trial_id FROM trial_values GROUP BY trial_id HAVING COUNT(*) > 1)",
    );
    assert_eq!(dup, vec!["0"]);
    let with_value = sweep.sql("SELECT COUNT(*) FROM trial_values");
    let complete = trials.iter().filter(|t| t["state"] == "COMPLETE").count();
    assert_eq!(
        with_value,
        vec![complete.to_string()],
        "values only for COMPLETE trials"
    );
    let started: HashSet<i64> = recorded(record.path()).iter().map(|(_, n)| *n).collect();
    for t in trials.iter().filter(|t| t["state"] == "COMPLETE") {
        let v = t["value"].as_f64().expect("a finite value");
        let want = expected_value(&t["params"]);
        assert!(
            (v - want).abs() <= 1e-9 * want.abs().max(1.0),
            "trial {} has value {v}, its params give {want}",
            t["number"]
        );
        assert!(
            started.contains(&t["number"].as_i64().unwrap()),
            "COMPLETE trial {} was never started by a worker",
            t["number"]
        );
    }
    integrity_ok(&sweep);
    let dump: Value = serde_json::from_str(&sweep.optuna("optuna_dump.py", &[&cfg.name])).unwrap();
    let optuna_trials = dump["trials"].as_array().unwrap();
    assert_eq!(optuna_trials.len(), trials.len(), "Optuna sees every trial");
    let optuna_complete = optuna_trials
        .iter()
        .filter(|t| t["state"] == "COMPLETE")
        .count();
    assert_eq!(optuna_complete, complete);
    // No worker of any instance is left: those of killed instances were reaped by the next.
    let pids: HashSet<i32> = recorded(record.path()).iter().map(|(p, _)| *p).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let left: Vec<i32> = loop {
        let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let described: Vec<String> = left
        .iter()
        .map(|p| {
            format!(
                "{p}: {}",
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .unwrap_or_default()
                    .replace('\0', " ")
            )
        })
        .collect();
    assert!(left.is_empty(), "workers still alive: {described:#?}");
}

// ---------------------------------------------------------------------------------------------
// 6. Another writer holds the database
// ---------------------------------------------------------------------------------------------

#[test]
fn database_locked_by_another_writer_is_waited_for() {
    let n_trials = 12;
    let cfg = Cfg {
        n_trials: Some(n_trials),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.2");
    let sweep = Sweep::new(&cfg);
    let child = sweep.spawn_run();
    wait_until(LIMIT, "two trials complete", || {
        count_in(&sweep, "COMPLETE") >= 2
    });
    let locker = Command::new(python())
        .arg("-c")
        .arg(
            "import sqlite3, sys, time\n\
             c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n\
             c.execute('BEGIN EXCLUSIVE')\n\
             print('locked', flush=True)\n\
             time.sleep(3)\n\
             c.execute('COMMIT')\n\
             print('released', flush=True)\n",
        )
        .arg(&sweep.db)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let locker = wait_output(locker, LIMIT);
    assert!(
        locker.status.success(),
        "the locker failed: {}",
        stderr(&locker)
    );
    assert_eq!(
        String::from_utf8_lossy(&locker.stdout),
        "locked\nreleased\n"
    );
    let mut child = child;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the daemon ended while the database was locked:\n{}",
        sweep.daemon_stderr()
    );
    let out = wait_output(child, LIMIT);
    let err = sweep.daemon_stderr();
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("database is locked"), "{err}");
    assert_eq!(
        sweep.count("COMPLETE"),
        n_trials as usize,
        "{:?}",
        sweep.trials()
    );
    assert_eq!(sweep.trials().len(), n_trials as usize);
    integrity_ok(&sweep);
}

// ---------------------------------------------------------------------------------------------
// 7 & 8. The file system under the database fills up or turns read-only
// ---------------------------------------------------------------------------------------------

/// Writes `path` until its file system says ENOSPC; returns the bytes written.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let mut total = 0u64;
    for chunk in [1usize << 16, 4096, 512, 1] {
        let buf = vec![0xa5u8; chunk];
        loop {
            match f.write(&buf) {
                Ok(0) => break,
                Ok(k) => total += k as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
    }
    let _ = f.sync_all();
    total
}

fn wait_exit(
    child: &mut Child,
    limit: Duration,
    what: &str,
    sweep: &Sweep,
) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: sweepd did not exit within {limit:?}:\n{}",
                sweep.daemon_stderr()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What must hold after any storage failure once the study has been run again: nothing left
/// RUNNING, every interrupted trial re-enqueued, every COMPLETE trial from before still there
/// with its value and params, and a sound database.
fn assert_recovered(sweep: &Sweep, before: &BTreeMap<i64, (Value, Value)>) {
    assert_nothing_lost(sweep);
    let after = complete_trials(sweep);
    for (number, was) in before {
        assert_eq!(
            after.get(number),
            Some(was),
            "COMPLETE trial {number} changed or vanished"
        );
    }
    integrity_ok(sweep);
}

#[test]
fn disk_full_stops_dispatch_with_a_clear_error_and_loses_nothing() {
    let cfg = Cfg {
        n_trials: Some(100_000),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.03");
    let ms = mounted_sweep(&cfg, |dir| Mount::tmpfs(&dir.join("fs"), "8m"));
    let sweep = &*ms;
    let mut child = sweep.spawn_run();
    wait_until(LIMIT, "some trials complete", || {
        count_in(sweep, "COMPLETE") >= 5
    });
    let filled = fill(&ms.mount.at.join("filler"));
    eprintln!("filled {filled} bytes; the file system is full");
    let status = wait_exit(&mut child, LIMIT, "on a full disk", sweep);
    let err = sweep.daemon_stderr();
    assert!(
        matches!(status.code(), Some(1) | Some(3)),
        "exit status {status} on a full disk:\n{err}"
    );
    let last = err
        .lines()
        .rev()
        .find(|l| l.starts_with("sweepd: "))
        .unwrap_or_default();
    eprintln!("exit {status}: {last}");
    assert!(
        ["full", "disk", "SQLITE_FULL"]
            .iter()
            .any(|w| last.contains(w)),
        "the error says the disk is full: {last:?}\n{err}"
    );
    assert!(
        last.contains(&sweep.db.display().to_string()),
        "the error names the database: {last:?}"
    );
    // Free the space; what was recorded before is intact, and the study goes on.
    std::fs::remove_file(ms.mount.at.join("filler")).unwrap();
    let before = complete_trials(sweep);
    assert!(before.len() >= 5);
    let cfg2 = Cfg {
        n_trials: Some(finished(sweep) as u64 + 4),
        ..cfg.clone()
    };
    std::fs::write(&sweep.config, mounted_toml(&cfg2, &sweep.path("logs"))).unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_recovered(sweep, &before);
    assert_eq!(finished(sweep) as u64, cfg2.n_trials.unwrap());
}

#[test]
fn read_only_database_directory_stops_dispatch_with_a_clear_error() {
    let cfg = Cfg {
        n_trials: Some(100_000),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.1");
    let ms = mounted_sweep(&cfg, |dir| {
        Mount::ext4(&dir.join("fs.img"), &dir.join("fs"))
    });
    let sweep = &*ms;
    let mut child = sweep.spawn_run();
    wait_until(LIMIT, "some trials complete", || {
        count_in(sweep, "COMPLETE") >= 5
    });
    // What is on disk now must survive; then the file system hits an error and goes read-only
    // under the running daemon (a remount with `mount -o remount,ro` is refused while files
    // are open for writing, which the database always is).
    let before = complete_trials(sweep);
    must("sync", &["-f", sweep.db.to_str().unwrap()]);
    let dev = ms.mount.source();
    let dev = Path::new(&dev)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    std::fs::write(format!("/sys/fs/ext4/{dev}/trigger_fs_error"), "1")
        .expect("trigger an ext4 error");
    wait_until(
        Duration::from_secs(10),
        "the file system to be read-only",
        || {
            let probe = std::fs::File::create(ms.mount.at.join("probe"));
            matches!(probe, Err(e) if e.raw_os_error() == Some(libc::EROFS))
        },
    );
    eprintln!("mount options now: {}", ms.mount.options());
    let status = wait_exit(&mut child, LIMIT, "on a read-only file system", sweep);
    let err = sweep.daemon_stderr();
    assert!(!status.success(), "exit 0 on a read-only database:\n{err}");
    let last = err
        .lines()
        .rev()
        .find(|l| l.starts_with("sweepd: "))
        .unwrap_or_default()
        .to_owned();
    eprintln!("exit {status}: {last}");
    assert!(
        last.contains(&sweep.db.display().to_string()),
        "the error names the database: {last:?}\n{err}"
    );
    // Still read-only: a new run is refused, naming the database.
    let out = sweep.run(&[], LIMIT);
    assert!(!out.status.success(), "{}", stderr(&out));
    let restart = stderr(&out)
        .lines()
        .rev()
        .find(|l| l.starts_with("sweepd: "))
        .unwrap_or_default()
        .to_owned();
    eprintln!(
        "restart on the read-only file system: exit {}: {restart}",
        out.status
    );
    assert!(
        restart.contains(&sweep.db.display().to_string()),
        "{}",
        stderr(&out)
    );

    // The administrator repairs the file system and mounts it again; the study goes on.
    let image = sweep.path("fs.img");
    let at = ms.mount.at.to_str().unwrap().to_owned();
    must("umount", &[&at]);
    let fsck = sh("e2fsck", &["-fy", image.to_str().unwrap()]);
    assert!(
        matches!(fsck.status.code(), Some(0) | Some(1)),
        "e2fsck: {}",
        String::from_utf8_lossy(&fsck.stdout)
    );
    must(
        "mount",
        &["-o", "loop,errors=remount-ro", image.to_str().unwrap(), &at],
    );
    let cfg2 = Cfg {
        n_trials: Some(finished(sweep) as u64 + 4),
        ..cfg.clone()
    };
    std::fs::write(&sweep.config, mounted_toml(&cfg2, &sweep.path("logs"))).unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_recovered(sweep, &before);
    assert_eq!(finished(sweep) as u64, cfg2.n_trials.unwrap());

    // Checked last, so that the recovery above is verified even while this fails.
    // Regression: on a file system gone read-only under it, sweepd used to stop with SQLite's
    // bare "(code: 778) disk I/O error" (SQLITE_IOERR_WRITE: SQLite reports EROFS from write() as an
    // I/O error) without saying that the database's file system is read-only, which is what
    // the operator must fix; the error now asks the file system. (At a restart SQLite itself says "attempt to write a readonly
    // database", so that half passes.)
    for (when, line) in [("mid-run", &last), ("at a restart", &restart)] {
        let lower = line.to_ascii_lowercase();
        assert!(
            lower.contains("readonly") || lower.contains("read-only"),
            "{when}, the error does not say the database is read-only: {line:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 9. Files the daemon creates are private to the service's user and group
// ---------------------------------------------------------------------------------------------

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn files_sweepd_creates_are_not_readable_by_other_users() {
    // Regression: the database (stderr tails of failed trials), its -wal/-shm and the worker
    // logs (everything a trial prints) were 0644 under the usual umask 022.
    let check = |paths: &[PathBuf]| {
        for p in paths.iter().filter(|p| p.exists()) {
            let m = mode(p);
            assert_eq!(
                m & 0o007,
                0,
                "{} is mode {m:o}: open to others",
                p.display()
            );
        }
    };
    // Persistent workers, chatty enough for their logs to rotate (worker-N.log.1).
    let cfg = Cfg {
        n_trials: Some(3),
        max_par: 1,
        worker_extra: "log_max_bytes = \"64KiB\"\n".into(),
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_CHATTY", "1")
    .env("SWEEPD_TEST_SLEEP", "0.3");
    let mut sweep = Sweep::new(&cfg);
    sweep.umask = Some(0o022);
    let mut child = sweep.spawn_run();
    wait_until(LIMIT, "a finished trial", || {
        sweep.db.exists()
            && sweep.sql("SELECT count(*) FROM trials WHERE state = 'COMPLETE'")[0] != "0"
    });
    let db = sweep.db.to_string_lossy().into_owned();
    if child.try_wait().unwrap().is_none() {
        // WAL mode: while the daemon has the database open, its -wal and -shm exist.
        assert!(PathBuf::from(format!("{db}-wal")).exists());
    }
    check(&[
        sweep.db.clone(),
        PathBuf::from(format!("{db}-wal")),
        PathBuf::from(format!("{db}-shm")),
    ]);
    let status = wait_exit(&mut child, LIMIT, "the persistent study", &sweep);
    assert!(status.success(), "{}", sweep.daemon_stderr());
    let logs = sweep.path("logs");
    let files: Vec<PathBuf> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        files
            .iter()
            .any(|p| p.to_string_lossy().ends_with(".log.1")),
        "a rotated log: {files:?}"
    );
    let mut paths = files;
    paths.push(logs);
    paths.push(sweep.db.clone());
    check(&paths);

    // Oneshot workers: the results directory too, created below a log_dir that does not exist.
    let cfg = Cfg {
        n_trials: Some(2),
        mode: "oneshot",
        ..Cfg::default()
    };
    let mut sweep = Sweep::with_toml(
        &cfg.to_toml()
            .replace("log_dir = \"logs\"", "log_dir = \"out/logs\""),
    );
    sweep.umask = Some(0o022);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let logs = sweep.path("out/logs");
    let mut paths = vec![
        sweep.path("out"),
        logs.clone(),
        logs.join("results"),
        sweep.db.clone(),
    ];
    paths.extend(std::fs::read_dir(&logs).unwrap().map(|e| e.unwrap().path()));
    check(&paths);
    // A database the user created is theirs: left as it is, with a warning at start.
    let db = sweep.db.clone();
    std::fs::set_permissions(&db, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&db), 0o644);
    assert!(
        stderr(&out).contains("is readable by every user"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_metrics_port_in_use_is_a_metrics_error_not_a_gpu_error() {
    // The port is taken by binding port 0 and keeping it: asking for a free port and binding it
    // afterwards races with every other test (and process) that does the same.
    let taken = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    let sweep = Sweep::with_toml(&metrics_toml(&Cfg::default(), &format!("127.0.0.1:{port}")));
    let out = sweep.run(&[], LIMIT);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let last = err
        .lines()
        .rev()
        .find(|l| l.starts_with("sweepd: "))
        .unwrap();
    assert!(
        last.starts_with(&format!("sweepd: [metrics] listen = 127.0.0.1:{port}: ")),
        "{last}"
    );
}
