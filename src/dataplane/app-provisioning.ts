/**
 * What the platform gives a deployment's app besides its code, made on its first deploy and kept for
 * every later revision: its own PostgreSQL database (when its app config wants one) and its agent
 * credential, both sealed in the deployment's runtime row (src/store/deployment-runtimes.ts), which the
 * lifecycle writes from this module's reports (src/domain/data-plane.ts): nothing is written here.
 */
import type { Kysely } from 'kysely';
import type pg from 'pg';
import { newCredential } from '../auth/credentials.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { AppConfig } from '../domain/app-config.ts';
import type { OwnPlaneReports } from '../domain/data-plane.ts';
import { getDeploymentRuntime } from '../store/deployment-runtimes.ts';
import type { Database } from '../store/schema.ts';
import {
  appDatabaseExists,
  appDatabaseUrl,
  createAppDatabase,
  newAppDatabaseName,
  newAppDatabasePassword,
} from './app-database.ts';
import { RevisionFailure } from './revision-build.ts';

export interface AppProvisioningDeps {
  db: Kysely<Database>;
  /** The service's pool: makes app databases. */
  pool: pg.Pool;
  /** The service's own connection string: apps get its host and port with their own role. */
  databaseUrl: string;
  secretBox: SecretBox;
  /**
   * What is made is reported here and written by the lifecycle: the database's name and sealed password
   * (before it is made), a database made (`deployment.database_created`), the agent credential.
   */
  reports: OwnPlaneReports;
}

export interface AppPlatformResources {
  /** The app's own database, null when its app config wants none. */
  databaseUrl: string | null;
  agentCredential: string;
}

/**
 * The deployment's database (when the app wants one) and agent credential, made once; a database that
 * cannot be made fails the revision (DEPLOY_FAILED database_unavailable) with what to do about it.
 */
export async function provisionAppResources(
  deps: AppProvisioningDeps,
  deployment: { id: string; workspace_id: string },
  appConfig: AppConfig,
): Promise<AppPlatformResources> {
  const { db, secretBox } = deps;
  const deploymentId = deployment.id;
  let runtime = await getDeploymentRuntime(db, deploymentId);
  if (appConfig.database && !runtime?.database_name) {
    // The name and password are kept before the database is made, so that a provision retried after a
    // crash makes (or finds) the same one rather than leaving an orphan behind.
    const name = newAppDatabaseName();
    await deps.reports.keepAppDatabase(deploymentId, deployment.workspace_id, {
      databaseName: name,
      roleName: name,
      passwordSealed: secretBox.seal(newAppDatabasePassword()),
    });
    runtime = await getDeploymentRuntime(db, deploymentId);
  }
  // Made when missing: a first deploy, or one retried after a crash between keeping the name and making
  // it. Otherwise one catalog read, not the whole making again on every deploy and start of the service.
  if (
    appConfig.database &&
    runtime?.database_name &&
    !(await appDatabaseExists(deps.pool, runtime.database_name).catch(() => false))
  ) {
    const made = await createAppDatabase(
      deps.pool,
      runtime.database_name,
      secretBox.open(runtime.database_password_sealed!),
    ).catch((error: unknown) => {
      throw new RevisionFailure(
        'DEPLOY_FAILED',
        'database_unavailable',
        `The deployment's database could not be made (${error instanceof Error ? error.message : String(error)}). ` +
          `With DATABASE_URL the service's role needs CREATEDB and CREATEROLE; or set "database": ` +
          `false in the app config.`,
      );
    });
    if (made.created)
      await deps.reports.reportFact({
        deploymentId,
        workspaceId: deployment.workspace_id,
        type: 'deployment.database_created',
        data: { database: made.name },
      });
  }
  if (!runtime?.agent_credential_sealed) {
    const { value: credential, hash: credentialHash, prefix: credentialPrefix } = newCredential('agent');
    await deps.reports.keepAgentCredential(deploymentId, deployment.workspace_id, {
      hash: credentialHash,
      prefix: credentialPrefix,
      sealed: secretBox.seal(credential),
    });
    runtime = await getDeploymentRuntime(db, deploymentId);
  }
  const databaseUrl =
    appConfig.database && runtime?.database_name && runtime.role_name && runtime.database_password_sealed
      ? appDatabaseUrl(deps.databaseUrl, {
          name: runtime.database_name,
          role: runtime.role_name,
          password: secretBox.open(runtime.database_password_sealed),
        })
      : null;
  return { databaseUrl, agentCredential: secretBox.open(runtime!.agent_credential_sealed!) };
}
