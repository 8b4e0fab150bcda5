-- fleetsync's least-privilege loader user, for current ClickHouse releases
-- (SQL-driven access control; run as a user with access_management = 1).
-- ClickHouse 18.16 has no SQL access control: use users.d-fleetsync.xml there.
--
-- The user may read and write its own database (default name: fleet, the
-- config's clickhouse.database), and run the DDL that `fleetsync migrate` and
-- the schema check at the start of every cycle need: create the database and
-- its tables, add or change columns. It may not drop or truncate anything,
-- delete rows, or touch any other database.
--
-- Replace the password placeholder, or use IDENTIFIED WITH sha256_hash BY '<hex>'
-- so the clear text never reaches the server's query log. Put the same
-- password in the Secret that the pods mount as clickhouse.password_file.

CREATE SETTINGS PROFILE IF NOT EXISTS fleetsync_loader SETTINGS
    -- Inserts of 100k-500k rows and the status queries fit well below this.
    -- MAX: the loader cannot raise them for its own sessions.
    max_memory_usage = 2000000000 MAX 2000000000,
    max_execution_time = 600 MAX 600;

CREATE USER IF NOT EXISTS fleetsync
    IDENTIFIED WITH sha256_password BY 'REPLACE-ME-not-a-real-password'
    -- Narrow this to the pods' network, for example HOST IP '10.0.0.0/8'.
    HOST ANY
    DEFAULT DATABASE fleet
    SETTINGS PROFILE 'fleetsync_loader';

-- The database itself, so that a first `fleetsync migrate` can create it. An
-- administrator may create it beforehand instead and leave this grant out.
GRANT CREATE DATABASE ON fleet.* TO fleetsync;

-- Migrations: CREATE TABLE IF NOT EXISTS and ALTER TABLE ... ADD/MODIFY COLUMN.
GRANT CREATE TABLE, ALTER ADD COLUMN, ALTER MODIFY COLUMN, ALTER COMMENT COLUMN ON fleet.* TO fleetsync;

-- Loading points and metadata, committing high-water marks, and reading them
-- back (marks, `fleetsync status`, `fleetsync verify`).
GRANT SELECT, INSERT ON fleet.* TO fleetsync;

-- Analysts get a separate read-only role, never the loader's credentials:
--   CREATE ROLE IF NOT EXISTS fleet_reader;
--   GRANT SELECT ON fleet.* TO fleet_reader;
