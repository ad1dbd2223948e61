//! Group commit: making committed writes durable with one sync shared by every writer waiting.
//!
//! The connection commits with `synchronous = NORMAL`: a commit lands in the write-ahead log
//! without a sync, cheap, and is never torn by a crash (SQLite rolls an unsynced tail back, it
//! does not corrupt). What sweepd reports (a trial started, a trial finished) must survive a
//! power loss too, so before it reports, it waits for [`Syncer::sync`]: an `fdatasync` of the
//! log file, which holds every commit made so far, done off the async runtime and outside the
//! supervisor's lock. Writers that commit while one sync runs share the next one: with several
//! slots finishing trials at once, one sync serves all of them, and the sync of one slot's
//! commit overlaps the next slot's work instead of holding it up. (A checkpoint, which copies
//! the log into the database file, syncs both files itself.)

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::{Mutex, Notify};

/// Shares syncs of one database's write-ahead log among the writers waiting for one.
pub(super) struct Syncer {
    wal: PathBuf,
    state: Mutex<State>,
    /// Woken when a sync ends.
    synced: Notify,
}

#[derive(Default)]
struct State {
    /// Requests made so far: a request's number is taken after its commit.
    requested: u64,
    /// Every request up to this one is durable.
    synced: u64,
    /// A sync is under way.
    running: bool,
    /// The log file, and its inode (SQLite removes the log when the last connection closes;
    /// a new one is another file).
    file: Option<(Arc<File>, u64)>,
}

impl Syncer {
    pub(super) fn new(db: &Path) -> Syncer {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        Syncer {
            wal: PathBuf::from(wal),
            state: Mutex::new(State::default()),
            synced: Notify::new(),
        }
    }

    /// Returns once every write committed before the call is durable.
    pub(super) async fn sync(&self) -> std::io::Result<()> {
        let mine = {
            let mut st = self.state.lock().await;
            st.requested += 1;
            st.requested
        };
        loop {
            let mut st = self.state.lock().await;
            if st.synced >= mine {
                return Ok(());
            }
            if st.running {
                // A sync that started before our commit may not hold it: wait for it to end,
                // then look again (the next one, ours or another waiter's, does).
                let ended = self.synced.notified();
                tokio::pin!(ended);
                ended.as_mut().enable();
                drop(st);
                ended.await;
                continue;
            }
            st.running = true;
            let target = st.requested;
            let file = st.file.clone();
            drop(st);
            let wal = self.wal.clone();
            let done = tokio::task::spawn_blocking(move || sync_log(&wal, file))
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e)));
            let mut st = self.state.lock().await;
            st.running = false;
            let result = match done {
                Ok(file) => {
                    st.file = file;
                    st.synced = st.synced.max(target);
                    Ok(())
                }
                Err(e) => Err(e),
            };
            drop(st);
            self.synced.notify_waiters();
            return result;
        }
    }
}

/// Syncs the log file's data (reopened if it is a new file) and returns the handle to keep.
fn sync_log(
    wal: &Path,
    mut file: Option<(Arc<File>, u64)>,
) -> std::io::Result<Option<(Arc<File>, u64)>> {
    let ino = match std::fs::metadata(wal) {
        Ok(m) => m.ino(),
        // No log: everything committed is in the database file, which checkpoints sync.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if file.as_ref().is_none_or(|(_, known)| *known != ino) {
        let f = File::open(wal)?;
        // The inode of the file opened, not of the name read above: the log can have been
        // removed and made again in between, and a handle kept under the old file's number
        // would be taken for a newer log that reuses that number (the old one, no longer
        // held, frees it), and sync a file no longer in use.
        let opened = f.metadata()?.ino();
        // A new file's name must be durable too: sync the directory holding it.
        if let Some(dir) = wal.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)?.sync_all()?;
        }
        file = Some((Arc::new(f), opened));
    }
    if let Some((f, _)) = &file {
        f.sync_data()?;
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_share_syncs_and_a_missing_log_is_nothing_to_sync() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        let s = Arc::new(Syncer::new(&db));
        s.sync().await.unwrap();
        std::fs::write(dir.path().join("x.db-wal"), b"frames").unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move { s.sync().await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let st = s.state.lock().await;
        assert_eq!(st.synced, st.requested, "every request was served");
        assert!(st.file.is_some());
        assert!(!st.running);
    }

    #[tokio::test]
    async fn a_log_made_again_is_synced_through_a_handle_on_the_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        let wal = dir.path().join("x.db-wal");
        let s = Syncer::new(&db);
        std::fs::write(&wal, b"frames").unwrap();
        s.sync().await.unwrap();
        std::fs::remove_file(&wal).unwrap();
        std::fs::write(&wal, b"new frames").unwrap();
        s.sync().await.unwrap();
        let st = s.state.lock().await;
        let (f, ino) = st.file.as_ref().unwrap();
        let now = std::fs::metadata(&wal).unwrap().ino();
        assert_eq!(
            f.metadata().unwrap().ino(),
            now,
            "the handle is on the new log"
        );
        assert_eq!(*ino, now);
    }
}
