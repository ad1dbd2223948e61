//! Two machines that share a host id (issue 39, defect 8). A second daemon with the first
//! one's `SWEEPD_HOST_ID` on another machine, or in another PID namespace (a container), used
//! to find the first one's pid missing from its own `/proc`, take the host's row, fail the
//! first one's running trials and discard what they then finished; the two took the row from
//! each other for as long as both ran. Now it is refused at start, and the first goes on.
//!
//! The "other machine" is a daemon in PID, UTS and mount namespaces of its own (`unshare`, as
//! a container runs it), with a file of its own bound over `/etc/machine-id`: `unshare` and
//! `sh` are the test's launcher, never sweepd's. These tests need root, as CI has.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(300);
/// A hang guard for a daemon that is to be refused at once (before the fix it ran on).
const REFUSED_WITHIN: Duration = Duration::from_secs(60);
/// The exit code of a start refused because a live daemon elsewhere has our host id.
const HOST_ID_IN_USE: i32 = 7;
const HOST: &str = "twin";

/// `cmd` in PID, UTS and mount namespaces of its own, as a container runs it; with
/// `machine_id`, that file bound over the machine id in its mount namespace, as another
/// machine. `--kill-child`: the daemon dies with its launcher, whatever the test does.
fn elsewhere(cmd: &Command, machine_id: Option<&Path>) -> Command {
    let mut out = Command::new(tool("unshare"));
    out.args([
        "--pid",
        "--uts",
        "--mount",
        "--fork",
        "--mount-proc",
        "--kill-child",
    ]);
    if let Some(file) = machine_id {
        let target = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .expect("this test needs /etc/machine-id or /var/lib/dbus/machine-id");
        out.arg(tool("sh"))
            .arg("-c")
            .arg(format!(
                "mount --bind \"$1\" {target} && shift && exec \"$@\""
            ))
            .arg("sh")
            .arg(file);
    }
    out.arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => out.env(k, v),
            None => out.env_remove(k),
        };
    }
    out
}

/// This machine's id, as sweepd reads it.
fn our_machine_id() -> String {
    ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// A study whose trials wait at `gate` until the test opens it, so that the first daemon's
/// trials are RUNNING while the second starts.
fn gated(cfg: Cfg, gate: &Path) -> Cfg {
    Cfg {
        n_trials: Some(4),
        max_par: 2,
        ..cfg
    }
    .env("SWEEPD_TEST_GATE", gate.to_str().unwrap())
}

/// Runs the second daemon (`second`, already placed elsewhere) to its end and checks that it
/// was refused at start with what to do; a daemon that starts instead fails the test at
/// `REFUSED_WITHIN` (it would wait at the gate).
fn assert_refused(second: Command, other_machine_id: Option<&str>) -> Output {
    let mut second = second;
    let child = second
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn unshare");
    let out = wait_output(child, REFUSED_WITHIN);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(HOST_ID_IN_USE), "{err}");
    assert!(
        err.contains(&format!("host id `{HOST}`")) && err.contains("SWEEPD_HOST_ID"),
        "the error names the host id and what to set: {err}"
    );
    let ours = our_machine_id();
    assert!(err.contains(&ours), "the first one's machine id: {err}");
    if let Some(theirs) = other_machine_id {
        assert!(err.contains(theirs), "the second one's machine id: {err}");
    }
    assert!(
        !err.contains("interrupted") && !err.contains("re-enqueued"),
        "{err}"
    );
    out
}

/// The first daemon, its trials released at the gate, ends its study with every trial
/// COMPLETE: none failed, none found ended by another process, its row never taken.
fn assert_first_untouched(first: &Sweep, mut daemon: std::process::Child, gate: &Path) {
    assert_eq!(first.count("FAIL"), 0, "{:#?}", first.trials());
    std::fs::write(gate, "").unwrap();
    let status = wait_output_of(&mut daemon, first);
    let log = first.daemon_stderr();
    assert!(status.success(), "{log}");
    let states = first.states();
    assert_eq!(states, ["COMPLETE"; 4], "{:#?}", first.trials());
    for bad in [
        "already ended by another process",
        "daemon row was taken",
        "could not take the daemon row back",
    ] {
        assert!(!log.contains(bad), "{bad}: {log}");
    }
}

/// Waits (bounded) for a daemon of `sweep` started in the background; past `LIMIT` the test
/// fails with the end of its log.
fn wait_output_of(daemon: &mut std::process::Child, sweep: &Sweep) -> std::process::ExitStatus {
    let start = std::time::Instant::now();
    loop {
        if let Some(s) = daemon.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > LIMIT {
            let log = sweep.daemon_stderr();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            panic!(
                "a daemon did not finish within {LIMIT:?}; the end of its log:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A study dir on PostgreSQL at `url` whose daemon runs with our one host id.
fn twin(url: &str, gate: &Path, host_timeout: &str) -> Sweep {
    let cfg = gated(
        Cfg {
            name: "twins".into(),
            storage: Some(format!(
                "url = \"{url}\"\nhost_timeout = \"{host_timeout}\""
            )),
            ..Cfg::default()
        },
        gate,
    );
    let mut sweep = Sweep::new(&cfg);
    sweep.env.push(("SWEEPD_HOST_ID".into(), HOST.into()));
    sweep
}

/// Waits until `n` trials are RUNNING on PostgreSQL at `url`.
fn wait_running(url: &str, n: usize) {
    wait_until(LIMIT, &format!("{n} trials RUNNING"), || {
        pg_try_column(url, "SELECT count(*) FROM trials WHERE state = 'RUNNING'")
            .is_some_and(|c| c == [n.to_string()])
    });
}

/// Two hosts with one name on PostgreSQL: the first runs two trials; the second, with the same
/// host id in PID namespaces of its own (`machine_id`: and another machine id), is refused.
fn two_hosts_one_name_on_postgres(machine_id: Option<&str>) {
    let pg = PgServer::start();
    let url = pg.create_db("twins");
    let gate_dir = tempfile::tempdir().unwrap();
    let gate = gate_dir.path().join("open");
    let host = || twin(&url, &gate, "60s");
    let first = host();
    let daemon = first.spawn_run();
    wait_running(&url, 2);
    let second = host();
    let id_file = second.path("machine-id");
    if let Some(id) = machine_id {
        std::fs::write(&id_file, format!("{id}\n")).unwrap();
    }
    assert_refused(
        elsewhere(
            &second.sweepd(&["run"]),
            machine_id.map(|_| id_file.as_path()),
        ),
        machine_id,
    );
    assert_eq!(
        pg_column(&url, "SELECT state FROM sweepd_daemon WHERE host = 'twin'"),
        ["RUNNING"],
        "the first one's row"
    );
    assert_first_untouched(&first, daemon, &gate);
    // Optuna reads the study.
    let dump = optuna_dump(&url, "twins");
    assert_eq!(dump["trials"].as_array().unwrap().len(), 4, "{dump}");
}

#[test]
fn a_second_machine_with_the_same_host_id_on_postgresql_is_refused_and_fails_none_of_the_firsts_trials(
) {
    two_hosts_one_name_on_postgres(Some("0123456789abcdef0123456789abcdef"));
}

#[test]
fn a_container_with_the_same_host_id_on_postgresql_is_refused_and_fails_none_of_the_firsts_trials()
{
    two_hosts_one_name_on_postgres(None);
}

/// SQLite, one study file shared by two containers of one machine (a volume) whose daemons
/// have one host id: the second cannot see the first's pid, and used to take the study.
#[test]
fn a_container_with_the_same_host_id_on_one_sqlite_file_is_refused_and_fails_none_of_the_firsts_trials(
) {
    let gate_dir = tempfile::tempdir().unwrap();
    let gate = gate_dir.path().join("open");
    let mut first = Sweep::new(&gated(Cfg::default(), &gate));
    first.env.push(("SWEEPD_HOST_ID".into(), HOST.into()));
    let daemon = first.spawn_run();
    wait_until(LIMIT, "the first daemon's two trials RUNNING", || {
        running(&first) == 2
    });
    assert_refused(elsewhere(&first.sweepd(&["run"]), None), None);
    assert_first_untouched(&first, daemon, &gate);
}

/// The other way round: the first daemon is cut off from the server for longer than
/// `host_timeout`, and a second one with its host id, elsewhere, takes the study over (the
/// failover: the first one's trials FAIL and re-enqueued). When the link is mended the first
/// finds its row taken by a live daemon: it stops (exit 7) instead of taking the row back,
/// where the two used to take it from each other every second for as long as both ran.
#[test]
fn a_daemon_cut_off_and_taken_over_under_its_host_id_stops_instead_of_taking_the_row_back() {
    let pg = PgServer::start();
    let url = pg.create_db("twins");
    let proxy = PgProxy::start(pg.port);
    let gate_dir = tempfile::tempdir().unwrap();
    let gate = gate_dir.path().join("open");
    let first = twin(&proxy.url("twins"), &gate, "3s");
    let second = twin(&url, &gate, "3s");
    let mut first_daemon = first.spawn_run();
    wait_running(&url, 2);
    proxy.cut(true);
    wait_until(
        LIMIT,
        "the first daemon's heartbeat older than host_timeout",
        || {
            pg_try_column(
                &url,
                "SELECT CAST(EXTRACT(EPOCH FROM (LOCALTIMESTAMP - heartbeat_at)) > 4 AS TEXT) \
             FROM sweepd_daemon",
            )
            .is_some_and(|c| c == ["true"])
        },
    );
    let mut launcher = elsewhere(&second.sweepd(&["run"]), None);
    let log = std::fs::File::create(second.path("sweepd.stderr")).unwrap();
    let mut second_daemon = launcher
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn unshare");
    wait_until(LIMIT, "the second daemon taking the study over", || {
        pg_try_column(&url, "SELECT count(*) FROM trials WHERE state = 'FAIL'")
            .is_some_and(|c| c == ["2"])
    });
    proxy.cut(false);
    let status = wait_output_of(&mut first_daemon, &first);
    let first_log = first.daemon_stderr();
    assert_eq!(status.code(), Some(HOST_ID_IN_USE), "{first_log}");
    assert!(
        first_log.contains(&format!("host id `{HOST}`"))
            && !first_log.contains("took the row back"),
        "{first_log}"
    );
    std::fs::write(&gate, "").unwrap();
    let status = wait_output_of(&mut second_daemon, &second);
    let second_log = second.daemon_stderr();
    assert!(status.success(), "{second_log}");
    assert!(!second_log.contains("daemon row was taken"), "{second_log}");
    // Four trials final, two of the first's failed over with their copies run by the second.
    let trials = second.trials();
    let complete = trials.iter().filter(|t| t["state"] == "COMPLETE").count();
    let failed: Vec<_> = trials.iter().filter(|t| t["state"] == "FAIL").collect();
    assert_eq!((complete, failed.len()), (4, 2), "{trials:#?}");
    for t in failed {
        assert_eq!(t["fail_kind"], "interrupted", "{t}");
    }
}
