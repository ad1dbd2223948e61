//! Where the files the daemons of one host share live (the GPU ledger, the memory groups' peak
//! logs), and opening them so that no other user can steer what sweepd writes.
//!
//! These files sit in a directory other daemons must find by name, and a name is something
//! another user can get to first: a `/tmp/sweepd-UID` made by someone else, holding
//! `gpu-ledger -> ~/.bashrc`, once had sweepd write its ledger into the victim's file. So:
//! - the directory is picked by [`choose`] (a pure rule: `$SWEEPD_LEDGER`, the operator's
//!   choice, over systemd's `$RUNTIME_DIRECTORY`, `$XDG_RUNTIME_DIR/sweepd`, `/run/sweepd`
//!   where writable, and last a private `sweepd-UID` in the temporary directory);
//! - it is opened without following a link and judged by [`judge_dir`] on what `fstat` says of
//!   the directory opened: owned by this user or root, writable by no other user, and by its
//!   group only where the operator named it (`$SWEEPD_LEDGER`, `RuntimeDirectory=`,
//!   `/run/sweepd`): a group's shared directory for several users of one host. A directory
//!   sweepd creates gets `0700`;
//! - every file in it is opened relative to that directory's descriptor, with `O_NOFOLLOW`,
//!   and judged after opening by [`judge_file`]: a regular file with one link, not writable by
//!   every user, owned by this user (or, in a group's directory, carrying that group).
//!
//! Anything else is refused with a [`RuntimeError`] that names the path, why, and what to do.
//! Nothing here ever removes or rewrites a file it refused.

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode};
use nix::unistd::{fchown, Gid};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Environment variable naming the ledger file, over every default; [`OFF`] runs without one.
pub const LEDGER_ENV: &str = "SWEEPD_LEDGER";

/// `SWEEPD_LEDGER=none`: the operator runs this daemon without a ledger, as if alone on its GPUs.
pub const OFF: &str = "none";

/// The ledger's file name in a runtime directory sweepd picks.
pub const LEDGER_NAME: &str = "gpu-ledger";

/// How the directory was chosen: it decides whether it may be a group's ([`judge_dir`]) and
/// what a refusal suggests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The directory of `$SWEEPD_LEDGER`: the operator named it.
    Named,
    /// systemd's `$RUNTIME_DIRECTORY` (`RuntimeDirectory=` in the unit).
    Systemd,
    /// `$XDG_RUNTIME_DIR/sweepd`: the login session's own.
    Xdg,
    /// `/run/sweepd`, which only root can have made.
    Run,
    /// `sweepd-UID` in the temporary directory: a name anyone could take first.
    Temp,
}

/// Where the ledger is: its directory, its file name there, and how they were chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub dir: PathBuf,
    pub name: OsString,
    pub origin: Origin,
}

impl Place {
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }
}

/// The ledger's place from the environment (`var`), whether `/run/sweepd` is writable, the
/// temporary directory and the user id: `Ok(None)` for `SWEEPD_LEDGER=none`, `Err` for a
/// `SWEEPD_LEDGER` that names no file.
pub fn choose(
    var: impl Fn(&str) -> Option<OsString>,
    run_writable: bool,
    tmp: &Path,
    uid: u32,
) -> Result<Option<Place>, String> {
    let var = |name: &str| var(name).filter(|v| !v.is_empty());
    let place = |dir: PathBuf, origin| Place {
        dir,
        name: LEDGER_NAME.into(),
        origin,
    };
    if let Some(p) = var(LEDGER_ENV) {
        if p == OFF {
            return Ok(None);
        }
        let path = PathBuf::from(&p);
        let Some(name) = path
            .file_name()
            .filter(|_| !p.to_string_lossy().ends_with('/'))
        else {
            return Err(format!(
                "{LEDGER_ENV}={} names no file: give the ledger's file path (e.g. /run/sweepd/gpu-ledger), or `{OFF}` to run without one",
                path.display()
            ));
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        return Ok(Some(Place {
            name: name.to_os_string(),
            dir,
            origin: Origin::Named,
        }));
    }
    if let Some(dir) = var("RUNTIME_DIRECTORY") {
        // systemd may list several directories, separated by ':'.
        let dir = dir.to_string_lossy().into_owned();
        let first = dir.split(':').next().unwrap_or_default();
        if !first.is_empty() {
            return Ok(Some(place(first.into(), Origin::Systemd)));
        }
    }
    if let Some(dir) = var("XDG_RUNTIME_DIR") {
        return Ok(Some(place(Path::new(&dir).join("sweepd"), Origin::Xdg)));
    }
    if run_writable {
        return Ok(Some(place("/run/sweepd".into(), Origin::Run)));
    }
    Ok(Some(place(tmp.join(format!("sweepd-{uid}")), Origin::Temp)))
}

/// The ledger's place on this host, by [`choose`].
pub fn from_env() -> Result<Option<Place>, String> {
    let run = Path::new("/run/sweepd");
    let run_writable = nix::unistd::access(run, nix::unistd::AccessFlags::W_OK).is_ok();
    choose(
        |name| std::env::var_os(name),
        run_writable,
        &std::env::temp_dir(),
        nix::unistd::getuid().as_raw(),
    )
}

/// What `fstat` says of a directory or file, as [`judge_dir`] and [`judge_file`] take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    pub uid: u32,
    pub gid: u32,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    pub nlink: u64,
    pub regular: bool,
}

impl Facts {
    fn of(st: &FileStat) -> Facts {
        Facts {
            uid: st.st_uid,
            gid: st.st_gid,
            mode: st.st_mode & 0o7777,
            nlink: st.st_nlink,
            regular: st.st_mode & libc::S_IFMT == libc::S_IFREG,
        }
    }
}

/// Who may have written the files of a directory sweepd accepted: this user, and with `group`,
/// the members of that group (a group's directory the operator named).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trust {
    pub me: u32,
    pub group: Option<u32>,
}

/// Why a directory or file is refused, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub why: String,
    pub fix: String,
}

fn refuse(why: impl Into<String>, fix: impl Into<String>) -> Verdict {
    Verdict {
        why: why.into(),
        fix: fix.into(),
    }
}

/// Whether the directory `f` describes, chosen by `origin`, may hold files this user's daemons
/// share: owned by this user (`me`) or root, writable by no other user, and by its group only
/// where the operator named it.
pub fn judge_dir(f: &Facts, origin: Origin, me: u32) -> Result<Trust, Verdict> {
    let elsewhere = match origin {
        Origin::Named => format!("or set {LEDGER_ENV} to a file in a directory only you (or root) own"),
        _ => format!(
            "or set {LEDGER_ENV} to a file in a directory only you own (e.g. $XDG_RUNTIME_DIR/sweepd/gpu-ledger)"
        ),
    };
    if f.uid != me && f.uid != 0 {
        let fix = match origin {
            Origin::Temp => format!("another user made it first, so sweepd will not use it: ask root to remove it, {elsewhere}"),
            _ => format!("`chown` it to yourself, {elsewhere}"),
        };
        return Err(refuse(
            format!("is owned by uid {}, not by you (uid {me}) or root: its owner could replace the files in it", f.uid),
            fix,
        ));
    }
    if f.mode & 0o002 != 0 {
        return Err(refuse(
            format!("is writable by every user (mode {:04o}): anyone could put a link or a file of theirs in it", f.mode),
            format!("`chmod o-w` it, {elsewhere}"),
        ));
    }
    let named = matches!(origin, Origin::Named | Origin::Systemd | Origin::Run);
    if f.mode & 0o020 != 0 && !named {
        return Err(refuse(
            format!("is writable by its group (mode {:04o}), and only a directory the operator names ({LEDGER_ENV}, systemd's RuntimeDirectory=) may be a group's", f.mode),
            format!("`chmod g-w` it, {elsewhere}"),
        ));
    }
    Ok(Trust {
        me,
        group: (f.mode & 0o020 != 0).then_some(f.gid),
    })
}

/// Whether the file `f` describes, opened without following a link in a directory of
/// `trust`, is one sweepd may read and write: a regular file with no other name, not writable
/// by every user, and this user's (in a group's directory: that group's).
pub fn judge_file(f: &Facts, trust: Trust) -> Result<(), Verdict> {
    let remove = "remove it (sweepd creates it again)";
    if !f.regular {
        return Err(refuse("is not a regular file", remove));
    }
    if f.nlink > 1 {
        return Err(refuse(
            format!("has {} names (hard links): sweepd would write through it into a file that may be someone else's", f.nlink),
            remove,
        ));
    }
    if f.uid != trust.me && trust.group.is_none_or(|g| g != f.gid) {
        let whose = match trust.group {
            Some(g) => format!(
                "not by you (uid {}) nor of this directory's group {g}",
                trust.me
            ),
            None => format!("not by you (uid {})", trust.me),
        };
        return Err(refuse(
            format!("is owned by uid {}, {whose}", f.uid),
            remove,
        ));
    }
    if f.mode & 0o002 != 0 {
        return Err(refuse(
            format!("is writable by every user (mode {:04o}): anyone may have written it, or still holds it open", f.mode),
            remove,
        ));
    }
    Ok(())
}

/// A runtime file or directory sweepd will not use, or could not open.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{what} {} {}; {} (docs/operations.md, \"Runtime files\")", path.display(), verdict.why, verdict.fix)]
    Refused {
        what: &'static str,
        path: PathBuf,
        verdict: Verdict,
    },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl From<RuntimeError> for std::io::Error {
    fn from(e: RuntimeError) -> std::io::Error {
        std::io::Error::other(e)
    }
}

/// A file of a [`RuntimeDir`] as opened: the file, whether this call created it, and its
/// device and inode (what the name is compared with to tell it was replaced).
pub struct Opened {
    pub file: File,
    pub created: bool,
    pub id: (u64, u64),
}

/// The runtime directory, opened and judged: the files in it are opened relative to it.
#[derive(Debug)]
pub struct RuntimeDir {
    path: PathBuf,
    origin: Origin,
    me: u32,
    /// The directory's descriptor and what it was judged to be; made anew if it is removed.
    open: Mutex<(Arc<OwnedFd>, Trust)>,
}

const WHAT_DIR: &str = "the runtime directory";

impl RuntimeDir {
    /// Opens `path` (created `0700`, with missing parents, if it does not exist), chosen by
    /// `origin`, and judges it ([`judge_dir`]).
    pub fn open(path: &Path, origin: Origin) -> Result<RuntimeDir, RuntimeError> {
        let me = nix::unistd::getuid().as_raw();
        let open = Self::open_fd(path, origin, me)?;
        Ok(RuntimeDir {
            path: path.to_path_buf(),
            origin,
            me,
            open: Mutex::new(open),
        })
    }

    fn open_fd(
        path: &Path,
        origin: Origin,
        me: u32,
    ) -> Result<(Arc<OwnedFd>, Trust), RuntimeError> {
        let io = |source| RuntimeError::Io {
            what: WHAT_DIR,
            path: path.to_path_buf(),
            source,
        };
        let refused = |why: &str, fix: &str| RuntimeError::Refused {
            what: WHAT_DIR,
            path: path.to_path_buf(),
            verdict: refuse(why, fix),
        };
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match nix::fcntl::open(path, flags, Mode::empty()) {
            Err(Errno::ENOENT) => {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(path)
                    .map_err(io)?;
                nix::fcntl::open(path, flags, Mode::empty())
            }
            r => r,
        };
        let fd = match fd {
            Ok(fd) => fd,
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                let link =
                    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
                return Err(if link {
                    refused(
                        "is a symbolic link: sweepd does not follow links to its runtime files",
                        "name the directory itself",
                    )
                } else {
                    refused("is not a directory", "remove it, or name another directory")
                });
            }
            Err(e) => return Err(io(e.into())),
        };
        let facts = Facts::of(&fstat(&fd).map_err(|e| io(e.into()))?);
        let trust = judge_dir(&facts, origin, me).map_err(|verdict| RuntimeError::Refused {
            what: WHAT_DIR,
            path: path.to_path_buf(),
            verdict,
        })?;
        Ok((Arc::new(fd), trust))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn trust(&self) -> Trust {
        self.lock().1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Arc<OwnedFd>, Trust)> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fd(&self) -> Arc<OwnedFd> {
        self.lock().0.clone()
    }

    /// The directory was removed under us: opened (and created) again by its path, judged anew.
    fn reopen(&self) -> Result<(), RuntimeError> {
        let open = Self::open_fd(&self.path, self.origin, self.me)?;
        *self.lock() = open;
        Ok(())
    }

    /// Opens `name` for reading and writing (`append`: every write at the end), creating it if
    /// missing (`0600`; `0660` and the directory's group in a group's directory), and judges
    /// what was opened ([`judge_file`]). `what` names the file in errors.
    pub fn open_file(
        &self,
        name: &OsStr,
        append: bool,
        what: &'static str,
    ) -> Result<Opened, RuntimeError> {
        let path = self.path.join(name);
        let io = |source: std::io::Error| RuntimeError::Io {
            what,
            path: path.clone(),
            source,
        };
        let refused = |verdict| RuntimeError::Refused {
            what,
            path: path.clone(),
            verdict,
        };
        // O_NONBLOCK: a FIFO put in its place must not hang the open (it is refused after).
        let mut flags = OFlag::O_RDWR
            | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC
            | OFlag::O_NOCTTY
            | OFlag::O_NONBLOCK;
        if append {
            flags |= OFlag::O_APPEND;
        }
        for _ in 0..8 {
            let (dir, trust) = self.lock().clone();
            let mode = if trust.group.is_some() { 0o660 } else { 0o600 };
            // An existing file first; else made here, exclusively, so that `created` is true.
            let (fd, created) = match openat(&*dir, name, flags, Mode::empty()) {
                Ok(fd) => (fd, false),
                Err(Errno::ENOENT) => {
                    let create = flags | OFlag::O_CREAT | OFlag::O_EXCL;
                    match openat(&*dir, name, create, Mode::from_bits_truncate(mode)) {
                        Ok(fd) => (fd, true),
                        // Made by another daemon meanwhile.
                        Err(Errno::EEXIST) => continue,
                        // The directory itself is gone.
                        Err(Errno::ENOENT) => {
                            self.reopen()?;
                            continue;
                        }
                        Err(e) => return Err(io(e.into())),
                    }
                }
                Err(Errno::ELOOP) => {
                    return Err(refused(refuse(
                        "is a symbolic link: sweepd does not follow links to its runtime files (another user could point one at a file of yours)",
                        "remove the link (sweepd creates the file)",
                    )))
                }
                Err(e) => return Err(io(e.into())),
            };
            if created {
                if let Some(g) = trust.group {
                    // Readable and writable by the group whatever the umask, and the group's
                    // (a directory without the setgid bit would give it ours).
                    let _ = nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o660));
                    let _ = fchown(&fd, None, Some(Gid::from_raw(g)));
                }
            }
            let st = fstat(&fd).map_err(|e| io(e.into()))?;
            if st.st_nlink == 0 {
                // Removed between the open and now: open what is there now.
                continue;
            }
            judge_file(&Facts::of(&st), trust).map_err(refused)?;
            return Ok(Opened {
                file: File::from(fd),
                created,
                id: (st.st_dev, st.st_ino),
            });
        }
        Err(io(std::io::Error::other(
            "it kept being removed or replaced while sweepd opened it",
        )))
    }

    /// The device and inode `name` names now, without following a link (`None`: nothing).
    pub fn id_of(&self, name: &OsStr) -> std::io::Result<Option<(u64, u64)>> {
        match fstatat(&*self.fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some((st.st_dev, st.st_ino))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    fn at(dir: &str, name: &str, origin: Origin) -> Option<Place> {
        Some(Place {
            dir: dir.into(),
            name: name.into(),
            origin,
        })
    }

    const ALL: &[(&str, &str)] = &[
        (LEDGER_ENV, "/srv/shared/ledger"),
        ("RUNTIME_DIRECTORY", "/run/sweepd:/run/other"),
        ("XDG_RUNTIME_DIR", "/run/user/1000"),
    ];

    #[rstest]
    #[case::the_operators_file_first(ALL, true, at("/srv/shared", "ledger", Origin::Named))]
    #[case::then_systemds_first_directory(&ALL[1..], true, at("/run/sweepd", LEDGER_NAME, Origin::Systemd))]
    #[case::then_the_sessions(&ALL[2..], true, at("/run/user/1000/sweepd", LEDGER_NAME, Origin::Xdg))]
    #[case::an_empty_variable_counts_as_unset(&[(LEDGER_ENV, "")], true, at("/run/sweepd", LEDGER_NAME, Origin::Run))]
    #[case::run_sweepd_only_where_writable(&[], false, at("/tmp/sweepd-7", LEDGER_NAME, Origin::Temp))]
    #[case::none_runs_without_one(&[(LEDGER_ENV, "none"), ("XDG_RUNTIME_DIR", "/run/user/7")], true, None)]
    #[case::a_relative_file_is_in_the_working_directory(&[(LEDGER_ENV, "ledger")], true, at(".", "ledger", Origin::Named))]
    fn the_ledger_is_where_the_environment_says_else_in_a_runtime_directory(
        #[case] vars: &'static [(&'static str, &'static str)],
        #[case] run_writable: bool,
        #[case] expected: Option<Place>,
    ) {
        assert_eq!(
            choose(env(vars), run_writable, Path::new("/tmp"), 7),
            Ok(expected)
        );
    }

    #[rstest]
    #[case("/")]
    #[case("/srv/ledgers/")]
    fn a_ledger_variable_that_names_no_file_is_an_error_naming_it(#[case] value: &'static str) {
        let vars: &'static [(&'static str, &'static str)] =
            Box::leak(Box::new([(LEDGER_ENV, value)]));
        let e = choose(env(vars), true, Path::new("/tmp"), 7).unwrap_err();
        assert!(e.contains(LEDGER_ENV) && e.contains("names no file"), "{e}");
    }

    fn dir(uid: u32, gid: u32, mode: u32) -> Facts {
        Facts {
            uid,
            gid,
            mode,
            nlink: 2,
            regular: false,
        }
    }

    const ME: u32 = 1000;

    #[rstest]
    #[case::ours_private(dir(ME, 100, 0o700), Origin::Temp, Ok(None))]
    #[case::ours_readable(dir(ME, 100, 0o755), Origin::Xdg, Ok(None))]
    #[case::roots(dir(0, 0, 0o755), Origin::Run, Ok(None))]
    #[case::another_users(dir(4242, 4242, 0o700), Origin::Temp, Err("owned by uid 4242"))]
    #[case::another_users_even_if_named(
        dir(4242, 100, 0o755),
        Origin::Named,
        Err("owned by uid 4242")
    )]
    #[case::world_writable(dir(ME, 100, 0o777), Origin::Temp, Err("writable by every user"))]
    #[case::world_writable_and_sticky(
        dir(0, 0, 0o1777),
        Origin::Named,
        Err("writable by every user")
    )]
    #[case::a_groups_the_operator_named(dir(0, 300, 0o2770), Origin::Named, Ok(Some(300)))]
    #[case::a_groups_from_systemd(dir(ME, 300, 0o770), Origin::Systemd, Ok(Some(300)))]
    #[case::a_groups_in_run(dir(0, 300, 0o2770), Origin::Run, Ok(Some(300)))]
    #[case::a_groups_sweepd_picked_itself(
        dir(ME, 300, 0o770),
        Origin::Xdg,
        Err("writable by its group")
    )]
    #[case::a_groups_in_the_temp_dir(
        dir(ME, 300, 0o770),
        Origin::Temp,
        Err("writable by its group")
    )]
    fn a_directory_is_used_only_when_no_other_user_can_put_files_in_it(
        #[case] facts: Facts,
        #[case] origin: Origin,
        #[case] expected: Result<Option<u32>, &str>,
    ) {
        match (judge_dir(&facts, origin, ME), expected) {
            (Ok(t), Ok(group)) => assert_eq!(t, Trust { me: ME, group }),
            (Err(v), Err(why)) => {
                assert!(v.why.contains(why), "{v:?}");
                assert!(!v.fix.is_empty());
            }
            (got, want) => panic!("{got:?}, expected {want:?}"),
        }
    }

    fn file(uid: u32, gid: u32, mode: u32, nlink: u64, regular: bool) -> Facts {
        Facts {
            uid,
            gid,
            mode,
            nlink,
            regular,
        }
    }

    const PRIVATE: Trust = Trust {
        me: ME,
        group: None,
    };
    const GROUP: Trust = Trust {
        me: ME,
        group: Some(300),
    };

    #[rstest]
    #[case::ours(file(ME, 100, 0o600, 1, true), PRIVATE, None)]
    #[case::ours_group_readable(file(ME, 100, 0o640, 1, true), PRIVATE, None)]
    #[case::not_regular(file(ME, 100, 0o600, 1, false), PRIVATE, Some("not a regular file"))]
    #[case::a_second_name(file(ME, 100, 0o600, 2, true), PRIVATE, Some("2 names"))]
    #[case::another_users(file(4242, 100, 0o600, 1, true), PRIVATE, Some("owned by uid 4242"))]
    #[case::world_writable(file(ME, 100, 0o666, 1, true), PRIVATE, Some("writable by every user"))]
    #[case::a_group_members(file(4242, 300, 0o660, 1, true), GROUP, None)]
    #[case::another_groups_in_a_group_dir(
        file(4242, 400, 0o660, 1, true),
        GROUP,
        Some("nor of this directory's group 300")
    )]
    #[case::world_writable_in_a_group_dir(
        file(4242, 300, 0o666, 1, true),
        GROUP,
        Some("writable by every user")
    )]
    fn a_file_is_used_only_when_it_is_ours_alone(
        #[case] facts: Facts,
        #[case] trust: Trust,
        #[case] why: Option<&str>,
    ) {
        match (judge_file(&facts, trust), why) {
            (Ok(()), None) => {}
            (Err(v), Some(why)) => assert!(v.why.contains(why), "{v:?}"),
            (got, want) => panic!("{got:?}, expected {want:?}"),
        }
    }

    fn refused(e: RuntimeError) -> String {
        assert!(matches!(e, RuntimeError::Refused { .. }), "{e}");
        e.to_string()
    }

    #[test]
    fn a_directory_it_creates_is_private_and_files_are_created_for_this_user_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a/b");
        let d = RuntimeDir::open(&path, Origin::Temp).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        let o = d.open_file(OsStr::new("f"), false, "the file").unwrap();
        assert!(o.created);
        let meta = std::fs::metadata(path.join("f")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(o.id, (meta.dev(), meta.ino()));
        assert_eq!(d.id_of(OsStr::new("f")).unwrap(), Some(o.id));
        assert!(
            !d.open_file(OsStr::new("f"), false, "the file")
                .unwrap()
                .created
        );
        assert_eq!(d.id_of(OsStr::new("g")).unwrap(), None);
    }

    #[test]
    fn links_other_users_files_and_fifos_are_refused_and_left_as_they_are() {
        let tmp = tempfile::tempdir().unwrap();
        let d = RuntimeDir::open(tmp.path(), Origin::Named).unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "mine\n").unwrap();
        std::os::unix::fs::symlink(&victim, tmp.path().join("link")).unwrap();
        std::fs::hard_link(&victim, tmp.path().join("hard")).unwrap();
        nix::unistd::mkfifo(&tmp.path().join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        for (name, why) in [
            ("link", "symbolic link"),
            ("hard", "2 names"),
            ("fifo", "not a regular file"),
        ] {
            let e = refused(
                d.open_file(OsStr::new(name), false, "the file")
                    .err()
                    .unwrap(),
            );
            assert!(e.contains(why) && e.contains(name), "{e}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
        std::fs::remove_file(tmp.path().join("hard")).unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = refused(
            d.open_file(OsStr::new("victim"), false, "the file")
                .err()
                .unwrap(),
        );
        assert!(e.contains("writable by every user"), "{e}");
        if nix::unistd::getuid().is_root() {
            std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&victim, Some(4242), None).unwrap();
            let e = refused(
                d.open_file(OsStr::new("victim"), false, "the file")
                    .err()
                    .unwrap(),
            );
            assert!(e.contains("owned by uid 4242"), "{e}");
        }
    }

    #[test]
    fn a_directory_another_user_made_or_a_link_to_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let open = std::fs::create_dir(tmp.path().join("open"));
        open.unwrap();
        std::fs::set_permissions(
            tmp.path().join("open"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        let e = refused(RuntimeDir::open(&tmp.path().join("open"), Origin::Temp).unwrap_err());
        assert!(e.contains("writable by every user"), "{e}");
        std::os::unix::fs::symlink(tmp.path().join("open"), tmp.path().join("link")).unwrap();
        let e = refused(RuntimeDir::open(&tmp.path().join("link"), Origin::Named).unwrap_err());
        assert!(e.contains("symbolic link"), "{e}");
        if nix::unistd::getuid().is_root() {
            std::fs::set_permissions(
                tmp.path().join("open"),
                std::fs::Permissions::from_mode(0o700),
            )
            .unwrap();
            std::os::unix::fs::chown(tmp.path().join("open"), Some(4242), None).unwrap();
            let e = refused(RuntimeDir::open(&tmp.path().join("open"), Origin::Temp).unwrap_err());
            assert!(
                e.contains("owned by uid 4242") && e.contains("ask root to remove it"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_directory_removed_under_it_is_made_again() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("run");
        let d = RuntimeDir::open(&path, Origin::Temp).unwrap();
        d.open_file(OsStr::new("f"), false, "the file").unwrap();
        std::fs::remove_dir_all(&path).unwrap();
        let o = d.open_file(OsStr::new("f"), false, "the file").unwrap();
        assert!(o.created);
        assert!(path.join("f").is_file());
    }
}
