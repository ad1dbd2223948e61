//! Prometheus metrics, off by default (`[metrics] listen`), loopback unless the user says so.
//!
//! The exposition format comes from `prometheus-client`; the HTTP side is a few lines over a
//! tokio listener because it serves one read-only page (`GET /metrics`) and nothing else.
//! Values are pushed here by the supervisor as things happen (failures, trial ends), on each
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
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

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

/// Serves `GET /metrics` until `shutdown`. One short-lived connection per scrape.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    loop {
        let (mut sock, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(_) => continue,
            },
            _ = shutdown.cancelled() => return,
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            // A request head is small; anything slow or large is dropped, not waited for.
            let mut buf = vec![0u8; 4096];
            let mut n = 0;
            let read = tokio::time::timeout(Duration::from_secs(5), async {
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
            let head = String::from_utf8_lossy(&buf[..n]);
            let (status, body, ctype) =
                if head.starts_with("GET /metrics ") || head.starts_with("GET /metrics?") {
                    (
                        "200 OK",
                        metrics.encode(),
                        // prometheus-client writes OpenMetrics 1.0 (`_total` counters, `# EOF`):
                        // the type must say so, or scrapers parse it as the classic format.
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )
                } else {
                    (
                        "404 Not Found",
                        "only /metrics is served\n".to_owned(),
                        "text/plain",
                    )
                };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(response.as_bytes()).await;
            let _ = sock.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
