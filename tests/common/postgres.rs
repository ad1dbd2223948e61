//! PostgreSQL for the tests: a throwaway cluster per test (`PgServer`), queries on it, and a
//! proxy in front of it for the faults the server cannot make itself (`PgProxy`).

use super::{block_on, tool};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Where Debian's `postgresql` package puts the server programs (`initdb`, `pg_ctl` and
/// `postgres` are not on PATH there), newest version first; PATH as a fallback.
pub fn pg_bin(name: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs.reverse();
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| tool(name))
}

/// A PostgreSQL cluster of its own (`initdb` in a temp dir, `pg_ctl` on a loopback port),
/// stopped and deleted when dropped. PostgreSQL refuses to run as root: as root (CI) the
/// cluster belongs to `nobody` and its programs run through `runuser`.
pub struct PgServer {
    pub dir: tempfile::TempDir,
    pub port: u16,
    as_user: Option<&'static str>,
}

impl PgServer {
    pub fn start() -> PgServer {
        let dir = tempfile::Builder::new()
            .prefix("sweepd-pg-")
            .tempdir()
            .expect("temp dir");
        let root = nix::unistd::geteuid().is_root();
        let as_user = root.then_some("nobody");
        if let Some(user) = as_user {
            let u = nix::unistd::User::from_name(user)
                .unwrap()
                .expect("user nobody");
            nix::unistd::chown(dir.path(), Some(u.uid), Some(u.gid)).unwrap();
        }
        let mut server = PgServer {
            dir,
            port: free_port(),
            as_user,
        };
        server.pg(
            "initdb",
            &[
                "-D",
                &server.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
        );
        // Small and quick: no fsync (a test's cluster does not outlive a crash), few workers.
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 100\n\
             shared_buffers = 32MB\n",
            server.dir.path().display()
        );
        let path = std::path::Path::new(&server.data()).join("postgresql.conf");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&conf);
        // The port was free when asked for, but initdb takes seconds, and meanwhile another
        // test's server or any client socket may take it. A start that fails (once in a full
        // suite, its cause not kept) is tried again on another port (the last `port` line of
        // the file counts), and the last failure shows the server's log.
        for attempt in 1.. {
            text.push_str(&format!("port = {}\n", server.port));
            std::fs::write(&path, &text).unwrap();
            match server.try_ctl_start() {
                Ok(()) => break,
                Err(e) if attempt < 3 => {
                    eprintln!("PostgreSQL did not start, trying another port: {e}");
                    let _ =
                        server.try_pg("pg_ctl", &["-D", &server.data(), "-m", "immediate", "stop"]);
                    server.port = free_port();
                }
                Err(e) => panic!("{e}"),
            }
        }
        server
    }

    fn data(&self) -> String {
        self.dir.path().join("data").to_string_lossy().into_owned()
    }

    /// Runs a server program as the cluster's owner; panics with its output when it fails.
    fn pg(&self, program: &str, args: &[&str]) {
        if let Err(e) = self.try_pg(program, args) {
            panic!("{e}");
        }
    }

    /// Runs a server program as the cluster's owner; its output when it fails.
    fn try_pg(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let bin = pg_bin(program);
        let mut cmd = match self.as_user {
            Some(user) => {
                let mut c = Command::new(tool("runuser"));
                c.args(["-u", user, "--"]).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        let out = cmd
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    fn ctl_start(&self) {
        if let Err(e) = self.try_ctl_start() {
            panic!("{e}");
        }
    }

    /// `pg_ctl start`; when it fails, its output and the server's log.
    fn try_ctl_start(&self) -> Result<(), String> {
        let log = self.dir.path().join("server.log");
        self.try_pg(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "120",
                "start",
            ],
        )
        .map_err(|e| format!("{e}\nserver log:\n{}", self.log()))
    }

    /// Stops the server (`fast`: every session ended, what was committed kept).
    pub fn stop(&self) {
        self.pg("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }

    /// Starts it again after [`PgServer::stop`].
    pub fn restart(&self) {
        self.ctl_start();
    }

    /// The URL of database `db` as user `postgres`.
    pub fn url(&self, db: &str) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates database `db` and returns its URL.
    pub fn create_db(&self, db: &str) -> String {
        pg_exec(&self.url("postgres"), &format!("CREATE DATABASE \"{db}\""));
        self.url(db)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let mut cmd = match self.as_user {
            Some(user) => {
                let mut c = Command::new(tool("runuser"));
                c.args(["-u", user, "--"]).arg(pg_bin("pg_ctl"));
                c
            }
            None => Command::new(pg_bin("pg_ctl")),
        };
        let _ = cmd
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// Runs SQL statements on a PostgreSQL database (no result).
pub fn pg_exec(url: &str, sql: &str) {
    use sqlx::Connection;
    block_on(async {
        let mut conn = sqlx::PgConnection::connect(url)
            .await
            .unwrap_or_else(|e| panic!("connect {url}: {e}"));
        sqlx::raw_sql(sql)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    })
}

/// [`pg_column`], or `None` while the query fails (the daemons still creating the tables).
pub fn pg_try_column(url: &str, sql: &str) -> Option<Vec<String>> {
    pg_query(url, sql).ok()
}

/// A query's first column as text, on a PostgreSQL database.
pub fn pg_column(url: &str, sql: &str) -> Vec<String> {
    pg_query(url, sql).unwrap_or_else(|e| panic!("query {sql:?}: {e}"))
}

fn pg_query(url: &str, sql: &str) -> Result<Vec<String>, String> {
    use sqlx::{Connection, Row};
    block_on(async {
        let mut conn = sqlx::PgConnection::connect(url)
            .await
            .map_err(|e| format!("connect {url}: {e}"))?;
        let rows = sqlx::query(sql)
            .fetch_all(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        let _ = conn.close().await;
        Ok(rows
            .iter()
            .map(|r| {
                r.try_get::<String, _>(0)
                    .or_else(|_| r.try_get::<i64, _>(0).map(|v| v.to_string()))
                    .or_else(|_| r.try_get::<i32, _>(0).map(|v| v.to_string()))
                    .or_else(|_| r.try_get::<f64, _>(0).map(|v| v.to_string()))
                    .or_else(|_| r.try_get::<bool, _>(0).map(|v| v.to_string()))
                    .unwrap_or_default()
            })
            .collect())
    })
}

// ---------------------------------------------------------------------------------------------
// A TCP proxy in front of the PostgreSQL server, for the faults the server cannot make itself.

/// A proxy between daemons and a [`PgServer`] (daemons connect to its port instead): real
/// sockets and the real server, with two faults a test can switch on. **A lost commit
/// acknowledgement:** every `n`th commit (a `COMMIT`, or a call of `sweepd_step`, which
/// commits as a statement of its own) reaches the server, which commits, and then both
/// sockets are closed before the client hears the answer (it cannot know whether its
/// transaction took effect). **A network cut:** nothing passes either way until it is mended
/// (then what was held is delivered, as TCP retransmits after a link comes back); new
/// connections wait too.
pub struct PgProxy {
    pub port: u16,
    shared: std::sync::Arc<ProxyShared>,
}

#[derive(Default)]
struct ProxyShared {
    lose_every: std::sync::atomic::AtomicU64,
    commits: std::sync::atomic::AtomicU64,
    lost: std::sync::atomic::AtomicU64,
    cut: std::sync::atomic::AtomicBool,
    stop: std::sync::atomic::AtomicBool,
}

impl PgProxy {
    /// A proxy to the server on `127.0.0.1:target`.
    pub fn start(target: u16) -> PgProxy {
        use std::sync::atomic::Ordering::SeqCst;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = std::sync::Arc::new(ProxyShared::default());
        let sh = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if sh.stop.load(SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let sh = sh.clone();
                std::thread::spawn(move || {
                    sh.hold_while_cut();
                    let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let lose_reply = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(NONE));
                    let (c2, s2, sh2, lose2) = (
                        client.try_clone().unwrap(),
                        server.try_clone().unwrap(),
                        sh.clone(),
                        lose_reply.clone(),
                    );
                    std::thread::spawn(move || sh2.server_to_client(s2, c2, &lose2));
                    sh.client_to_server(client, server, &lose_reply);
                });
            }
        });
        PgProxy { port, shared }
    }

    /// The URL of database `db` through the proxy.
    pub fn url(&self, db: &str) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Loses the acknowledgement of every `n`th commit from now on (0: none).
    pub fn lose_commit_acks(&self, n: u64) {
        self.shared
            .lose_every
            .store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many acknowledgements were lost so far.
    pub fn lost(&self) -> u64 {
        self.shared.lost.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Cuts the link (`true`) or mends it (`false`).
    pub fn cut(&self, cut: bool) {
        self.shared
            .cut
            .store(cut, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for PgProxy {
    fn drop(&mut self) {
        self.shared
            .stop
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.cut(false);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// What a connection's next answer is to lose: nothing, a `COMMIT`'s, a `sweepd_step` call's.
const NONE: u8 = 0;
const COMMIT: u8 = 1;
const STEP: u8 = 2;

impl ProxyShared {
    fn hold_while_cut(&self) {
        while self.cut.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Forwards the client's messages one by one (the protocol's framing: the untyped startup
    /// messages, then a type byte and a length), marking the connection when a commit is to
    /// lose its answer.
    fn client_to_server(
        &self,
        mut client: std::net::TcpStream,
        mut server: std::net::TcpStream,
        lose_reply: &std::sync::atomic::AtomicU8,
    ) {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering::SeqCst;
        let mut started = false;
        // The connection's prepared statements that call sweepd_step, by name: a `Bind` names
        // its statement, only the `Parse` that prepared it has the text.
        let mut steps: std::collections::HashSet<Vec<u8>> = Default::default();
        let cstr = |b: &[u8]| -> Vec<u8> { b.iter().take_while(|c| **c != 0).copied().collect() };
        loop {
            let mut msg = Vec::new();
            if started {
                let mut head = [0u8; 5];
                if client.read_exact(&mut head).is_err() {
                    break;
                }
                let len = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
                msg.extend_from_slice(&head);
                msg.resize(1 + len, 0);
                if client.read_exact(&mut msg[5..]).is_err() {
                    break;
                }
                let commit = match msg[0] {
                    b'Q' if msg[5..].to_ascii_uppercase().starts_with(b"COMMIT") => COMMIT,
                    b'P' => {
                        let name = cstr(&msg[5..]);
                        let query = cstr(&msg[5 + name.len() + 1..]);
                        if query.windows(12).any(|w| w == b"sweepd_step(") {
                            steps.insert(name);
                        }
                        NONE
                    }
                    b'B' => {
                        let portal = cstr(&msg[5..]);
                        let statement = cstr(&msg[5 + portal.len() + 1..]);
                        if steps.contains(&statement) {
                            STEP
                        } else {
                            NONE
                        }
                    }
                    _ => NONE,
                };
                if commit != NONE {
                    let n = self.commits.fetch_add(1, SeqCst) + 1;
                    let every = self.lose_every.load(SeqCst);
                    if every > 0 && n % every == 0 {
                        lose_reply.store(commit, SeqCst);
                    }
                }
            } else {
                let mut len = [0u8; 4];
                if client.read_exact(&mut len).is_err() {
                    break;
                }
                let n = u32::from_be_bytes(len) as usize;
                msg.extend_from_slice(&len);
                msg.resize(n, 0);
                if client.read_exact(&mut msg[4..]).is_err() {
                    break;
                }
                let code = u32::from_be_bytes(msg[4..8].try_into().unwrap());
                // SSLRequest and GSSENCRequest are answered by one byte, then the startup
                // message follows; anything else was the startup message.
                started = !matches!(code, 80877103 | 80877104);
            }
            self.hold_while_cut();
            if server.write_all(&msg).is_err() {
                break;
            }
        }
        let _ = server.shutdown(std::net::Shutdown::Both);
        let _ = client.shutdown(std::net::Shutdown::Both);
    }

    /// Forwards the server's bytes, except the answer to a commit marked to be lost: once
    /// the server says it committed, both sockets are closed instead.
    fn server_to_client(
        &self,
        mut server: std::net::TcpStream,
        mut client: std::net::TcpStream,
        lose_reply: &std::sync::atomic::AtomicU8,
    ) {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering::SeqCst;
        let mut buf = vec![0u8; 65536];
        loop {
            let n = match server.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            self.hold_while_cut();
            // A COMMIT's CommandComplete carries the tag "COMMIT\0"; a statement of its own
            // has committed when the server is ready for the next, out of any transaction
            // (ReadyForQuery, status 'I').
            let answered = match lose_reply.load(SeqCst) {
                COMMIT => buf[..n].windows(7).any(|w| w == b"COMMIT\0"),
                STEP => buf[..n].windows(6).any(|w| w == b"Z\0\0\0\x05I"),
                _ => false,
            };
            if answered {
                self.lost.fetch_add(1, SeqCst);
                break;
            }
            if client.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = client.shutdown(std::net::Shutdown::Both);
        let _ = server.shutdown(std::net::Shutdown::Both);
    }
}
