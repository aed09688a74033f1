/**
 * A patch of a deployment (src/service/deployments.ts, `patch`), inside its transaction: the domain's
 * plan of the change, the resource limits of a changed spec, the secrets merged and sealed, and what
 * the change writes: the deployment's new fields with their event, and a revision when what runs
 * changes (new secrets need one too: the latest revision again, with them).
 */
import type { Transaction } from 'kysely';
import type { SecretBox } from '../crypto/secret-box.ts';
import {
  mergeSecrets,
  planPatch,
  type PatchInput,
  type Secret,
  type SecretReference,
} from '../domain/deployment-plan.ts';
import { notFound } from '../errors.ts';
import { lockDeployment, updateDeployment } from '../store/deployments.ts';
import { recordEvents } from '../store/events.ts';
import { lockRevision } from '../store/revisions.ts';
import type { Database, Db, StoredSecret } from '../store/schema.ts';
import { addRevision, checkRevisionReferences, snapshotOf } from './deployment-revisions.ts';
import type { WriteConditions } from './preconditions.ts';
import { checkResourceLimits, type ResourcePolicy } from './resource-quotas.ts';

export interface PatchDeploymentInput extends PatchInput {
  secrets?: Secret[] | null;
}

export interface PatchOptions extends WriteConditions {
  /** What the revision.created event gives as its cause; default `{ cause: 'patch' }`. */
  cause?: Record<string, unknown>;
  /** Run inside this transaction (a webhook delivery recorded together with its revisions). */
  tx?: Transaction<Database>;
}

/** Compares field by field (jsonb does not keep the order of an object's keys). */
function sameSecretReferences(a: SecretReference[] | null, b: SecretReference[] | null): boolean {
  const flat = (list: SecretReference[] | null) =>
    JSON.stringify((list ?? []).map((r) => [r.name, r.secret_name, r.secret_key]));
  return (a === null) === (b === null) && flat(a) === flat(b);
}

/** Two resource specs alike field by field (jsonb does not keep the order of an object's keys). */
function sameSpec(a: Record<string, unknown> | null | undefined, b: Record<string, unknown> | null | undefined) {
  const flat = (spec: Record<string, unknown> | null | undefined) =>
    JSON.stringify(Object.entries(spec ?? {}).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0)));
  return flat(a) === flat(b);
}

/** Applies the patch to the deployment in `tx`; 404 when the deployment is not the workspace's. */
export async function applyPatch(
  tx: Db,
  { secretBox, resources }: { secretBox: SecretBox; resources?: ResourcePolicy },
  workspaceId: string,
  id: string,
  input: PatchDeploymentInput,
  options: PatchOptions,
): Promise<void> {
  const seal = (secrets: Secret[]): StoredSecret[] =>
    secrets.map((s) => ({ name: s.name, value: secretBox.seal(s.value) }));
  const open = (secrets: StoredSecret[]): Secret[] =>
    secrets.map((s) => ({ name: s.name, value: secretBox.open(s.value) }));
  const row = await lockDeployment(tx, workspaceId, id);
  if (!row) throw notFound('Deployment', id);
  await options.precondition?.(tx);
  const latest = row.latest_revision_id ? await lockRevision(tx, row.latest_revision_id) : undefined;
  const latestRevision = latest ? { source: latest.source, config: latest.source_revision_config } : null;
  const plan = planPatch(
    { name: row.name, source: row.source, sourceConfig: row.source_config, latestRevision },
    input,
  );
  // Only a changed spec is checked: a patch of secrets keeps working in a workspace whose quota was
  // lowered below what it uses (the data plane clamps a stored spec to the maxima).
  if (resources && !sameSpec(plan.sourceConfig.resource_spec, row.source_config.resource_spec)) {
    await checkResourceLimits(tx, resources, workspaceId, plan.sourceConfig, {
      id: row.id,
      spec: row.source_config.resource_spec ?? null,
    });
  }

  let secrets = row.secrets;
  let secretsChanged = false;
  if (input.secrets !== undefined && input.secrets !== null) {
    const merged = mergeSecrets(open(row.secrets), input.secrets);
    secretsChanged = merged.changed;
    if (merged.changed) secrets = seal(merged.secrets);
  }
  const secretReferences =
    input.secret_references !== undefined && input.secret_references !== null
      ? input.secret_references
      : row.secret_references;
  // Sent unchanged, secret_references change nothing: no update, no event.
  const secretReferencesChanged =
    input.secret_references !== undefined &&
    input.secret_references !== null &&
    !sameSecretReferences(input.secret_references, row.secret_references);

  let revision = plan.revision;
  if (!revision && secretsChanged && latestRevision) {
    // New secrets need a new revision to take effect: the latest one again, with them.
    const { repo_commit_sha: _sha, ...config } = latestRevision.config;
    revision = { source: latestRevision.source, config };
  }
  if (revision) await checkRevisionReferences(tx, workspaceId, revision);

  const changedFields = [
    ...(plan.sourceConfigChanged ? ['source_config'] : []),
    ...(secretsChanged ? ['secrets'] : []),
    ...(secretReferencesChanged ? ['secret_references'] : []),
  ];
  if (changedFields.length > 0) {
    await updateDeployment(tx, id, {
      sourceConfig: plan.sourceConfig,
      secrets,
      secretReferences,
    });
    await recordEvents(tx, [
      {
        workspaceId,
        subjectType: 'deployment',
        subjectId: id,
        deploymentId: id,
        type: 'deployment.updated',
        data: { fields: changedFields },
      },
    ]);
  }
  if (revision) {
    await addRevision(
      tx,
      row,
      revision,
      secrets,
      snapshotOf(plan.sourceConfig, secretReferences),
      input.source_revision_config ? (options.cause ?? { cause: 'patch' }) : { cause: 'secrets_changed' },
    );
  }
}
