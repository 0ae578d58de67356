-- +goose Up
-- Live files: one row per file, its current version.
CREATE TABLE memory_files (
    tenant     text        NOT NULL,
    owner      text        NOT NULL DEFAULT '',
    path       text        NOT NULL,
    version    bigint      NOT NULL,
    content    text        NOT NULL,
    size       integer     NOT NULL,
    updated_by text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, owner, path)
);
CREATE INDEX memory_files_path ON memory_files (tenant, path text_pattern_ops);

-- Every change ever made: who changed what and when. content is NULL for
-- a removal. op is the tool call (or CLI operation) that made the change,
-- so a redelivered call is applied once.
CREATE TABLE memory_versions (
    tenant     text        NOT NULL,
    owner      text        NOT NULL DEFAULT '',
    path       text        NOT NULL,
    version    bigint      NOT NULL,
    content    text,
    size       integer     NOT NULL,
    changed_by text        NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now(),
    op         uuid        NOT NULL UNIQUE,
    PRIMARY KEY (tenant, owner, path, version)
);

-- +goose Down
DROP TABLE memory_versions;
DROP TABLE memory_files;
