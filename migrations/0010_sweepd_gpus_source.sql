-- `sweepd gpus` says where a device's memory per trial comes from (docs/gpu-memory-model.md,
-- "Attribution without PIDs"): NVML's processes, or the workers' frameworks, and why.
ALTER TABLE sweepd_gpus ADD COLUMN source TEXT;
