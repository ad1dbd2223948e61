-- `sweepd gpus` explains the next trial's memory estimate in words (docs/gpu-memory-model.md):
-- the memory model's own explanation, written with the reading it goes with.
ALTER TABLE sweepd_gpus ADD COLUMN IF NOT EXISTS expected_why TEXT;
