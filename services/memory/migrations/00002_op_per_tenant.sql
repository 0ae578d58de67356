-- +goose Up
-- An operation ID is unique within its tenant, not across tenants: a
-- client picks the ID of a CLI operation, and one tenant's operation must
-- neither refuse another tenant's write nor be taken for it.
ALTER TABLE memory_versions DROP CONSTRAINT memory_versions_op_key;
ALTER TABLE memory_versions ADD CONSTRAINT memory_versions_tenant_op_key UNIQUE (tenant, op);

-- +goose Down
ALTER TABLE memory_versions DROP CONSTRAINT memory_versions_tenant_op_key;
ALTER TABLE memory_versions ADD CONSTRAINT memory_versions_op_key UNIQUE (op);
