//! Prometheus metrics, off by default (`[metrics] listen`), loopback unless the user says so.
//!
//! The exposition format comes from `prometheus-client`; the HTTP side is a few lines over a
//! tokio listener because it serves one read-only page (`GET /metrics`) and nothing else.
//! Whoever can reach the port must not be able to stop the daemon through it: connections are
//! served a few at a time (the rest wait in the kernel's queue, costing no descriptor), each
//! within a time limit, and a failed accept (no descriptor left) is waited out, not fatal.
//! Values are pushed here by the supervisor as things happen (failures, trial ends; the
//! notifier counts its own runs, `notify`), on each
//! housekeeping tick (running trials, GPU readings) or every tenth tick (counts by state, a
//! query over the study), so a scrape never touches the database.
//!
//! Every family carries the daemon's `host` label (the host's name in the study, see
//! `supervisor::host_id`): the daemons of several hosts running one study on PostgreSQL report
//! the same families, and one Prometheus scraping them all must tell them apart (the scrape's
//! `instance` names an address, which says nothing when two "hosts" share a machine).

use crate::store::GpuRow;
use crate::study::Counts;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabel {
    gpu: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabel {
    event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectiveLabel {
    objective: String,
    name: String,
}

/// Every metric sweepd exports.
pub struct Metrics {
    registry: Registry,
    trials: Family<StateLabel, Gauge>,
    running: Family<GpuLabel, Gauge>,
    par: Family<GpuLabel, Gauge>,
    gpu_free: Family<GpuLabel, Gauge>,
    gpu_used: Family<GpuLabel, Gauge>,
    duration: Histogram,
    peak: Histogram,
    failures: Family<KindLabel, Counter>,
    restarts: Counter,
    best: Family<ObjectiveLabel, Gauge<f64, AtomicU64>>,
    front: Gauge,
    database_up: Gauge,
    notifications_sent: Family<EventLabel, Counter>,
    notifications_failed: Family<EventLabel, Counter>,
    notifications_dropped: Counter,
    paused: Gauge,
    killed_by_hand: Counter,
}

impl Metrics {
    /// The metrics of the daemon of `host`.
    pub fn new(host: &str) -> Metrics {
        let mut registry = Registry::with_prefix_and_labels(
            "sweepd",
            [("host".into(), host.to_owned().into())].into_iter(),
        );
        let m = Metrics {
            trials: Family::default(),
            running: Family::default(),
            par: Family::default(),
            gpu_free: Family::default(),
            gpu_used: Family::default(),
            // 0.1 s .. ~1.8 days
            duration: Histogram::new(exponential_buckets(0.1, 4.0, 13)),
            // 64 MiB .. 256 GiB
            peak: Histogram::new(exponential_buckets(
                64.0 * crate::units::MIB as f64,
                2.0,
                13,
            )),
            failures: Family::default(),
            restarts: Counter::default(),
            best: Family::default(),
            front: Gauge::default(),
            database_up: Gauge::default(),
            notifications_sent: Family::default(),
            notifications_failed: Family::default(),
            notifications_dropped: Counter::default(),
            paused: Gauge::default(),
            killed_by_hand: Counter::default(),
            registry: Registry::default(),
        };
        m.database_up.set(1);
        registry.register("trials", "Trials of the study by state", m.trials.clone());
        registry.register(
            "running_trials",
            "Trials running now, by GPU (cpu when CPU-only)",
            m.running.clone(),
        );
        registry.register(
            "par",
            "Trials of the expected size each GPU could hold now",
            m.par.clone(),
        );
        registry.register(
            "gpu_memory_free_bytes",
            "Free GPU memory as NVML last read it",
            m.gpu_free.clone(),
        );
        registry.register(
            "gpu_memory_used_bytes",
            "Used GPU memory as NVML last read it",
            m.gpu_used.clone(),
        );
        registry.register(
            "trial_duration_seconds",
            "Duration of finished trials",
            m.duration.clone(),
        );
        registry.register(
            "trial_peak_memory_bytes",
            "Measured GPU memory peak of finished trials",
            m.peak.clone(),
        );
        registry.register(
            "trial_failures",
            "Failed trial attempts by kind",
            m.failures.clone(),
        );
        registry.register(
            "worker_restarts",
            "Worker processes retired and replaced",
            m.restarts.clone(),
        );
        registry.register(
            "best_value",
            "Best value of each objective so far (of the Pareto front, with several objectives)",
            m.best.clone(),
        );
        registry.register(
            "pareto_front_trials",
            "Trials on the Pareto front (studies with several objectives)",
            m.front.clone(),
        );
        registry.register(
            "database_up",
            "1 while the study's database answers, 0 while it cannot be reached",
            m.database_up.clone(),
        );
        registry.register(
            "notifications_sent",
            "Runs of the [notify] command that succeeded, by event",
            m.notifications_sent.clone(),
        );
        registry.register(
            "notifications_failed",
            "Runs of the [notify] command that failed (exit status, timeout, no program), by event",
            m.notifications_failed.clone(),
        );
        registry.register(
            "notifications_dropped",
            "Events dropped unsent because the notification queue was full",
            m.notifications_dropped.clone(),
        );
        registry.register(
            "paused",
            "1 while the study is paused by `sweepd pause`, else 0",
            m.paused.clone(),
        );
        registry.register(
            "trials_killed_by_hand",
            "Running trials of this daemon ended by `sweepd kill`, their workers stopped",
            m.killed_by_hand.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Each objective's (name, best value so far); one without a value yet is not exported.
    /// `front`: the Pareto front's size, for a study with several objectives.
    pub fn set_best(&self, best: &[(String, Option<f64>)], front: Option<usize>) {
        for (i, (name, b)) in best.iter().enumerate() {
            if let Some(b) = b {
                let label = ObjectiveLabel {
                    objective: i.to_string(),
                    name: name.clone(),
                };
                self.best.get_or_create(&label).set(*b);
            }
        }
        if let Some(n) = front {
            self.front.set(n as i64);
        }
    }

    pub fn set_counts(&self, c: &Counts) {
        for (state, n) in [
            ("RUNNING", c.running),
            ("WAITING", c.waiting),
            ("COMPLETE", c.complete),
            ("PRUNED", c.pruned),
            ("FAIL", c.fail),
        ] {
            self.trials
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(n as i64);
        }
    }

    pub fn set_running(&self, gpu: Option<u32>, n: usize) {
        self.running.get_or_create(&gpu_label(gpu)).set(n as i64);
    }

    pub fn set_gpus(&self, rows: &[GpuRow]) {
        for r in rows {
            let l = gpu_label(Some(r.device));
            self.running.get_or_create(&l).set(r.running as i64);
            self.par
                .get_or_create(&l)
                .set(r.par_estimate.unwrap_or(0) as i64);
            self.gpu_free
                .get_or_create(&l)
                .set(r.free.unwrap_or(0) as i64);
            self.gpu_used
                .get_or_create(&l)
                .set(r.used.unwrap_or(0) as i64);
        }
    }

    pub fn trial_ended(&self, duration: Duration, peak: Option<u64>, failure: Option<&str>) {
        self.duration.observe(duration.as_secs_f64());
        if let Some(p) = peak {
            self.peak.observe(p as f64);
        }
        if let Some(kind) = failure {
            self.failures
                .get_or_create(&KindLabel { kind: kind.into() })
                .inc();
        }
    }

    pub fn worker_restarted(&self) {
        self.restarts.inc();
    }

    /// A run of the `[notify]` command for `event` ended: sent, or failed.
    pub fn notification(&self, event: &str, sent: bool) {
        let family = if sent {
            &self.notifications_sent
        } else {
            &self.notifications_failed
        };
        family
            .get_or_create(&EventLabel {
                event: event.into(),
            })
            .inc();
    }

    /// An event was dropped from the full notification queue.
    pub fn notification_dropped(&self) {
        self.notifications_dropped.inc();
    }

    pub fn set_paused(&self, paused: bool) {
        self.paused.set(i64::from(paused));
    }

    pub fn killed_by_hand(&self) {
        self.killed_by_hand.inc();
    }

    pub fn set_database_up(&self, up: bool) {
        self.database_up.set(i64::from(up));
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

fn gpu_label(gpu: Option<u32>) -> GpuLabel {
    GpuLabel {
        gpu: gpu.map_or("cpu".into(), |g| g.to_string()),
    }
}

/// What one listener allows its clients.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Connections served at once.
    connections: usize,
    /// How long a client may take to send its request head.
    request: Duration,
    /// How long it may take to read the answer.
    response: Duration,
}

/// A scrape or two and a person's `curl` at once. Past the cap, connections wait in the
/// kernel's listen queue, where they cost the daemon no descriptor, and are accepted as earlier
/// ones end (accepting them only to close them would spend a descriptor on each all the same).
/// A connection that sends nothing, or reads nothing, holds its place 5 s at most.
const LIMITS: Limits = Limits {
    connections: 8,
    request: Duration::from_secs(5),
    response: Duration::from_secs(5),
};
/// The wait after an accept that failed for the connection's own reasons (aborted by the
/// client before it was taken): short, but never a loop that spins.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// Serves `GET /metrics` until `shutdown`. One short-lived connection per scrape, at most 8 at
/// once, each given 5 s to ask and 5 s to take the answer. An accept that fails (no descriptor
/// to spare) never ends the listener: it waits a while and goes on, said once per burst.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    serve_within(listener, metrics, shutdown, LIMITS).await
}

async fn serve_within(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    limits: Limits,
) {
    let slots = Arc::new(Semaphore::new(limits.connections));
    // The accepts that failed in a row, and when the first of them did.
    let mut failing: Option<(u32, Instant)> = None;
    loop {
        // A free slot first: until one is, connections wait in the kernel's queue.
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.expect("the semaphore is never closed"),
            _ = shutdown.cancelled() => return,
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => return,
        };
        match accepted {
            Ok((sock, _)) => {
                if let Some((n, since)) = failing.take() {
                    info!(
                        failed = n,
                        "metrics: accepting connections again after {:.1}s",
                        since.elapsed().as_secs_f64()
                    );
                }
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    answer(sock, &metrics, limits).await;
                    drop(slot);
                });
            }
            Err(e) => {
                let (n, _) = failing.get_or_insert((0, Instant::now()));
                *n = n.saturating_add(1);
                if *n == 1 {
                    warn!("metrics: cannot accept a connection ({e}); trying again, the study goes on");
                }
                let pause = accept_pause(&e, *n);
                drop(slot);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
}

/// How long the listener waits after its `failures`-th failed accept in a row with `e`: a
/// shortage (no descriptor: `EMFILE`, `ENFILE`) backs off as a worker start does, since the
/// next accept fails too until something is closed; another error concerns that connection
/// alone.
fn accept_pause(e: &std::io::Error, failures: u32) -> Duration {
    if crate::shortage::temporary(e) {
        crate::shortage::retry_delay(failures)
    } else {
        ACCEPT_RETRY
    }
}

/// One connection: the request head read and the answer written within `limits`; anything
/// slow, large or broken is dropped, not waited for.
async fn answer(mut sock: tokio::net::TcpStream, metrics: &Metrics, limits: Limits) {
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    let read = tokio::time::timeout(limits.request, async {
        while n < buf.len() {
            let k = sock.read(&mut buf[n..]).await.ok()?;
            if k == 0 {
                break;
            }
            n += k;
            if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        Some(())
    })
    .await;
    if !matches!(read, Ok(Some(()))) {
        return;
    }
    let response = respond(&String::from_utf8_lossy(&buf[..n]), metrics);
    let _ = tokio::time::timeout(limits.response, async {
        sock.write_all(response.as_bytes()).await?;
        sock.shutdown().await
    })
    .await;
}

/// The whole HTTP response to a request head.
fn respond(head: &str, metrics: &Metrics) -> String {
    let (status, body, ctype) =
        if head.starts_with("GET /metrics ") || head.starts_with("GET /metrics?") {
            (
                "200 OK",
                metrics.encode(),
                // prometheus-client writes OpenMetrics 1.0 (`_total` counters, `# EOF`): the type
                // must say so, or scrapers parse it as the classic format.
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
        } else {
            (
                "404 Not Found",
                "only /metrics is served\n".to_owned(),
                "text/plain",
            )
        };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use tokio::net::TcpStream;

    fn os(code: i32) -> std::io::Error {
        std::io::Error::from_raw_os_error(code)
    }

    #[rstest]
    #[case::no_descriptor_left(os(libc::EMFILE), 1, 100)]
    #[case::still_none_left(os(libc::EMFILE), 3, 400)]
    #[case::the_systems_table_full(os(libc::ENFILE), 50, 1000)]
    #[case::no_memory_for_the_socket(os(libc::ENOBUFS), 2, 200)]
    #[case::aborted_by_the_client(os(libc::ECONNABORTED), 1, 10)]
    #[case::aborted_again(os(libc::ECONNABORTED), 50, 10)]
    #[case::refused_by_a_firewall_rule(os(libc::EPERM), 1, 10)]
    fn a_failed_accept_backs_off_on_a_shortage_and_never_spins(
        #[case] e: std::io::Error,
        #[case] failures: u32,
        #[case] ms: u64,
    ) {
        assert_eq!(accept_pause(&e, failures), Duration::from_millis(ms));
    }

    /// The listener on loopback within `limits`, served until the returned token is cancelled.
    async fn listening(limits: Limits) -> (std::net::SocketAddr, CancellationToken) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let metrics = Arc::new(Metrics::new("h"));
        tokio::spawn(serve_within(listener, metrics, stop.clone(), limits));
        (addr, stop)
    }

    /// Sends a scrape on `sock` and reads the answer to its end.
    async fn scrape(mut sock: TcpStream) -> String {
        sock.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        sock.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn connections_past_the_cap_wait_until_one_ends_and_are_then_served() {
        let (addr, stop) = listening(LIMITS).await;
        let mut idle = Vec::new();
        for _ in 0..LIMITS.connections {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Connected (the kernel's queue took it), not accepted: no answer while the cap is held.
        let waiting = tokio::spawn(scrape(TcpStream::connect(addr).await.unwrap()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "served past the cap");
        // One idle connection ends: the waiting one takes its place.
        drop(idle.pop());
        let answer = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("served once a connection ended")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        stop.cancel();
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_after_the_request_timeout() {
        let limits = Limits {
            connections: 2,
            request: Duration::from_millis(200),
            ..LIMITS
        };
        let (addr, stop) = listening(limits).await;
        let mut silent = [
            TcpStream::connect(addr).await.unwrap(),
            TcpStream::connect(addr).await.unwrap(),
        ];
        let started = std::time::Instant::now();
        for s in &mut silent {
            let mut buf = [0u8; 16];
            // End of file: the daemon closed it, without an answer.
            let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
                .await
                .expect("closed by the daemon")
                .unwrap();
            assert_eq!(n, 0);
        }
        assert!(started.elapsed() >= limits.request);
        // The slots they held are free: each serves a scrape again.
        for _ in 0..limits.connections {
            let answer = scrape(TcpStream::connect(addr).await.unwrap()).await;
            assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        }
        stop.cancel();
    }

    #[test]
    fn only_metrics_is_served() {
        let m = Metrics::new("h");
        assert!(respond("GET /metrics HTTP/1.1\r\n", &m).starts_with("HTTP/1.1 200 OK"));
        assert!(respond("GET /metrics?x=1 HTTP/1.1\r\n", &m).starts_with("HTTP/1.1 200 OK"));
        for head in ["GET / HTTP/1.1\r\n", "POST /metrics HTTP/1.1\r\n", ""] {
            assert!(respond(head, &m).starts_with("HTTP/1.1 404"), "{head:?}");
        }
    }

    #[test]
    fn each_objective_has_its_best_and_a_front_its_size() {
        let m = Metrics::new("h");
        let best = [
            ("loss".to_owned(), Some(0.25)),
            ("latency_ms".to_owned(), Some(12.0)),
            ("unset".to_owned(), None),
        ];
        m.set_best(&best, Some(7));
        let text = m.encode();
        assert!(
            text.contains(r#"best_value{host="h",objective="0",name="loss"} 0.25"#),
            "{text}"
        );
        assert!(
            text.contains(r#"best_value{host="h",objective="1",name="latency_ms"} 12.0"#),
            "{text}"
        );
        assert!(!text.contains("unset"), "{text}");
        assert!(
            text.contains(r#"sweepd_pareto_front_trials{host="h"} 7"#),
            "{text}"
        );
    }

    #[test]
    fn notifications_are_counted_by_event_sent_failed_and_dropped() {
        let m = Metrics::new("h");
        m.notification("finished", true);
        m.notification("fatal", false);
        m.notification("fatal", false);
        m.notification_dropped();
        let text = m.encode();
        for line in [
            r#"sweepd_notifications_sent_total{host="h",event="finished"} 1"#,
            r#"sweepd_notifications_failed_total{host="h",event="fatal"} 2"#,
            r#"sweepd_notifications_dropped_total{host="h"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
