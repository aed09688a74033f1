/**
 * What a deployment's source config refers to, checked when it is created or changed: the listener and
 * the namespace it runs in, the code-host integration, and the repository on the host. Each reference
 * of another workspace, or gone, is `invalid_reference`; the locks keep a listener or an integration
 * from being deleted before the deployment that refers to it is stored.
 */
import type { Kysely } from 'kysely';
import type { SourceConfig } from '../domain/sources.ts';
import { AppError } from '../errors.ts';
import { getIntegration, shareLockIntegration } from '../store/codehost-integrations.ts';
import { shareLockListener } from '../store/listeners.ts';
import type { Database, Db } from '../store/schema.ts';
import type { RepositoryChecker } from './deployments.ts';

export function sourceReferenceChecks(db: Kysely<Database>, repositories: RepositoryChecker) {
  /** Listener of the workspace and the namespace the deployment runs in (default: the listener's first). */
  async function checkListener(tx: Db, workspaceId: string, config: SourceConfig): Promise<SourceConfig> {
    if (!config.listener_id) return config;
    // A share lock: the listener cannot be deleted before this deployment is stored.
    const listener = await shareLockListener(tx, workspaceId, config.listener_id);
    if (!listener)
      throw new AppError(
        'invalid_reference',
        `source_config.listener_id: Listener ID ${config.listener_id} not found.`,
      );
    const namespaces = listener.compute_config.k8s_namespaces;
    const asked = config.listener_config?.k8s_namespace;
    if (asked && !namespaces.includes(asked)) {
      throw new AppError(
        'invalid_request',
        `source_config.listener_config.k8s_namespace '${asked}' is not one of the listener's namespaces (${namespaces.join(', ')})`,
      );
    }
    const namespace = asked ?? namespaces[0];
    return namespace ? { ...config, listener_config: { k8s_namespace: namespace } } : config;
  }

  /**
   * A codehost repo_url must name a repository the integration reaches on its host (docs/codehost.md). Asked
   * before the transaction opens, so that no transaction waits on the code host.
   */
  async function checkRepository(workspaceId: string, config: SourceConfig): Promise<void> {
    if (!config.integration_id || !config.repo_url) return;
    const integration = await getIntegration(db, workspaceId, config.integration_id);
    if (!integration)
      throw new AppError(
        'invalid_reference',
        `source_config.integration_id: Integration ID ${config.integration_id} not found.`,
      );
    const check = await repositories.checkRepositoryUrl(integration, config.repo_url);
    if (!check.ok)
      throw new AppError('invalid_reference', `source_config.repo_url '${config.repo_url}' ${check.message}.`);
  }

  async function checkIntegration(tx: Db, workspaceId: string, config: SourceConfig): Promise<void> {
    if (!config.integration_id) return;
    // A share lock: the integration cannot be deleted before this deployment is stored.
    if (!(await shareLockIntegration(tx, workspaceId, config.integration_id))) {
      throw new AppError(
        'invalid_reference',
        `source_config.integration_id: Integration ID ${config.integration_id} not found.`,
      );
    }
  }

  return { checkListener, checkRepository, checkIntegration };
}
