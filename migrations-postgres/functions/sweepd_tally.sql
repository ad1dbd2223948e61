-- The budget's tally's read on PostgreSQL (src/store/tally.rs): the study's trials created
-- after p_seen, then those of p_open (the tally's trials that were not final when last read),
-- each with its state, whether it is a FAIL with a retry copy and whether a sweepd daemon runs
-- it. Read by `Store::refresh_tally` and by `sweepd_step` under the study's row lock, so the
-- two take in the same rows. Installed as sweepd_step.sql is (read its header): this file is
-- the one definition.
--
-- A plain SQL function, STABLE, without STRICT or settings, so that the planner inlines it into
-- the query that calls it: its statement is planned with its caller's (a generic plan inside
-- sweepd_step), not run apart at each call. The attribute names are `study::attrs`'s
-- (RETRIED_AS_ATTR, OWNER_ATTR, WORKER_ID_ATTR); the store's tests check that they match.
CREATE OR REPLACE FUNCTION sweepd_tally(p_study BIGINT, p_seen BIGINT, p_open BIGINT[])
RETURNS TABLE (trial_id BIGINT, state TEXT, retried BOOLEAN, sweepd BOOLEAN)
LANGUAGE sql STABLE
AS $sweepd_tally$
    -- Each attribute is looked up by the trial's index entry (a subquery with LIMIT 1): written
    -- as EXISTS, the planner hashed the whole trial_system_attributes table at each read (a scan
    -- growing with the study, inside the study's lock) rather than probe it for the few rows
    -- read. Each part is ordered by trial_id, so that a generic plan walks the primary key.
    (SELECT CAST(t.trial_id AS BIGINT), CAST(t.state AS TEXT),
        (SELECT true FROM trial_system_attributes a
         WHERE a.trial_id = t.trial_id AND a.key = 'sweepd:retried_as' LIMIT 1) IS NOT NULL,
        (SELECT true FROM trial_system_attributes a
         WHERE a.trial_id = t.trial_id AND a.key IN ('sweepd:daemon', 'sweepd:worker_id')
         LIMIT 1) IS NOT NULL
     FROM trials t
     -- `+ 0`: no index on study_id can serve this, only the primary key's range from p_seen.
     -- A generic plan (made once, for any p_seen) could not know the range is a few rows, and
     -- took every trial of the study from ix_sweepd_trials_study_state at each call, ever
     -- slower as the study grew. The range holds other studies' trials too, only those created
     -- since then.
     WHERE t.trial_id > p_seen AND t.study_id + 0 = p_study
     ORDER BY t.trial_id)
    UNION ALL
    (SELECT CAST(t.trial_id AS BIGINT), CAST(t.state AS TEXT),
        (SELECT true FROM trial_system_attributes a
         WHERE a.trial_id = t.trial_id AND a.key = 'sweepd:retried_as' LIMIT 1) IS NOT NULL,
        (SELECT true FROM trial_system_attributes a
         WHERE a.trial_id = t.trial_id AND a.key IN ('sweepd:daemon', 'sweepd:worker_id')
         LIMIT 1) IS NOT NULL
     FROM trials t WHERE t.trial_id = ANY(p_open)
     ORDER BY t.trial_id)
$sweepd_tally$;
