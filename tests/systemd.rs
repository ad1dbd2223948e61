//! Running sweepd as a systemd service: `contrib/sweepd@.service` passes `systemd-analyze verify`
//! and keeps what GPU trials need, and `make install` into a DESTDIR lays out what the unit runs,
//! with an installed binary that finds its installed Python helper; `make uninstall` removes it.
//!
//! Needs `systemd-analyze` (Debian: the `systemd` package) and `make`; it starts no service.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const UNIT: &str = "contrib/sweepd@.service";
/// The binary path the unit is written with; `make install` rewrites `/usr/local` to PREFIX.
const UNIT_BIN: &str = "/usr/local/bin/sweepd";

fn unit_text() -> String {
    std::fs::read_to_string(repo().join(UNIT)).expect("read contrib/sweepd@.service")
}

/// The unit's `Key=value` settings in file order, comments and section headers left out.
fn settings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .filter(|l| !l.starts_with('['))
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            Some((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

fn setting(text: &str, key: &str) -> Option<String> {
    // The last assignment wins, as in systemd (for single-valued keys).
    settings(text)
        .into_iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn systemd_analyze() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let found = [PathBuf::from("/usr/bin"), PathBuf::from("/bin")]
        .into_iter()
        .chain(on_path)
        .map(|d| d.join("systemd-analyze"))
        .find(|p| p.is_file());
    match found {
        Some(p) => p,
        None => panic!(
            "systemd-analyze not found: install systemd (Debian/Ubuntu: `apt-get install systemd`) \
             to check contrib/sweepd@.service"
        ),
    }
}

/// `systemd-analyze verify` of `text` as the instance `name` in a fresh directory, returning
/// what it said about that unit, and the whole output for failure messages.
fn verify(name: &str, text: &str) -> (Vec<String>, Output) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write unit");
    let out = Command::new(systemd_analyze())
        // --man=no: no man-db lookups for Documentation=; --recursive-errors=no: the exit status
        // reflects this unit only, not the host's units it pulls in (multi-user.target, ...).
        .args(["verify", "--man=no", "--recursive-errors=no"])
        .arg(&path)
        .env("SYSTEMD_LOG_COLOR", "0")
        .stdin(Stdio::null())
        .output()
        .expect("run systemd-analyze");
    // Filtering: verify also loads the units ours depends on and may warn about them, or about
    // the host (a container without /run/systemd, a missing /dev node); that is not ours and
    // would make the test depend on the machine. Everything it reports about our unit names it:
    // as the file ("/tmp/.../sweepd@x.service:12: Unknown key ...") or as the unit
    // ("sweepd@x.service: Command ... is not executable"); the fragment of an instance loaded
    // from a template is "sweepd@.service". So keep the lines that mention "sweepd@" (the
    // slice instances go to, "system-sweepd.slice", does not).
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let ours = all
        .lines()
        .filter(|l| l.contains("sweepd@"))
        .map(str::to_owned)
        .collect();
    (ours, out)
}

#[test]
fn systemd_analyze_verifies_the_unit() {
    let text = unit_text();
    assert!(
        text.contains(&format!("ExecStart={UNIT_BIN} ")),
        "the unit's ExecStart no longer starts with {UNIT_BIN}: update this test and the \
         Makefile's SWEEPD_UNIT_SED"
    );
    // verify checks that ExecStart's binary exists and is executable: point it at ours. As an
    // instance, the way `systemctl start sweepd@NAME` loads it, so that %i is expanded too.
    let text = text.replace(UNIT_BIN, env!("CARGO_BIN_EXE_sweepd"));
    let (ours, out) = verify("sweepd@systemdtest.service", &text);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        ours.is_empty(),
        "systemd-analyze verify reports problems in {UNIT}:\n{}\n\nfull output:\n{all}",
        ours.join("\n")
    );
    assert!(
        out.status.success(),
        "systemd-analyze verify failed ({}) on {UNIT}:\n{all}",
        out.status
    );

    // The filter is not vacuous: the same unit with a typo and a missing binary is caught.
    let broken = text
        .replace("KillMode=mixed", "KillMode=mixd")
        .replace(env!("CARGO_BIN_EXE_sweepd"), "/nonexistent/sweepd");
    let (caught, _) = verify("sweepd@broken.service", &broken);
    assert!(
        caught.iter().any(|l| l.contains("mixd"))
            && caught.iter().any(|l| l.contains("/nonexistent/sweepd")),
        "systemd-analyze's messages about a broken unit were not recognised; the filter in \
         verify() needs updating. Lines kept: {caught:?}"
    );
}

#[test]
fn the_unit_keeps_what_gpu_trials_need() {
    let text = unit_text();
    let want = [
        ("Type", "notify"),
        ("NotifyAccess", "main"),
        ("KillMode", "mixed"),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("Restart", "on-failure"),
        ("OOMPolicy", "continue"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "read-only"),
        ("NoNewPrivileges", "yes"),
        ("WorkingDirectory", "/var/lib/sweepd/%i"),
    ];
    for (key, value) in want {
        assert_eq!(
            setting(&text, key).as_deref(),
            Some(value),
            "{UNIT}: {key}= should be {value}"
        );
    }
    assert!(
        settings(&text).iter().any(|(k, v)| k == "ReadWritePaths"
            && v.split_whitespace()
                .any(|p| p.trim_start_matches('-') == "/var/lib/sweepd/%i")),
        "{UNIT}: the study directory must be writable under ProtectSystem=strict"
    );
    let exec = setting(&text, "ExecStart").expect("ExecStart");
    assert!(
        exec.starts_with(&format!(
            "{UNIT_BIN} run -c /var/lib/sweepd/%i/supervisor.toml"
        )),
        "{UNIT}: ExecStart= {exec}"
    );
    let watchdog = setting(&text, "WatchdogSec").expect("WatchdogSec=");
    assert!(humantime::parse_duration(&watchdog).expect("WatchdogSec") >= Duration::from_secs(10));
    // SIGTERM gives running trials shutdown_grace (default 30s), then sweepd kills their
    // groups (SIGTERM, SIGKILL 3s later): systemd must not SIGKILL everything before that.
    let stop = setting(&text, "TimeoutStopSec").expect("TimeoutStopSec=");
    let stop = humantime::parse_duration(&stop).expect("TimeoutStopSec");
    assert!(
        stop >= Duration::from_secs(30 + 3 + 15),
        "{UNIT}: TimeoutStopSec={stop:?} leaves no room for the default shutdown_grace (30s)"
    );
    // Each of these breaks GPU trials: device access (/dev/nvidia*: PrivateDevices, a device
    // allow-list, ProtectClock's implied DeviceAllow=char-rtc), JIT compilers (MemoryDeny...),
    // CUDA's ioctls (SystemCallFilter), the single-daemon check (ProtectProc), other studies'
    // shared memory (RemoveIPC); PrivateUsers remaps groups such as video for no gain.
    for key in [
        "PrivateDevices",
        "DeviceAllow",
        "DevicePolicy",
        "ProtectClock",
        "MemoryDenyWriteExecute",
        "SystemCallFilter",
        "ProtectProc",
        "RemoveIPC",
        "PrivateUsers",
    ] {
        assert!(
            setting(&text, key).is_none(),
            "{UNIT} sets {key}=, which gets in the way of GPU trials (see docs/operations.md)"
        );
    }
}

#[test]
fn the_unit_keeps_new_files_private_to_the_service() {
    // Regression: with systemd's default UMask=0022 everything the workers wrote in the study
    // directory (checkpoints, result files) was readable by every user on the machine.
    assert_eq!(
        setting(&unit_text(), "UMask").as_deref(),
        Some("0027"),
        "{UNIT}: UMask="
    );
}

#[test]
fn the_unit_does_not_restart_a_daemon_whose_study_was_deleted() {
    // Exit 5: the study was deleted from the database under the daemon. A restart would create
    // it anew, empty, and run the whole budget again without anyone asking for it.
    let prevent = setting(&unit_text(), "RestartPreventExitStatus").unwrap_or_default();
    // Exit 6: the trials keep failing with the same error in the objective; a restart would
    // only fail them again (the restart loop sweepd exists to end). Exit 7: another machine or
    // container's live daemon has this host id; only a unique SWEEPD_HOST_ID helps.
    for code in ["2", "4", "5", "6", "7"] {
        assert!(
            prevent.split_whitespace().any(|c| c == code),
            "{UNIT}: RestartPreventExitStatus={prevent} lacks {code}"
        );
    }
}

/// `make` in the repository, isolated from an outer make (`make test` runs these tests) and
/// from install variables in the environment.
fn make(args: &[&str]) -> Output {
    let out = Command::new("make")
        .arg("-C")
        .arg(repo())
        .args(args)
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("MAKELEVEL")
        .env_remove("SYSTEMD_UNIT_DIR")
        .env_remove("SWEEPD_STATE_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("run make (is it installed?)");
    assert!(
        out.status.success(),
        "make {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Arguments for `make install`/`uninstall` of the binary under test into `dest`, PREFIX=/usr.
/// CARGO=false: installing a given SWEEPD_BIN must not build anything (a release build would
/// take minutes); if the Makefile tried, the test would fail.
fn install_args(dest: &Path) -> Vec<String> {
    vec![
        format!("DESTDIR={}", dest.display()),
        "PREFIX=/usr".into(),
        format!("SWEEPD_BIN={}", env!("CARGO_BIN_EXE_sweepd")),
        "SWEEPD_USER=".into(),
        "CARGO=false".into(),
    ]
}

fn make_with(target: &str, dest: &Path) -> Output {
    let mut args = vec![target.to_owned()];
    args.extend(install_args(dest));
    make(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn make_install_into_a_destdir() {
    let dest = tempfile::tempdir().expect("temp dir");
    let d = dest.path();
    let out = make_with("install", d);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();

    let bin = d.join("usr/bin/sweepd");
    let helper = d.join("usr/share/sweepd/python/sweepd_worker.py");
    let unit = d.join("usr/lib/systemd/system/sweepd@.service");
    for f in [
        &bin,
        &helper,
        &unit,
        &d.join("usr/share/sweepd/supervisor.toml"),
        &d.join("usr/share/sweepd/examples/quadratic_worker.py"),
        &d.join("usr/share/sweepd/examples/oneshot_train.py"),
        &d.join("usr/share/doc/sweepd/operations.md"),
    ] {
        assert!(f.is_file(), "make install did not install {}", f.display());
    }
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(bin.metadata().unwrap().permissions().mode() & 0o777, 0o755);
    assert_eq!(
        std::fs::read(&helper).unwrap(),
        std::fs::read(repo().join("python/sweepd_worker.py")).unwrap()
    );
    // Nothing outside DESTDIR's usr/ and var/ (the state directory).
    let mut top: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["usr", "var"]);
    assert!(d.join("var/lib/sweepd").is_dir());

    // The installed unit runs the installed binary, and nothing still points at /usr/local.
    let text = std::fs::read_to_string(&unit).unwrap();
    assert_eq!(
        setting(&text, "ExecStart").as_deref(),
        Some("/usr/bin/sweepd run -c /var/lib/sweepd/%i/supervisor.toml $SWEEPD_ARGS")
    );
    assert!(!text.contains("/usr/local"), "installed unit:\n{text}");
    // No SWEEPD_USER: the User= line stays commented out.
    assert!(setting(&text, "User").is_none() && text.contains("\n#User=sweepd\n"));
    // It tells, and does not run, the systemctl commands.
    assert!(
        said.contains("systemctl daemon-reload") && said.contains("systemctl enable --now sweepd@"),
        "make install output:\n{said}"
    );

    // The installed binary puts the installed helper, <prefix>/share/sweepd/python, on its
    // workers' PYTHONPATH: one oneshot trial records where `import sweepd_worker` came from.
    let sweep = Sweep::new(&Cfg {
        n_trials: Some(1),
        max_par: 1,
        mode: "oneshot",
        command: vec![python(), "helper_worker.py".into()],
        ..Cfg::default()
    });
    std::fs::write(
        sweep.path("helper_worker.py"),
        "import os, sweepd_worker\n\
         open('helper.txt', 'w').write(sweepd_worker.__file__)\n\
         open(os.environ['SWEEPD_RESULT_FILE'], 'w').write('0.5')\n",
    )
    .unwrap();
    let child = Command::new(&bin)
        .args(["run", "-c"])
        .arg(&sweep.config)
        .current_dir(sweep.dir.path())
        .env("SWEEPD_LOG", "info")
        .env_remove("SWEEPD_PYTHON_DIR")
        .env_remove("PYTHONPATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the installed sweepd");
    let run = wait_output(child, Duration::from_secs(60));
    assert!(
        run.status.success(),
        "installed sweepd run failed:\n{}",
        stderr(&run)
    );
    let used = std::fs::read_to_string(sweep.path("helper.txt")).unwrap_or_else(|_| {
        panic!(
            "the worker did not run or could not import sweepd_worker; states {:?}; stderr:\n{}",
            sweep.states(),
            stderr(&run)
        )
    });
    assert_eq!(
        Path::new(&used).canonicalize().unwrap(),
        helper.canonicalize().unwrap(),
        "the installed sweepd gave its workers another sweepd_worker.py"
    );
}

#[test]
fn make_uninstall_removes_what_install_put() {
    let dest = tempfile::tempdir().expect("temp dir");
    let d = dest.path();
    make_with("install", d);
    // A helper imported by a worker run as root leaves bytecode next to it.
    std::fs::create_dir(d.join("usr/share/sweepd/python/__pycache__")).unwrap();
    std::fs::write(
        d.join("usr/share/sweepd/python/__pycache__/sweepd_worker.cpython-311.pyc"),
        "",
    )
    .unwrap();
    make_with("uninstall", d);
    let left: Vec<PathBuf> = walk(d).into_iter().filter(|p| p.is_file()).collect();
    assert!(left.is_empty(), "make uninstall left {left:?}");
    for gone in ["usr/share/sweepd", "usr/share/doc/sweepd"] {
        assert!(!d.join(gone).exists(), "make uninstall left {gone}");
    }
    // The studies' directory is data: kept.
    assert!(d.join("var/lib/sweepd").is_dir());
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn make_tune_runs_the_binary_cargo_built_when_cargo_target_dir_is_set() {
    // A common Rust setup puts every build in one place; `make tune` used to run
    // target/release/sweepd, which then did not exist.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("make")
        .arg("-C")
        .arg(repo())
        .args(["-n", "tune"])
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("MAKELEVEL")
        .env("CARGO_TARGET_DIR", dir.path())
        .output()
        .expect("run make");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let expected = format!(
        "{}/release/sweepd run -c supervisor.toml",
        dir.path().display()
    );
    assert!(text.contains(&expected), "make -n tune says:\n{text}");
}
