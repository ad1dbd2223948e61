-- The writes that must take effect once even when the acknowledgement of their commit is lost
-- (src/store/once.rs): each records its id and result here, in its own transaction, and an
-- attempt after a lost connection looks the id up before writing again. A row lives only while
-- its write may still be retried: the same daemon's later writes delete it.
CREATE TABLE IF NOT EXISTS sweepd_ops (
    writer     TEXT      NOT NULL,  -- one daemon run's store (random)
    seq        BIGINT    NOT NULL,  -- the write's number in that store
    study_id   BIGINT    NOT NULL,
    result     TEXT      NOT NULL,  -- JSON: what the write returned
    created_at TIMESTAMP NOT NULL DEFAULT LOCALTIMESTAMP,
    PRIMARY KEY (writer, seq)
);
