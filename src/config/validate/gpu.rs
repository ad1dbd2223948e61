//! `[gpu]` and `[retry]`: which devices trials may use, how admission and the fault policies
//! behave, each value bounded so that the supervisor's timers and byte sums cannot overflow.

use super::*;
use crate::config::raw::{RawDevices, RawGpu, RawRetry};
use crate::config::{Devices, GpuConfig, RetryConfig};

impl Validator<'_> {
    pub(crate) fn gpu(&mut self, raw: Option<&RawGpu>, base_dir: &Path) -> GpuConfig {
        let defaults = GpuConfig::default();
        let Some(raw) = raw else {
            return defaults;
        };
        let devices = match &raw.devices {
            None => Devices::All,
            Some(d) => self.devices(d),
        };
        let headroom = self
            .size_at_least(raw.headroom.as_ref(), "gpu.headroom", 0)
            .flatten()
            .unwrap_or(defaults.headroom);
        let trial_memory = self
            .size_at_least(raw.trial_memory.as_ref(), "gpu.trial_memory", 1)
            .flatten()
            .unwrap_or(defaults.trial_memory);
        let max_par_per_device = self.int(
            raw.max_par_per_device.as_ref(),
            "gpu.max_par_per_device",
            1..=MAX_PAR_LIMIT,
            defaults.max_par_per_device,
        );
        let gpus_per_trial = self.int(
            raw.gpus_per_trial.as_ref(),
            "gpu.gpus_per_trial",
            1..=USIZE_MAX,
            defaults.gpus_per_trial,
        );
        if let (true, Some(g)) = (gpus_per_trial > 1, &raw.gpus_per_trial) {
            // Refused here rather than at `run`, so that `sweepd check` tells the truth.
            self.at(
                g,
                "gpu.gpus_per_trial",
                format!("multi-GPU trials are not supported yet: set 1 (got {gpus_per_trial})"),
            );
        } else if let (Devices::List(list), Some(g)) = (&devices, &raw.gpus_per_trial) {
            if gpus_per_trial > list.len() {
                self.at(
                    g,
                    "gpu.gpus_per_trial",
                    format!(
                        "must be at most the number of devices listed ({}), got {gpus_per_trial}",
                        list.len()
                    ),
                );
            }
        }
        let poll_interval = match self.duration(
            raw.poll_interval.as_ref(),
            "gpu.poll_interval",
            MAX_POLL_INTERVAL,
        ) {
            Some(d) if d < MIN_POLL_INTERVAL => {
                let p = raw.poll_interval.as_ref().expect("parsed, so written");
                self.at(
                    p,
                    "gpu.poll_interval",
                    format!(
                        "must be at least {} (got {})",
                        format_duration(MIN_POLL_INTERVAL),
                        format_duration(d)
                    ),
                );
                defaults.poll_interval
            }
            d => d.unwrap_or(defaults.poll_interval),
        };
        let nvml_lib = raw.nvml_lib.as_ref().and_then(|n| {
            if n.get_ref().is_empty() {
                self.at(n, "gpu.nvml_lib", "must not be empty");
                return None;
            }
            if let Err(message) = check_path(n.get_ref()) {
                self.at(n, "gpu.nvml_lib", message);
                return None;
            }
            let path = resolve(base_dir, Path::new(n.get_ref()));
            if !path.is_file() {
                self.at(
                    n,
                    "gpu.nvml_lib",
                    format!(
                        "NVML library {} does not exist or is not a file",
                        path.display()
                    ),
                );
            }
            Some(path)
        });
        let idle_worker_timeout = self
            .duration(
                raw.idle_worker_timeout.as_ref(),
                "gpu.idle_worker_timeout",
                MAX_IDLE_WORKER_TIMEOUT,
            )
            .unwrap_or(defaults.idle_worker_timeout);
        let memory_group = raw.memory_group.as_ref().and_then(|g| {
            if g.get_ref().trim().is_empty() {
                self.at(g, "gpu.memory_group", "must not be empty");
                return None;
            }
            Some(g.get_ref().clone())
        });
        GpuConfig {
            devices,
            headroom,
            trial_memory,
            max_par_per_device,
            gpus_per_trial,
            poll_interval,
            nvml_lib,
            idle_worker_timeout,
            memory_group,
            caps: raw.caps.as_ref().map_or(defaults.caps, |c| *c.get_ref()),
        }
    }

    pub(crate) fn devices(&mut self, raw: &Spanned<RawDevices>) -> Devices {
        const KEY: &str = "gpu.devices";
        match raw.get_ref() {
            RawDevices::Word(w) => match w.as_str() {
                "all" => Devices::All,
                "none" => Devices::None,
                other => {
                    self.at(
                        raw,
                        KEY,
                        format!(
                            "unknown value {other:?}; expected \"all\", \"none\" \
                             or a list of device indices such as [0, 1]"
                        ),
                    );
                    Devices::All
                }
            },
            RawDevices::List(items) => {
                if items.is_empty() {
                    self.at(
                        raw,
                        KEY,
                        "the device list must not be empty (write \"none\" for CPU only)",
                    );
                }
                let mut list: Vec<u32> = Vec::new();
                for item in items {
                    let v = *item.get_ref();
                    match u32::try_from(v) {
                        Err(_) => self.at(
                            item,
                            KEY,
                            format!("device indices must be between 0 and {U32_MAX} (got {v})"),
                        ),
                        Ok(i) if list.contains(&i) => {
                            self.at(item, KEY, format!("duplicate device index {i}"));
                        }
                        Ok(i) => list.push(i),
                    }
                }
                Devices::List(list)
            }
        }
    }

    pub(crate) fn retry(&mut self, raw: Option<&RawRetry>) -> RetryConfig {
        let d = RetryConfig::default();
        let Some(raw) = raw else {
            return d;
        };
        let oom = self.int(raw.oom.as_ref(), "retry.oom", 0..=U32_MAX, d.oom);
        let cuda_fatal = self.int(
            raw.cuda_fatal.as_ref(),
            "retry.cuda_fatal",
            0..=U32_MAX,
            d.cuda_fatal,
        );
        let crash = self.int(raw.crash.as_ref(), "retry.crash", 0..=U32_MAX, d.crash);
        let breaker_threshold = self.int(
            raw.breaker_threshold.as_ref(),
            "retry.breaker_threshold",
            1..=U32_MAX,
            d.breaker_threshold,
        );
        let backoff = self.duration(
            raw.breaker_backoff.as_ref(),
            "retry.breaker_backoff",
            MAX_BREAKER_BACKOFF,
        );
        let max_backoff = self.duration(
            raw.breaker_max_backoff.as_ref(),
            "retry.breaker_max_backoff",
            MAX_BREAKER_BACKOFF,
        );
        let backoff_ok = raw.breaker_backoff.is_none() || backoff.is_some();
        let max_backoff_ok = raw.breaker_max_backoff.is_none() || max_backoff.is_some();
        let breaker_backoff = backoff.unwrap_or(d.breaker_backoff);
        let breaker_max_backoff = max_backoff.unwrap_or(d.breaker_max_backoff);
        if backoff_ok && max_backoff_ok && breaker_max_backoff < breaker_backoff {
            let message = format!(
                "must be at least breaker_backoff ({}), got {}",
                format_duration(breaker_backoff),
                format_duration(breaker_max_backoff)
            );
            match &raw.breaker_max_backoff {
                Some(m) => self.at(m, "retry.breaker_max_backoff", message),
                None => self.at_key(
                    "retry.breaker_max_backoff",
                    format!("{message} (the default)"),
                ),
            }
        }
        let oom_admission_factor = match &raw.oom_admission_factor {
            None => d.oom_admission_factor,
            Some(f) => match float_value(f.get_ref()) {
                Ok(x) if x > 0.0 && x < 1.0 => x,
                Ok(x) => {
                    self.at(
                        f,
                        "retry.oom_admission_factor",
                        format!("must be greater than 0 and less than 1 (got {x})"),
                    );
                    d.oom_admission_factor
                }
                Err(message) => {
                    self.at(f, "retry.oom_admission_factor", message);
                    d.oom_admission_factor
                }
            },
        };
        let oom_recovery = self
            .duration(
                raw.oom_recovery.as_ref(),
                "retry.oom_recovery",
                MAX_OOM_RECOVERY,
            )
            .unwrap_or(d.oom_recovery);
        let stop_after_same_error = self.int(
            raw.stop_after_same_error.as_ref(),
            "retry.stop_after_same_error",
            0..=U32_MAX,
            d.stop_after_same_error,
        );
        RetryConfig {
            oom,
            cuda_fatal,
            crash,
            breaker_threshold,
            breaker_backoff,
            breaker_max_backoff,
            oom_admission_factor,
            oom_recovery,
            stop_after_same_error,
        }
    }
}
