//! Resources that run short for a while: file descriptors above all.
//!
//! The daemon holds a few descriptors for itself (the database, its runtime, the metrics
//! listener) and a handful per worker (the channel, two pipes, the log); anyone who can open
//! connections to it, or a burst of workers, can use up the rest. So `sweepd run` raises its
//! soft `RLIMIT_NOFILE` to the hard limit when it starts ([`raise_nofile`]), and a start that
//! fails for want of a descriptor, a process or memory is a shortage that passes
//! ([`temporary`]): tried again after [`retry_delay`], never the end of the run. Errors a person
//! must fix (a missing program, a permission, a read-only or full disk) are not temporary.
//! Pure but for [`raise_nofile`].

use std::io;
use std::time::Duration;

/// The first wait after a shortage; each one after doubles it, up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);
/// The longest wait between two tries.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(1);

/// Whether `e` says the system or the process ran short of something that comes back on its
/// own: descriptors (`EMFILE`, `ENFILE`), processes or threads (`EAGAIN` from fork or
/// pthread_create), memory or buffers (`ENOMEM`, `ENOBUFS`), or a signal (`EINTR`).
pub fn temporary(e: &io::Error) -> bool {
    match e.raw_os_error() {
        Some(code) => [
            libc::EMFILE,
            libc::ENFILE,
            libc::EAGAIN,
            libc::ENOMEM,
            libc::ENOBUFS,
            libc::EINTR,
        ]
        .contains(&code),
        None => matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::OutOfMemory
        ),
    }
}

/// How long to wait before try `failures + 1`, after `failures` tries that met a shortage:
/// 100 ms, doubled each time, at most [`MAX_RETRY_DELAY`].
pub fn retry_delay(failures: u32) -> Duration {
    let doubled = 1u32
        .checked_shl(failures.saturating_sub(1))
        .unwrap_or(u32::MAX);
    FIRST_RETRY_DELAY
        .checked_mul(doubled)
        .unwrap_or(MAX_RETRY_DELAY)
        .min(MAX_RETRY_DELAY)
}

/// Raises the soft limit on open files to the hard limit, so that descriptors a neighbour
/// makes the daemon spend (connections to its metrics port) leave room for its workers.
/// Returns the soft limit before and after.
pub fn raise_nofile() -> io::Result<(u64, u64)> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok((soft, soft.max(hard)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn os(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    #[rstest]
    #[case::too_many_open_files(os(libc::EMFILE), true)]
    #[case::file_table_full(os(libc::ENFILE), true)]
    #[case::fork_at_the_process_limit(os(libc::EAGAIN), true)]
    #[case::out_of_memory(os(libc::ENOMEM), true)]
    #[case::no_buffer_space(os(libc::ENOBUFS), true)]
    #[case::interrupted(os(libc::EINTR), true)]
    #[case::out_of_memory_without_a_code(io::ErrorKind::OutOfMemory.into(), true)]
    #[case::no_such_program(os(libc::ENOENT), false)]
    #[case::not_executable(os(libc::EACCES), false)]
    #[case::not_a_program(os(libc::ENOEXEC), false)]
    #[case::argv_too_long(os(libc::E2BIG), false)]
    #[case::read_only_log_dir(os(libc::EROFS), false)]
    #[case::disk_full(os(libc::ENOSPC), false)]
    #[case::quota(os(libc::EDQUOT), false)]
    #[case::an_empty_command(
        io::Error::new(io::ErrorKind::InvalidInput, "an empty command"),
        false
    )]
    fn a_shortage_passes_what_a_person_must_fix_does_not(
        #[case] e: io::Error,
        #[case] passes: bool,
    ) {
        assert_eq!(temporary(&e), passes, "{e}");
    }

    #[rstest]
    #[case(0, 100)]
    #[case(1, 100)]
    #[case(2, 200)]
    #[case(3, 400)]
    #[case(4, 800)]
    #[case(5, 1000)]
    #[case(40, 1000)]
    #[case(u32::MAX, 1000)]
    fn retries_back_off_to_a_ceiling(#[case] failures: u32, #[case] ms: u64) {
        assert_eq!(retry_delay(failures), Duration::from_millis(ms));
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let (before, after) = raise_nofile().unwrap();
        let (soft, hard) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        assert!(after >= before);
        assert_eq!((soft, after), (hard, hard));
    }
}
