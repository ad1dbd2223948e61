//! GPU readings and trial memory samples the daemon records for `status`, `gpus` and later
//! analysis.

use super::columns::NullableInt;
use super::engine::{sql, Stamp};
use super::outage::retrying;
use super::{Result, SqlContext, Store, Study};

impl Store {
    /// Replaces this host's `sweepd_gpus` rows of the study with the monitor's latest view.
    pub async fn write_gpus(&self, study: &Study, host: &str, rows: &[GpuRow]) -> Result<()> {
        retrying!(self, { self.write_gpus_attempt(study, host, rows).await })
    }

    async fn write_gpus_attempt(&self, study: &Study, host: &str, rows: &[GpuRow]) -> Result<()> {
        let mut tx = self.begin().await?;
        for r in rows {
            sql!(tx.conn(), |c| sqlx::query(
                "INSERT INTO sweepd_gpus (study_id, device, name, total, free, used, util_gpu, util_mem, \
                 running, par_estimate, expected_peak, wait, error, updated_at, host, expected_why, source) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
                 ON CONFLICT (study_id, host, device) DO UPDATE SET name = excluded.name, total = excluded.total, \
                 free = excluded.free, used = excluded.used, util_gpu = excluded.util_gpu, \
                 util_mem = excluded.util_mem, running = excluded.running, par_estimate = excluded.par_estimate, \
                 expected_peak = excluded.expected_peak, wait = excluded.wait, error = excluded.error, \
                 updated_at = excluded.updated_at, expected_why = excluded.expected_why, \
                 source = excluded.source",
            )
            .bind(study.id)
            .bind(r.device as i64)
            .bind(&r.name)
            .bind(r.total.map(|v| v as i64))
            .bind(r.free.map(|v| v as i64))
            .bind(r.used.map(|v| v as i64))
            .bind(r.util_gpu.map(i64::from))
            .bind(r.util_mem.map(i64::from))
            .bind(r.running as i64)
            .bind(r.par_estimate.map(|v| v as i64))
            .bind(r.expected_peak.map(|v| v as i64))
            .bind(&r.wait)
            .bind(&r.error)
            .bind(Stamp::now())
            .bind(host)
            .bind(&r.expected_why)
            .bind(&r.source)
            .execute(c)
            .await
            .map(|r| r.rows_affected()))
            .at(&self.path)?;
        }
        tx.commit().await.at(&self.path)?;
        Ok(())
    }

    pub async fn gpus(&self, study: &Study) -> Result<Vec<GpuRow>> {
        retrying!(self, { self.gpus_attempt(study).await })
    }

    async fn gpus_attempt(&self, study: &Study) -> Result<Vec<GpuRow>> {
        sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
            "SELECT host, device, name, total, free, used, util_gpu, util_mem, running, par_estimate, \
             expected_peak, wait, error, CAST(updated_at AS TEXT) AS updated_at, expected_why, source \
             FROM sweepd_gpus WHERE study_id = $1 ORDER BY host, device",
        )
        .bind(study.id)
        .fetch_all(c)
        .await)
        .at(&self.path)
    }

    /// Telemetry samples of trial memory.
    pub async fn write_samples(&self, samples: &[MemorySample]) -> Result<()> {
        retrying!(self, { self.write_samples_attempt(samples).await })
    }

    async fn write_samples_attempt(&self, samples: &[MemorySample]) -> Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        let now = Stamp::now();
        for s in samples {
            sql!(tx.conn(), |c| sqlx::query(
                "INSERT INTO sweepd_trial_memory (trial_id, at, device, used) VALUES ($1, $2, $3, $4)",
            )
            .bind(s.trial_id)
            .bind(&now)
            .bind(s.device as i64)
            .bind(s.used as i64)
            .execute(c)
            .await
            .map(|r| r.rows_affected()))
            .at(&self.path)?;
        }
        tx.commit().await.at(&self.path)?;
        Ok(())
    }
}

/// A sample of one trial's device memory, for `sweepd_trial_memory` (the time is when it is
/// written).
#[derive(Debug, Clone)]
pub struct MemorySample {
    pub trial_id: i64,
    pub device: u32,
    /// Bytes.
    pub used: u64,
}

/// One `sweepd_gpus` row.
#[derive(Debug, Clone, Default, serde::Serialize, sqlx::FromRow)]
pub struct GpuRow {
    /// The host whose device it is (filled in when read back).
    pub host: String,
    #[sqlx(try_from = "i64")]
    pub device: u32,
    pub name: Option<String>,
    #[sqlx(try_from = "NullableInt")]
    pub total: Option<u64>,
    #[sqlx(try_from = "NullableInt")]
    pub free: Option<u64>,
    #[sqlx(try_from = "NullableInt")]
    pub used: Option<u64>,
    #[sqlx(try_from = "NullableInt")]
    pub util_gpu: Option<u32>,
    #[sqlx(try_from = "NullableInt")]
    pub util_mem: Option<u32>,
    #[sqlx(try_from = "i64")]
    pub running: usize,
    #[sqlx(try_from = "NullableInt")]
    pub par_estimate: Option<usize>,
    #[sqlx(try_from = "NullableInt")]
    pub expected_peak: Option<u64>,
    pub wait: Option<String>,
    pub error: Option<String>,
    pub updated_at: String,
    /// How the memory model came to `expected_peak`, in words.
    pub expected_why: Option<String>,
    /// Where the device's memory per trial comes from, and why (`gpu::source`).
    pub source: Option<String>,
}
