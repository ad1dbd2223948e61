//! GPU readings and trial memory samples the daemon records for `status`, `gpus` and later
//! analysis.

use super::columns::NullableInt;
use super::{time, Result, SqlContext, Store, Study};

impl Store {
    /// Replaces the study's `sweepd_gpus` rows with the monitor's latest view.
    pub async fn write_gpus(&self, study: &Study, rows: &[GpuRow]) -> Result<()> {
        let mut tx = self.pool.begin().await.at(&self.path)?;
        for r in rows {
            sqlx::query(
                "INSERT INTO sweepd_gpus (study_id, device, name, total, free, used, util_gpu, util_mem, \
                 running, par_estimate, expected_peak, wait, error, updated_at, expected_why) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
                 ON CONFLICT (study_id, device) DO UPDATE SET name = excluded.name, total = excluded.total, \
                 free = excluded.free, used = excluded.used, util_gpu = excluded.util_gpu, \
                 util_mem = excluded.util_mem, running = excluded.running, par_estimate = excluded.par_estimate, \
                 expected_peak = excluded.expected_peak, wait = excluded.wait, error = excluded.error, \
                 updated_at = excluded.updated_at, expected_why = excluded.expected_why",
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
            .bind(time::now())
            .bind(&r.expected_why)
            .execute(&mut *tx)
            .await
            .at(&self.path)?;
        }
        tx.commit().await.at(&self.path)?;
        Ok(())
    }

    pub async fn gpus(&self, study: &Study) -> Result<Vec<GpuRow>> {
        sqlx::query_as(
            "SELECT device, name, total, free, used, util_gpu, util_mem, running, par_estimate, \
             expected_peak, wait, error, updated_at, expected_why FROM sweepd_gpus WHERE study_id = $1 \
             ORDER BY device",
        )
        .bind(study.id)
        .fetch_all(&self.pool)
        .await
        .at(&self.path)
    }

    /// Telemetry samples of trial memory.
    pub async fn write_samples(&self, samples: &[MemorySample]) -> Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await.at(&self.path)?;
        let now = time::now();
        for s in samples {
            sqlx::query(
                "INSERT INTO sweepd_trial_memory (trial_id, at, device, used) VALUES ($1, $2, $3, $4)",
            )
            .bind(s.trial_id)
            .bind(&now)
            .bind(s.device as i64)
            .bind(s.used as i64)
            .execute(&mut *tx)
            .await
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
}
