-- Writes to sources, API keys, destinations and configuration versions NOTIFY
-- `onefold_config`: every process's cache of them (idempotency_core/config_cache.py)
-- is emptied at the writer's commit. Triggers rather than code, so that a service, the
-- admin, a command or raw SQL in any process all notify, and a revoked key stops
-- working from the next request whoever revoked it. One notification per statement;
-- PostgreSQL delivers it at commit and folds repeats within a transaction into one.

CREATE OR REPLACE FUNCTION onefold_config_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('onefold_config', TG_TABLE_NAME);
    RETURN NULL;
END;
$$;

CREATE TRIGGER idempotency_core_source_config_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idempotency_core_source
    FOR EACH STATEMENT EXECUTE FUNCTION onefold_config_changed();

CREATE TRIGGER idempotency_core_sourceapikey_config_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idempotency_core_sourceapikey
    FOR EACH STATEMENT EXECUTE FUNCTION onefold_config_changed();

CREATE TRIGGER idempotency_core_destination_config_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idempotency_core_destination
    FOR EACH STATEMENT EXECUTE FUNCTION onefold_config_changed();

CREATE TRIGGER idempotency_core_businessconfigversion_config_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idempotency_core_businessconfigversion
    FOR EACH STATEMENT EXECUTE FUNCTION onefold_config_changed();

-- Configuration versions are append-only, as audit entries are: a restore is a new
-- version.
CREATE OR REPLACE FUNCTION onefold_config_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'configuration versions are append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER idempotency_core_businessconfigversion_append_only
    BEFORE UPDATE OR DELETE ON idempotency_core_businessconfigversion
    FOR EACH ROW EXECUTE FUNCTION onefold_config_append_only();
