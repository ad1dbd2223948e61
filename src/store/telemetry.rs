//! GPU readings and trial memory samples the daemon records for `status`, `gpus` and later
//! analysis.

use super::{now_text, Result, SqlContext, Store, Study};
use sqlx::Row;

impl Store {
    /// Replaces the study's `sweepd_gpus` rows with the monitor's latest view.
    pub async fn write_gpus(&self, study: &Study, rows: &[GpuRow]) -> Result<()> {
        let mut tx = self.pool.begin().await.at(&self.path)?;
        for r in rows {
            sqlx::query(
                "INSERT INTO sweepd_gpus (study_id, device, name, total, free, used, util_gpu, util_mem, \
                 running, par_estimate, expected_peak, wait, error, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
                 ON CONFLICT (study_id, device) DO UPDATE SET name = excluded.name, total = excluded.total, \
                 free = excluded.free, used = excluded.used, util_gpu = excluded.util_gpu, \
                 util_mem = excluded.util_mem, running = excluded.running, par_estimate = excluded.par_estimate, \
                 expected_peak = excluded.expected_peak, wait = excluded.wait, error = excluded.error, \
                 updated_at = excluded.updated_at",
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
            .bind(now_text())
            .execute(&mut *tx)
            .await
            .at(&self.path)?;
        }
        tx.commit().await.at(&self.path)?;
        Ok(())
    }

    pub async fn gpus(&self, study: &Study) -> Result<Vec<GpuRow>> {
        let rows = sqlx::query(
            "SELECT device, name, total, free, used, util_gpu, util_mem, running, par_estimate, \
             expected_peak, wait, error, updated_at FROM sweepd_gpus WHERE study_id = $1 ORDER BY device",
        )
        .bind(study.id)
        .fetch_all(&self.pool)
        .await
        .at(&self.path)?;
        Ok(rows
            .into_iter()
            .map(|r| GpuRow {
                device: r.get::<i64, _>(0) as u32,
                name: r.get(1),
                total: r.get::<Option<i64>, _>(2).map(|v| v as u64),
                free: r.get::<Option<i64>, _>(3).map(|v| v as u64),
                used: r.get::<Option<i64>, _>(4).map(|v| v as u64),
                util_gpu: r.get::<Option<i64>, _>(5).map(|v| v as u32),
                util_mem: r.get::<Option<i64>, _>(6).map(|v| v as u32),
                running: r.get::<i64, _>(7) as usize,
                par_estimate: r.get::<Option<i64>, _>(8).map(|v| v as usize),
                expected_peak: r.get::<Option<i64>, _>(9).map(|v| v as u64),
                wait: r.get(10),
                error: r.get(11),
                updated_at: r.get(12),
            })
            .collect())
    }

    /// Telemetry samples of trial memory.
    pub async fn write_samples(&self, samples: &[crate::monitor::Sample]) -> Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await.at(&self.path)?;
        let now = now_text();
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

/// One `sweepd_gpus` row.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GpuRow {
    pub device: u32,
    pub name: Option<String>,
    pub total: Option<u64>,
    pub free: Option<u64>,
    pub used: Option<u64>,
    pub util_gpu: Option<u32>,
    pub util_mem: Option<u32>,
    pub running: usize,
    pub par_estimate: Option<usize>,
    pub expected_peak: Option<u64>,
    pub wait: Option<String>,
    pub error: Option<String>,
    pub updated_at: String,
}
