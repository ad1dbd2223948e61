-- A trial's finish, the next trial's start, or both, in one round trip (src/store/step.rs).
--
-- The one definition of sweepd_step: sweepd installs this file (CREATE OR REPLACE) after its
-- numbered migrations, each time a daemon opens the database, where the installed function is
-- not this text (src/store/postgres.rs, `install_functions`). Migrations 0005, 0006 and 0007
-- created earlier versions and stay as they ran (sqlx checks their checksums); a change is made
-- here, not in a new migration. A change an older sweepd could not call (the arguments, the
-- rows returned, what they mean) also needs a numbered migration, so that an older sweepd
-- refuses the database instead of calling a function it does not know.
--
-- Every writer of a study's trials takes the study's row lock first, and holds it until its
-- commit: the lock's hold is what limits a study's trials per second across hosts. Sent
-- statement by statement, a finish and the next start held it for six round trips between
-- sweepd and the server; called as one statement, this function holds it for the time the
-- server takes to run it. It writes what the statement-per-row path of src/store/trials.rs
-- writes, under the same conditions (a finish only of a RUNNING trial, a claim only of a
-- WAITING one, a start only with room in the budget), and decides the budget by the rule of
-- `Tally` (src/study/tally.rs) over the rows of the tally's read (`sweepd_tally`, the same read
-- sweepd makes for a refresh) that it returns; sweepd applies them to its own tally and checks
-- that it agrees. The two rules are held together by a table of cases run on both engines
-- (tests/postgres.rs, `the_budget_rule_is_the_same_on_both_engines`).
--
-- A COMPLETE finish is written before the study's row lock is taken: whatever the function does
-- while holding it limits the study's pace. The finish needs no lock: it changes one RUNNING
-- trial that only this call may finish (the conditional update), and a trial RUNNING or
-- COMPLETE counts alike against the budget, so no other writer's tally changes by it. A call
-- sent again is answered from its record under the lock, after a finish that then changes
-- nothing.
--
-- Returns rows (r_kind, r_trial, r_number, r_state, r_retried, r_sweepd):
--   'tally'  one per trial the budget's tally reads (created after p_seen, or in p_open)
--   'finish' r_number: the finished trial's number; NULL where it was not RUNNING
--   'start'  r_state 'yes' (r_trial, r_number: the trial started), 'taken', 'noroom', or
--            'waiting' (a new trial refused for a WAITING one, see p_skip)
--   'replay' r_state: what an earlier call with the same (p_writer, p_seq) recorded, whose
--            commit sweepd could not confirm (src/store/once.rs); nothing else is done.
CREATE OR REPLACE FUNCTION sweepd_step(
    p_study BIGINT,
    p_writer TEXT,
    p_seq BIGINT,
    p_oldest BIGINT,
    p_now TIMESTAMP,
    -- The finish, COMPLETE: none where p_fin is NULL.
    p_fin BIGINT,
    p_values FLOAT8[],
    p_value_types TEXT[],
    p_fin_keys TEXT[],
    p_fin_vals TEXT[],
    p_done_by BIGINT,
    -- The start: none where p_start is false; a new trial where p_claim is NULL, else the
    -- WAITING trial p_claim.
    p_start BOOLEAN,
    p_claim BIGINT,
    p_budget BIGINT,
    p_finished BIGINT,
    p_seen BIGINT,
    p_open BIGINT[],
    p_keys TEXT[],
    p_vals TEXT[],
    p_names TEXT[],
    p_params FLOAT8[],
    p_dists TEXT[],
    -- A new trial does not start while a WAITING trial waits that is not among these (the
    -- daemon's own line): it answers 'waiting' instead, and the daemon claims that one first.
    -- NULL: no such condition.
    p_skip BIGINT[]
) RETURNS TABLE (
    r_kind TEXT,
    r_trial BIGINT,
    r_number BIGINT,
    r_state TEXT,
    r_retried BOOLEAN,
    r_sweepd BOOLEAN
) LANGUAGE plpgsql
-- The plan of each statement is made once per session and kept: planned again at every call
-- (PostgreSQL's default for statements with parameters, until it judges a generic plan no
-- worse) they took a fifth of the server's time per trial, for plans that never change.
SET plan_cache_mode = force_generic_plan
AS $sweepd_step$
DECLARE
    recorded TEXT;
    fin_number BIGINT;
    new_id BIGINT;
    new_number BIGINT;
    outcome TEXT;
    spent BIGINT := p_finished;
    reserved BIGINT := 0;
    waiting BIGINT := 0;
    ahead BIGINT := 0;
    tr RECORD;
BEGIN
    -- Rows go out as the output columns are set (RETURN NEXT), without a query each.
    IF p_fin IS NOT NULL THEN
        -- Its state (only a RUNNING trial's), values, system attributes and the worker's
        -- count, in one statement: each further statement costs the server an executor's
        -- start and end. Before the lock: see the header.
        WITH f AS (
            UPDATE trials t SET state = 'COMPLETE', datetime_complete = p_now
            WHERE t.trial_id = p_fin AND t.state = 'RUNNING'
            RETURNING t.trial_id, t.number
        ), v AS (
            INSERT INTO trial_values (trial_id, objective, value, value_type)
            SELECT f.trial_id, x.i - 1, x.v, CAST(x.t AS trialvaluetype)
            FROM f, unnest(p_values, p_value_types) WITH ORDINALITY AS x(v, t, i)
            ORDER BY x.i
        ), a AS (
            INSERT INTO trial_system_attributes (trial_id, key, value_json)
            SELECT f.trial_id, y.k, y.v FROM f, unnest(p_fin_keys, p_fin_vals) AS y(k, v)
            ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json
        ), w AS (
            UPDATE sweepd_workers sw SET trials_done = sw.trials_done + 1
            WHERE sw.worker_id = p_done_by AND EXISTS (SELECT 1 FROM f)
        )
        SELECT f.number INTO fin_number FROM f;
    END IF;

    -- Each statement below sees what was committed before it ran (READ COMMITTED, a volatile
    -- function): after this one, everything the lock's previous holder wrote.
    PERFORM 1 FROM studies s WHERE s.study_id = p_study FOR UPDATE;
    -- A call whose commit sweepd could not confirm, sent again, is answered from its record.
    -- The finish above changed nothing then: the first sending finished the trial (if it was
    -- still in progress, our update waited for its commit).
    SELECT o.result INTO recorded FROM sweepd_ops o WHERE o.writer = p_writer AND o.seq = p_seq;
    IF FOUND THEN
        r_kind := 'replay';
        r_state := recorded;
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_fin IS NOT NULL THEN
        r_kind := 'finish';
        r_trial := p_fin;
        r_number := fin_number;
        RETURN NEXT;
    END IF;

    IF p_start THEN
        -- The tally's read (`sweepd_tally`): the trials created since sweepd's last read and
        -- those that were not final then.
        r_kind := 'tally';
        r_number := NULL;
        FOR tr IN SELECT * FROM sweepd_tally(p_study, p_seen, p_open)
        LOOP
            -- `Tally::apply`: a final trial spends the budget unless it failed and was
            -- retried; a RUNNING one of a sweepd daemon reserves a start; a WAITING one holds
            -- a start against new trials.
            IF tr.state = 'RUNNING' THEN
                IF tr.sweepd THEN
                    reserved := reserved + 1;
                END IF;
            ELSIF tr.state = 'WAITING' THEN
                waiting := waiting + 1;
                IF NOT (tr.trial_id = ANY(p_skip)) THEN
                    ahead := ahead + 1;
                END IF;
            ELSIF NOT (tr.state = 'FAIL' AND tr.retried) THEN
                spent := spent + 1;
            END IF;
            r_trial := tr.trial_id;
            r_state := tr.state;
            r_retried := tr.retried;
            r_sweepd := tr.sweepd;
            RETURN NEXT;
        END LOOP;

        -- `Tally::room_for_new` for a new trial (the WAITING trials hold starts of their
        -- own), `Tally::room` for a claim.
        IF p_claim IS NOT NULL THEN
            waiting := 0;
        END IF;
        IF p_claim IS NULL AND ahead > 0 THEN
            outcome := 'waiting';
        ELSIF p_budget IS NOT NULL AND spent + reserved + waiting >= p_budget THEN
            outcome := 'noroom';
        ELSIF p_claim IS NULL THEN
            -- A new trial numbered as Optuna numbers it (MAX + 1: numbers are dense), with
            -- its system attributes and params in the order given.
            WITH t AS (
                INSERT INTO trials (number, study_id, state, datetime_start)
                SELECT COALESCE(MAX(o.number), -1) + 1, p_study, 'RUNNING', p_now
                FROM trials o WHERE o.study_id = p_study
                RETURNING trial_id, number
            ), a AS (
                INSERT INTO trial_system_attributes (trial_id, key, value_json)
                SELECT t.trial_id, y.k, y.v FROM t, unnest(p_keys, p_vals) AS y(k, v)
                ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json
            ), p AS (
                INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json)
                SELECT t.trial_id, z.n, z.v, z.d
                FROM t, unnest(p_names, p_params, p_dists) WITH ORDINALITY AS z(n, v, d, i)
                ORDER BY z.i
            )
            SELECT t.trial_id, t.number INTO new_id, new_number FROM t;
        ELSE
            -- The WAITING trial, if it still is.
            WITH t AS (
                UPDATE trials c SET state = 'RUNNING', datetime_start = p_now
                WHERE c.trial_id = p_claim AND c.state = 'WAITING' AND c.study_id = p_study
                RETURNING c.trial_id, c.number
            ), a AS (
                INSERT INTO trial_system_attributes (trial_id, key, value_json)
                SELECT t.trial_id, y.k, y.v FROM t, unnest(p_keys, p_vals) AS y(k, v)
                ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json
            ), p AS (
                INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json)
                SELECT t.trial_id, z.n, z.v, z.d
                FROM t, unnest(p_names, p_params, p_dists) WITH ORDINALITY AS z(n, v, d, i)
                ORDER BY z.i
            )
            SELECT t.trial_id, t.number INTO new_id, new_number FROM t;
        END IF;
        IF outcome IS NULL THEN
            outcome := CASE WHEN new_id IS NULL THEN 'taken' ELSE 'yes' END;
        END IF;
        r_kind := 'start';
        r_trial := new_id;
        r_number := new_number;
        r_state := outcome;
        r_retried := NULL;
        r_sweepd := NULL;
        RETURN NEXT;
    END IF;

    -- What was written is recorded, so that a call whose commit sweepd could not confirm is
    -- answered from here when it is sent again; this writer's records of writes that are over
    -- go.
    IF fin_number IS NOT NULL OR outcome = 'yes' THEN
        WITH done AS (
            DELETE FROM sweepd_ops o WHERE o.writer = p_writer AND o.seq < p_oldest
        )
        INSERT INTO sweepd_ops (writer, seq, study_id, result) VALUES (p_writer, p_seq, p_study,
            json_build_object('finish', fin_number, 'start', outcome,
                              'trial_id', new_id, 'number', new_number)::TEXT);
    END IF;
END
$sweepd_step$;
