-- +goose Up
-- The bytes each tenant stores: the content of every version kept. A
-- trigger keeps it, so that every writer counts, whatever its release,
-- and a writer reads its tenant's total without summing its history.
CREATE TABLE memory_usage (
    tenant text   PRIMARY KEY,
    bytes  bigint NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION memory_usage_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO memory_usage AS u (tenant, bytes) VALUES (NEW.tenant, NEW.size)
            ON CONFLICT (tenant) DO UPDATE SET bytes = u.bytes + EXCLUDED.bytes;
        RETURN NEW;
    END IF;
    UPDATE memory_usage SET bytes = bytes - OLD.size WHERE tenant = OLD.tenant;
    RETURN OLD;
END
$$;
-- +goose StatementEnd

-- Created before the totals are summed: it locks out writers until this
-- migration commits, so no write falls between the sum and the trigger.
CREATE TRIGGER memory_versions_usage AFTER INSERT OR DELETE ON memory_versions
    FOR EACH ROW EXECUTE FUNCTION memory_usage_count();

INSERT INTO memory_usage (tenant, bytes)
    SELECT tenant, sum(size) FROM memory_versions GROUP BY tenant;

-- +goose Down
DROP TRIGGER memory_versions_usage ON memory_versions;
DROP FUNCTION memory_usage_count();
DROP TABLE memory_usage;
