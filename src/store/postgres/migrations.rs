//! The shared store's schema, one step per version, in order. A step is
//! applied once, in one transaction, and never edited after it ships: a
//! change is a new step.

/// The schema, one step per version, in order. A step is applied once, in
/// one transaction, and never edited after it ships: a change is a new
/// step.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: replicas and their leases; reviews and their held requests.
    "CREATE TABLE verdict_replicas (
        replica_id  TEXT PRIMARY KEY,
        started_at  BIGINT NOT NULL,  -- unix microseconds, database clock
        lease_until BIGINT NOT NULL
    );
    CREATE TABLE review_reviews (
        review_id             TEXT PRIMARY KEY,
        created_at            BIGINT NOT NULL,  -- unix microseconds
        expires_at            BIGINT NOT NULL,
        owner                 TEXT NOT NULL,
        route                 TEXT NOT NULL,
        action                TEXT NOT NULL,
        reason                TEXT NOT NULL,
        record_id             TEXT,
        req_method            TEXT NOT NULL,
        req_path              TEXT NOT NULL,
        req_body              BYTEA NOT NULL,
        req_hash              TEXT NOT NULL,
        req_creds             TEXT NOT NULL,
        rules                 TEXT NOT NULL,
        detail                TEXT,
        requester             TEXT,
        approvals             TEXT NOT NULL DEFAULT '[]',
        status                TEXT NOT NULL
            CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
        reviewer              TEXT,
        note                  TEXT,
        resolved_at           BIGINT,
        forward_state         TEXT NOT NULL DEFAULT 'not_started'
            CHECK (forward_state IN ('not_started', 'started', 'done', 'outcome_unknown')),
        forward_started_at    BIGINT,
        forward_finished_at   BIGINT,
        forward_error         TEXT,
        upstream_status       INTEGER,
        upstream_body         BYTEA,
        upstream_content_type TEXT,
        replica               TEXT NOT NULL,  -- the replica that holds the client connection
        forward_replica       TEXT            -- the replica that claimed the forward
    );
    CREATE INDEX review_reviews_status_created ON review_reviews (status, created_at);
    CREATE INDEX review_reviews_owner_created ON review_reviews (owner, created_at);
    CREATE TABLE review_request_headers (
        review_id TEXT NOT NULL REFERENCES review_reviews (review_id) ON DELETE CASCADE,
        position  INTEGER NOT NULL,
        name      TEXT NOT NULL,
        value     BYTEA NOT NULL,
        PRIMARY KEY (review_id, position)
    );",
    // 2: batch jobs, their items and results; an item is leased to one
    // worker at a time.
    "CREATE TABLE jobs_jobs (
        job_id          TEXT PRIMARY KEY,
        seq             BIGSERIAL NOT NULL UNIQUE,  -- creation order: the queue's order
        owner           TEXT NOT NULL,
        status          TEXT NOT NULL
            CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
        items_total     BIGINT NOT NULL,
        items_done      BIGINT NOT NULL DEFAULT 0,
        created_at_ms   BIGINT NOT NULL,
        started_at_ms   BIGINT,
        finished_at_ms  BIGINT,
        error           TEXT,
        idempotency_key TEXT,
        request_hash    TEXT NOT NULL,
        UNIQUE (owner, idempotency_key)  -- NULL keys never collide
    );
    CREATE INDEX jobs_jobs_open ON jobs_jobs (seq) WHERE status IN ('queued', 'running');
    CREATE INDEX jobs_jobs_finished ON jobs_jobs (finished_at_ms) WHERE finished_at_ms IS NOT NULL;
    CREATE TABLE jobs_items (
        job_id      TEXT NOT NULL REFERENCES jobs_jobs (job_id) ON DELETE CASCADE,
        idx         INTEGER NOT NULL,
        item        TEXT NOT NULL,
        result      TEXT,
        lease_owner TEXT,    -- the replica whose worker runs it
        lease_until BIGINT,  -- unix microseconds, database clock
        PRIMARY KEY (job_id, idx)
    );
    CREATE INDEX jobs_items_todo ON jobs_items (job_id, idx) WHERE result IS NULL;",
    // 3: every replica's signed audit checkpoints, each with the key that
    // signed it and the consistency proof from the one published before,
    // for `verdict audit verify-remote`.
    "CREATE TABLE verdict_checkpoints (
        origin       TEXT NOT NULL,
        tree_size    BIGINT NOT NULL,
        note         TEXT NOT NULL,  -- the signed checkpoint, cosignatures included
        key_json     TEXT NOT NULL,  -- the signing key, as GET /v2/audit/keys/{kid}
        proof_json   TEXT,           -- consistency from the previous published size
        replica      TEXT NOT NULL,
        published_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        PRIMARY KEY (origin, tree_size)
    );",
    // 4: the approvals a held call's action asks for (its policy's
    // `approvals`); NULL: the server's `review.approvals`.
    "ALTER TABLE review_reviews ADD COLUMN approvals_required INTEGER;",
    // 5: record-only reviews (the decision was answered elsewhere: Envoy
    // ext_authz, AuthZEN), whose approval forwards nothing; every review
    // before held a call to forward.
    "ALTER TABLE review_reviews ADD COLUMN forwards BOOLEAN NOT NULL DEFAULT TRUE;",
];
