-- The services' database role: reads and writes the rows of schema
-- mintgate, never changes the schema (no CREATE, no ALTER, no DROP, no
-- TRUNCATE). The operator step (deploy/streams) runs this after the
-- migrations; it is idempotent. Set the role's password yourself
-- (ALTER ROLE mintgate_service PASSWORD '…') or use your provider's IAM
-- authentication; MINTGATE_POSTGRES_URL of the sweeper and the signer names
-- this role, the operator step's names the schema's owner.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mintgate_service') THEN
        CREATE ROLE mintgate_service LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;
    END IF;
END
$$;
REVOKE CREATE ON SCHEMA mintgate FROM PUBLIC;
REVOKE CREATE ON SCHEMA public FROM mintgate_service;
GRANT USAGE ON SCHEMA mintgate TO mintgate_service;
GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA mintgate TO mintgate_service;
