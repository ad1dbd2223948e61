//! The GPU ledger and the runtime directory against another user and against garbage
//! (issue 39, defects 1 and 2): files sweepd refuses are left as they are, and what is written
//! in the ledger neither stalls a study nor makes a daemon admit as if alone.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

/// A hang guard for the small studies here (they take seconds), not a speed assertion.
const LIMIT: Duration = Duration::from_secs(120);

const VICTIM: &str = "export PATH=$HOME/bin:$PATH\n";

/// A small study on one fake 24 GiB card: `n` trials of 1 GiB, one at a time.
fn small_study(n: u64) -> (Sweep, FakeGpus) {
    let env = [
        ("SIM_MEM", "1G"),
        ("SIM_CONTEXT", "256M"),
        ("SIM_HOLD_S", "0.2"),
    ];
    gpu_sweep(&["24G Fake A10"], n, 1, "trial_memory = \"2GiB\"", &env)
}

/// `sweep`'s environment with `key` set to `value`, or taken out (`None`).
fn set_env(sweep: &mut Sweep, key: &str, value: Option<&str>) {
    sweep.env.retain(|(k, _)| k != key);
    if let Some(v) = value {
        sweep.env.push((key.into(), v.into()));
    }
}

/// A file of someone's, to be left as it is.
fn victim(sweep: &Sweep) -> std::path::PathBuf {
    let path = sweep.path("bashrc");
    std::fs::write(&path, VICTIM).unwrap();
    path
}

fn assert_refused(out: &std::process::Output, path: &Path, why: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "the daemon ran: {err}");
    assert!(
        err.contains(&path.display().to_string()) && err.contains(why),
        "no refusal naming {} ({why}):\n{err}",
        path.display()
    );
}

#[test]
fn a_symlinked_ledger_leaves_its_target_unchanged() {
    let (mut sweep, _gpus) = small_study(2);
    let victim = victim(&sweep);
    let link = sweep.path("gpu-ledger-link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    set_env(&mut sweep, "SWEEPD_LEDGER", Some(link.to_str().unwrap()));
    let out = sweep.run(&[], LIMIT);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), VICTIM);
    assert_refused(&out, &link, "symbolic link");
}

#[test]
fn a_world_writable_ledger_is_refused_and_left_unchanged() {
    let (sweep, gpus) = small_study(2);
    let ledger = ledger_of(&gpus);
    std::fs::write(&ledger, VICTIM).unwrap();
    std::fs::set_permissions(&ledger, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = sweep.run(&[], LIMIT);
    assert_eq!(std::fs::read_to_string(&ledger).unwrap(), VICTIM);
    assert_refused(&out, &ledger, "writable by every user");
}

#[test]
fn a_runtime_directory_another_user_made_leaves_the_file_it_links_to_unchanged() {
    // No XDG_RUNTIME_DIR, no systemd: the private directory in the temporary directory, which
    // another user (uid 4242) made first, open to all, with the ledger's name linked to a
    // file of ours.
    let (mut sweep, _gpus) = small_study(2);
    let victim = victim(&sweep);
    let tmp = sweep.path("tmp");
    let uid = nix::unistd::getuid().as_raw();
    let theirs = tmp.join(format!("sweepd-{uid}"));
    std::fs::create_dir_all(&theirs).unwrap();
    std::os::unix::fs::symlink(&victim, theirs.join("gpu-ledger")).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(4242), Some(4242))
        .expect("chown to another user's uid: this test runs as root, as CI does");
    set_env(&mut sweep, "SWEEPD_LEDGER", None);
    // Nor from the environment this test runs in.
    let mut cmd = sweep.sweepd(&["run"]);
    cmd.env_remove("SWEEPD_LEDGER")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("RUNTIME_DIRECTORY")
        .env("TMPDIR", &tmp)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = wait_output(cmd.spawn().unwrap(), LIMIT);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), VICTIM);
    assert!(
        !stderr(&out).contains("/run/sweepd"),
        "/run/sweepd is writable on this machine, and the daemon picks it before the temporary directory: {}",
        stderr(&out)
    );
    assert_refused(&out, &theirs, "owned by uid 4242");
}

#[test]
fn a_daemon_told_to_run_without_a_ledger_runs_alone_and_says_so() {
    let (mut sweep, gpus) = small_study(2);
    set_env(&mut sweep, "SWEEPD_LEDGER", Some("none"));
    let out = sweep.run(&[], LIMIT);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("SWEEPD_LEDGER=none: no GPU ledger"), "{err}");
    assert_eq!(sweep.count("COMPLETE"), 2);
    assert!(!ledger_of(&gpus).exists());
    assert!(!Path::new("none").exists());
}

/// The host's boot clock in milliseconds, as the daemons write heartbeats.
fn boot_ms() -> u64 {
    let up = std::fs::read_to_string("/proc/uptime").unwrap();
    let secs: f64 = up.split_whitespace().next().unwrap().parse().unwrap();
    (secs * 1000.0) as u64
}

/// Pid 1's start time: a live process, and not a sweepd daemon.
fn init_start() -> u64 {
    let stat = std::fs::read_to_string("/proc/1/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// Lines naming pid 1, with its real start time and a fresh heartbeat, followed by `lines`
/// (each `DEVICE ...` after the pid and start time).
fn forged(lines: &[&str]) -> String {
    let (start, now) = (init_start(), boot_ms());
    let mut text = format!("1 {start} beat {now}\n");
    for l in lines {
        text.push_str(&format!("1 {start} {l}\n"));
    }
    text
}

/// Runs `sweep` to its end, which must complete its `n` trials.
fn completes(sweep: &Sweep, n: usize) -> String {
    let out = sweep.run(&[], LIMIT);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(sweep.count("COMPLETE"), n, "{err}");
    err
}

#[test]
fn a_forged_entry_of_pid_1_claiming_1_tib_does_not_stall_the_study() {
    let (sweep, gpus) = small_study(3);
    let tib = 1u64 << 40;
    std::fs::write(
        ledger_of(&gpus),
        forged(&[&format!("0 {tib} 1 0 0 0 0:{tib}")]),
    )
    .unwrap();
    let err = completes(&sweep, 3);
    assert!(
        err.contains("entries of pid 1") && err.contains("not a sweepd daemon"),
        "{err}"
    );
    let left = std::fs::read_to_string(ledger_of(&gpus)).unwrap();
    assert!(!left.lines().any(|l| l.starts_with("1 ")), "{left}");
}

#[test]
fn a_forged_hold_does_not_stall_the_study() {
    let (sweep, gpus) = small_study(3);
    let hold = 22u64 << 30;
    std::fs::write(
        ledger_of(&gpus),
        forged(&["0 0 0 0 0 0 -", &format!("0 + 1 {hold} 1")]),
    )
    .unwrap();
    let err = completes(&sweep, 3);
    assert!(!err.contains("leaving 22.0 GiB free"), "{err}");
}

#[test]
fn an_appended_0xff_byte_does_not_make_the_daemons_admit_as_if_alone() {
    // As `tests/gpu.rs::two_daemons_on_one_fake_card_never_over_admit`, with one byte that is
    // not text appended to the ledger before the second daemon starts.
    let (a, b, gpus) = two_daemons_on_one_card(|gpus| {
        use std::io::Write;
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(ledger_of(gpus))
            .unwrap();
        // Under the daemons' lock, so that none of them is rewriting the file meanwhile.
        let flock = nix::fcntl::FlockArg::LockExclusive;
        let mut f = nix::fcntl::Flock::lock(f, flock)
            .map_err(|(_, e)| e)
            .unwrap();
        f.write_all(&[0xff]).unwrap();
    });
    let most = most_holding_at_once(&gpus);
    assert!(most <= 3, "{most} trials held memory at once");
    let said = format!("{}{}", a.daemon_stderr(), b.daemon_stderr());
    assert!(said.contains("lines that do not read as entries"), "{said}");
}

#[test]
fn a_ledger_deleted_again_and_again_is_made_again_and_said() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let mut deleter = None;
    let (a, b, gpus) = two_daemons_on_one_card(|gpus| {
        let (path, stop) = (ledger_of(gpus), stop.clone());
        deleter = Some(std::thread::spawn(move || {
            let mut deleted = 0;
            while !stop.load(Ordering::Relaxed) {
                deleted += usize::from(std::fs::remove_file(&path).is_ok());
                std::thread::sleep(Duration::from_millis(50));
            }
            deleted
        }));
    });
    stop.store(true, Ordering::Relaxed);
    let deleted = deleter.unwrap().join().unwrap();
    assert!(deleted > 10, "deleted {deleted} times");
    let said = format!("{}{}", a.daemon_stderr(), b.daemon_stderr());
    assert!(said.contains("was gone (deleted?): made again"), "{said}");
    let most = most_holding_at_once(&gpus);
    assert!(most <= 3, "{most} trials held memory at once");
}

#[test]
fn a_48_mb_ledger_is_cut_down_to_its_live_entries_and_the_study_finishes() {
    let (sweep, gpus) = small_study(4);
    let line = format!("1 {} 0 0 0 1024 0 0 -\n", init_start());
    let big = line.repeat((48 << 20) / line.len() + 1);
    std::fs::write(ledger_of(&gpus), big).unwrap();
    let err = completes(&sweep, 4);
    let size = std::fs::metadata(ledger_of(&gpus)).unwrap().len();
    assert!(size < 64 << 10, "the ledger is still {size} bytes");
    assert!(err.contains("bytes (at most"), "{err}");
}
