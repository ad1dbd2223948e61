//! Starting a worker process: argv (never through a shell) in a process group of its own, the
//! channel socket as fd 3, the environment sweepd sets and the one it keeps to itself.

use super::CHANNEL_FD;
use command_fds::{CommandFdExt, FdMapping};
use process_wrap::tokio::{ProcessGroup, TokioChildWrapper, TokioCommandWrap};
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

/// The started process, as process-wrap holds it: signals and waits through it concern the group.
pub(super) type Child = Box<dyn TokioChildWrapper>;

/// Starts `spec` in a new process group whose leader it is, with `theirs` as its fd 3.
///
/// `theirs` is consumed: the only copy left open is the child's, so the channel reaches end of
/// file when the worker (and whatever inherited it) is gone.
pub(super) fn start(spec: &SpawnSpec, theirs: UnixStream) -> std::io::Result<Child> {
    let Some((program, args)) = spec.argv.split_first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "an empty command",
        ));
    };
    let mut cmd = TokioCommandWrap::with_new(program, |cmd| {
        cmd.args(args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env("SWEEPD_FD", CHANNEL_FD.to_string())
            // systemd's notify socket is the daemon's, not its workers'.
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .current_dir(&spec.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    });
    cmd.command_mut()
        .fd_mappings(vec![FdMapping {
            parent_fd: theirs.into(),
            child_fd: CHANNEL_FD,
        }])
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // setpgid(0, 0) in the child, and a child whose signals and waits address the group.
    cmd.wrap(ProcessGroup::leader());
    let child = cmd.spawn();
    // The command keeps the fd mapping, hence our copy of `theirs`, until it is dropped.
    drop(cmd);
    child
}
