/**
 * What a create or a patch of a deployment changes: the checked source config, whether a new revision
 * is made and with what, and the resulting secrets. Pure; the caller stores the plan in one transaction.
 */
import { AppError } from '../errors.ts';
import { checkResourceSpec } from './resource-spec.ts';
import {
  IMMUTABLE_CONFIG_FIELDS,
  SOURCE_RULES,
  checkBuildOnPush,
  checkCustomUrl,
  checkRevisionConfig,
  checkSourceConfig,
  compact,
  hasRevisionFields,
  type RevisionSource,
  type Source,
  type SourceConfig,
  type SourceConfigField,
  type SourceRevisionConfig,
} from './sources.ts';

export const MASKED_SECRET = '********';

export interface Secret {
  name: string;
  value: string;
}

export interface SecretReference {
  name: string;
  secret_name: string;
  secret_key: string;
}

export interface PlannedRevision {
  source: Source;
  config: SourceRevisionConfig;
}

export interface CreatePlan {
  sourceConfig: SourceConfig;
  revision: PlannedRevision | null;
}

export interface CreateInput {
  source: Source;
  source_config?: SourceConfig | null;
  source_revision_config?: SourceRevisionConfig | null;
  secret_references?: SecretReference[] | null;
}

export function planCreate(input: CreateInput): CreatePlan {
  const rule = SOURCE_RULES[input.source];
  const sourceConfig = checkSourceConfig(input.source, input.source_config ?? {});
  if (input.secret_references && !rule.secretReferences) {
    throw new AppError('field_not_allowed', `secret_references is not allowed for source ${input.source}`);
  }
  const wantsRevision = rule.revisionAtCreate === 'required' || hasRevisionFields(input.source_revision_config);
  const revision = wantsRevision
    ? { source: input.source, config: checkRevisionConfig(input.source, compact(input.source_revision_config)) }
    : null;
  checkBuildOnPush(sourceConfig, revision?.config ?? null);
  checkResourceSpec(sourceConfig.resource_spec);
  return { sourceConfig, revision };
}

export interface CurrentDeployment {
  name: string;
  source: Source;
  sourceConfig: SourceConfig;
  latestRevision: PlannedRevision | null;
}

export interface PatchInput {
  /** Not part of the patch body; a client that sends them must send the current value. */
  name?: unknown;
  source?: unknown;
  revision_source?: RevisionSource | null;
  source_config?: SourceConfig | null;
  source_revision_config?: SourceRevisionConfig | null;
  secret_references?: SecretReference[] | null;
}

export interface PatchPlan {
  sourceConfig: SourceConfig;
  sourceConfigChanged: boolean;
  /** A revision asked for by source_revision_config; secrets changes are decided by the caller. */
  revision: PlannedRevision | null;
}

const sameJson = (a: unknown, b: unknown): boolean => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
const normalized = (value: unknown): unknown =>
  value !== null && typeof value === 'object' && !Array.isArray(value) ? compact(value) : value;

function patchSourceConfig(current: CurrentDeployment, patch: SourceConfig): SourceConfig {
  const rule = SOURCE_RULES[current.source];
  const merged: SourceConfig = { ...current.sourceConfig };
  for (const [field, value] of Object.entries(compact(patch)) as [SourceConfigField, unknown][]) {
    const before = current.sourceConfig[field];
    if (field === 'custom_url') {
      if (!sameJson(value, before)) {
        checkCustomUrl(current.source, value);
        merged.custom_url = value as string;
      }
      continue;
    }
    if (!rule.configRequired.includes(field) && !rule.configOptional.includes(field)) {
      throw new AppError('field_not_allowed', `source_config.${field} is not allowed for source ${current.source}`);
    }
    if (IMMUTABLE_CONFIG_FIELDS.includes(field)) {
      if (!sameJson(normalized(value), normalized(before))) {
        throw new AppError('field_immutable', `source_config.${field} cannot be changed after creation`);
      }
      continue;
    }
    (merged as Record<string, unknown>)[field] = value;
  }
  return merged;
}

export function planPatch(current: CurrentDeployment, input: PatchInput): PatchPlan {
  if (input.name !== undefined && input.name !== current.name) {
    throw new AppError('field_immutable', 'name cannot be changed after creation');
  }
  if (input.source !== undefined && input.source !== current.source) {
    throw new AppError('field_immutable', 'source cannot be changed after creation');
  }
  if (input.secret_references && !SOURCE_RULES[current.source].secretReferences) {
    throw new AppError('field_not_allowed', `secret_references is not allowed for source ${current.source}`);
  }
  const revisionSource: Source = input.revision_source ?? current.source;
  if (input.revision_source && input.revision_source !== current.source) {
    if (current.source === 'external_container') {
      throw new AppError(
        'invalid_request',
        'revision_source cannot override the source of an external_container deployment',
      );
    }
    if (input.revision_source === 'codehost') {
      throw new AppError(
        'invalid_request',
        'revision_source codehost needs a codehost deployment (its integration_id and repo_url)',
      );
    }
  }

  const sourceConfig = patchSourceConfig(current, input.source_config ?? {});
  let revision: PlannedRevision | null = null;
  if (hasRevisionFields(input.source_revision_config)) {
    // Fields not given keep the latest revision's values, when that revision was of the same source.
    const base = current.latestRevision?.source === revisionSource ? current.latestRevision.config : {};
    const { repo_commit_sha: _drop, ...inherited } = base;
    const config = checkRevisionConfig(revisionSource, { ...inherited, ...compact(input.source_revision_config) });
    revision = { source: revisionSource, config };
  } else if (input.revision_source && input.revision_source !== current.latestRevision?.source) {
    throw new AppError(
      'field_required',
      `source_revision_config is required when revision_source is ${input.revision_source}`,
    );
  }
  checkBuildOnPush(sourceConfig, revision?.config ?? current.latestRevision?.config ?? null);
  checkResourceSpec(sourceConfig.resource_spec);
  return { sourceConfig, sourceConfigChanged: !sameJson(sourceConfig, current.sourceConfig), revision };
}

/**
 * Applies a given secrets list to the current (plaintext) secrets: the list replaces the whole set;
 * the masked value keeps an existing secret's value. `changed` tells whether anything differs.
 */
export function mergeSecrets(
  current: readonly Secret[],
  given: readonly Secret[],
): { secrets: Secret[]; changed: boolean } {
  const byName = new Map(current.map((s) => [s.name, s.value]));
  const seen = new Set<string>();
  const secrets = given.map((secret, index) => {
    if (seen.has(secret.name))
      throw new AppError('invalid_request', `secrets[${index}].name '${secret.name}' appears twice`);
    seen.add(secret.name);
    if (secret.value !== MASKED_SECRET) return { name: secret.name, value: secret.value };
    const kept = byName.get(secret.name);
    if (kept === undefined) {
      throw new AppError(
        'invalid_request',
        `secrets[${index}].value is the mask '${MASKED_SECRET}' but no secret '${secret.name}' exists to keep`,
      );
    }
    return { name: secret.name, value: kept };
  });
  const changed = secrets.length !== current.length || secrets.some((s) => byName.get(s.name) !== s.value);
  return { secrets, changed };
}
