//! Starting a worker process: argv (never through a shell) in a process group of its own, the
//! channel socket as fd 3, the environment sweepd sets and the one it keeps to itself.

use super::CHANNEL_FD;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Stdio;

/// What to start.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub log_path: PathBuf,
    /// The log file rotates (to `.1`) past this size.
    pub log_max_bytes: u64,
    /// All files in the log directory together: the oldest are deleted past this.
    pub log_max_total: u64,
}

/// Starts `spec` with `theirs` as its fd 3.
pub(super) fn start(
    spec: &SpawnSpec,
    theirs: &UnixStream,
) -> std::io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..])
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env("SWEEPD_FD", CHANNEL_FD.to_string())
        // systemd's notify socket is the daemon's, not its workers'.
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let fd = theirs.as_raw_fd();
    // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if fd == CHANNEL_FD {
                // dup2 onto itself would keep close-on-exec set: clear it instead.
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(fd, CHANNEL_FD) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}
