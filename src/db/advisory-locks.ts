/**
 * Every PostgreSQL advisory lock the service takes, in one place, so that no two uses share a key by
 * accident (the keys are the server's, shared with whatever else uses the same database). Each names who
 * holds it and for how long.
 */

/** Migrations: one replica migrates at a time (src/db/migrate.ts; a session lock, then a transaction's). */
export const MIGRATION_LOCK = 7_342_001;

/** The first start's defaults: replicas starting together make one default organization (src/bootstrap.ts). */
export const BOOTSTRAP_LOCK = 7_342_002;

/** Giving deployments their host uids, one at a time (src/store/app-uids.ts; a transaction's). */
export const APP_UID_LOCK = 7_342_003;

/** A round of measuring the apps' databases: one replica at a time (src/dataplane/app-database-storage.ts). */
export const DATABASE_STORAGE_ROUND_LOCK = 0x534c_5759_4442_5354n; // "SLWYDBST"
