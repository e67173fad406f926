-- docker-compose.yml (development only): the services' role and its
-- password, at the cluster's first start. The operator step
-- (deploy/streams) then applies the schema and grants this role its rows
-- (deploy/postgres/grants.sql); in production the operator creates the
-- role with a secret password, or the provider's IAM authentication.
CREATE ROLE mintgate_service LOGIN PASSWORD 'dev-only-mintgate-postgres-service-password';
