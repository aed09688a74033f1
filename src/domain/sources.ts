/**
 * What each deployment source needs and allows, as one table (docs/api.md, "Sources"), and the
 * functions that check a source config or a source revision config against it.
 * Pure: no I/O. Checks that need the database (a listener or an integration of the workspace) are done
 * by the caller with the names this module returns.
 */
import { AppError, ValidationError } from '../errors.ts';
import type { ResourceSpec } from './resource-spec.ts';

export const SOURCES = ['codehost', 'external_container', 'internal_container', 'internal_source'] as const;
export type Source = (typeof SOURCES)[number];

/** Sources a patch may name in `revision_source`. */
export const REVISION_SOURCES = ['codehost', 'internal_container', 'internal_source'] as const;
export type RevisionSource = (typeof REVISION_SOURCES)[number];

export const DEPLOYMENT_TYPES = ['dev_free', 'dev', 'prod'] as const;
export type DeploymentType = (typeof DEPLOYMENT_TYPES)[number];
export const DEFAULT_DEPLOYMENT_TYPE: DeploymentType = 'dev';

export interface ListenerConfig {
  k8s_namespace?: string | null;
}

export interface SourceConfig {
  integration_id?: string | null;
  repo_url?: string | null;
  deployment_type?: DeploymentType | null;
  build_on_push?: boolean | null;
  custom_url?: string | null;
  resource_spec?: ResourceSpec | null;
  listener_id?: string | null;
  listener_config?: ListenerConfig | null;
  install_command?: string | null;
  build_command?: string | null;
}

export interface SourceRevisionConfig {
  repo_ref?: string | null;
  framework_config_path?: string | null;
  image_uri?: string | null;
  source_tarball_path?: string | null;
  repo_commit_sha?: string | null;
}

export type SourceConfigField = keyof SourceConfig;
export type RevisionField = Exclude<keyof SourceRevisionConfig, 'repo_commit_sha'>;

export const SOURCE_CONFIG_FIELDS: readonly SourceConfigField[] = [
  'integration_id',
  'repo_url',
  'deployment_type',
  'build_on_push',
  'custom_url',
  'resource_spec',
  'listener_id',
  'listener_config',
  'install_command',
  'build_command',
];
export const REVISION_FIELDS: readonly RevisionField[] = [
  'repo_ref',
  'framework_config_path',
  'image_uri',
  'source_tarball_path',
];

/** Fields of source_config fixed at creation (docs/lifecycle.md). */
export const IMMUTABLE_CONFIG_FIELDS: readonly SourceConfigField[] = [
  'integration_id',
  'repo_url',
  'deployment_type',
  'listener_id',
  'listener_config',
];

interface SourceRule {
  /** `service`: the service's own data plane ("cloud-hosted"); `listener`: a registered cluster. */
  readonly runsOn: 'service' | 'listener';
  readonly configRequired: readonly SourceConfigField[];
  /** Fields the user may set besides the required ones. */
  readonly configOptional: readonly SourceConfigField[];
  /** Every revision of this source needs all of these. */
  readonly revisionFields: readonly RevisionField[];
  /** Whether a create must carry a usable revision, or may come without one. */
  readonly revisionAtCreate: 'required' | 'optional';
  /** Whether revisions pass through AWAITING_BUILD and BUILDING. */
  readonly builds: boolean;
  readonly secretReferences: boolean;
}

export const SOURCE_RULES: Readonly<Record<Source, SourceRule>> = {
  codehost: {
    runsOn: 'service',
    configRequired: ['integration_id', 'repo_url'],
    configOptional: ['deployment_type', 'build_on_push', 'resource_spec', 'install_command', 'build_command'],
    revisionFields: ['repo_ref', 'framework_config_path'],
    revisionAtCreate: 'required',
    builds: true,
    secretReferences: false,
  },
  internal_source: {
    runsOn: 'service',
    configRequired: [],
    configOptional: ['deployment_type', 'resource_spec', 'install_command', 'build_command'],
    revisionFields: ['source_tarball_path', 'framework_config_path'],
    revisionAtCreate: 'optional',
    builds: true,
    secretReferences: false,
  },
  internal_container: {
    runsOn: 'service',
    configRequired: [],
    configOptional: ['deployment_type', 'resource_spec'],
    revisionFields: ['image_uri'],
    revisionAtCreate: 'optional',
    builds: false,
    secretReferences: false,
  },
  external_container: {
    runsOn: 'listener',
    configRequired: ['listener_id'],
    configOptional: ['deployment_type', 'listener_config', 'resource_spec', 'custom_url'],
    revisionFields: ['image_uri'],
    revisionAtCreate: 'required',
    builds: false,
    secretReferences: true,
  },
};

const given = (value: unknown): boolean => value !== undefined && value !== null;

/** Drops null and absent fields, so that stored configs only hold what is set. */
export function compact<T extends object>(value: T | null | undefined): Partial<T> {
  const out: Partial<T> = {};
  if (!value) return out;
  for (const [key, field] of Object.entries(value) as [keyof T, T[keyof T]][]) {
    if (given(field)) out[key] = field;
  }
  return out;
}

/**
 * `custom_url`: on the service's own data plane the service sets it (the stable URL); on a listener's
 * cluster only the user knows where their ingress exposes the app, so they may set it, as an http(s) URL.
 */
export function checkCustomUrl(source: Source, value: unknown): void {
  if (SOURCE_RULES[source].runsOn !== 'listener') {
    throw new AppError('field_not_allowed', 'source_config.custom_url is set by the service and cannot be given.');
  }
  let url: URL | null;
  try {
    url = typeof value === 'string' && value.length <= 2048 ? new URL(value) : null;
  } catch {
    url = null;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.username || url.password) {
    throw new AppError(
      'invalid_request',
      'source_config.custom_url must be an http(s) URL without credentials, at most 2048 characters',
    );
  }
}

/**
 * Checks the source_config of a create: no field of another source, every required one present.
 * Returns the compacted config with the default deployment type.
 */
export function checkSourceConfig(source: Source, config: SourceConfig): SourceConfig {
  const rule = SOURCE_RULES[source];
  const set = compact(config);
  if (given(set.custom_url)) checkCustomUrl(source, set.custom_url);
  for (const field of Object.keys(set) as SourceConfigField[]) {
    if (!rule.configRequired.includes(field) && !rule.configOptional.includes(field)) {
      throw new AppError('field_not_allowed', `source_config.${field} is not allowed for source ${source}`);
    }
  }
  for (const field of rule.configRequired) {
    if (!given(set[field]))
      throw new AppError('field_required', `source_config.${field} is required for source ${source}`);
  }
  return { ...set, deployment_type: set.deployment_type ?? DEFAULT_DEPLOYMENT_TYPE };
}

/** True when any revision field is set (repo_commit_sha is response-only and ignored). */
export function hasRevisionFields(config: SourceRevisionConfig | null | undefined): boolean {
  return REVISION_FIELDS.some((field) => given(config?.[field]));
}

/** Checks a complete revision config for `source`: its fields all present, no field of another source. */
export function checkRevisionConfig(source: Source, config: SourceRevisionConfig): SourceRevisionConfig {
  const rule = SOURCE_RULES[source];
  const out: SourceRevisionConfig = {};
  for (const field of REVISION_FIELDS) {
    const value = config[field];
    if (!given(value)) continue;
    if (!rule.revisionFields.includes(field)) {
      throw new AppError('field_not_allowed', `source_revision_config.${field} is not allowed for source ${source}`);
    }
    out[field] = value;
  }
  for (const field of rule.revisionFields) {
    if (!given(out[field]))
      throw new AppError('field_required', `source_revision_config.${field} is required for source ${source}`);
  }
  if (given(config.repo_commit_sha) && source === 'codehost') out.repo_commit_sha = config.repo_commit_sha;
  return out;
}

/** A push-tracking deployment must follow a branch: a tag never moves. */
export function checkBuildOnPush(config: SourceConfig, revision: SourceRevisionConfig | null): void {
  if (config.build_on_push && revision?.repo_ref?.startsWith('refs/tags/')) {
    throw new AppError(
      'invalid_request',
      'source_config.build_on_push cannot be used with a tag in source_revision_config.repo_ref',
    );
  }
}

/**
 * The image version a deployment reports: the tag or digest of a container image, when the revision
 * names one. Built sources get theirs from the build.
 */
export function imageVersionOf(revision: SourceRevisionConfig | null): string | null {
  const uri = revision?.image_uri;
  if (!uri) return null;
  const at = uri.lastIndexOf('@');
  if (at >= 0) return uri.slice(at + 1);
  const colon = uri.lastIndexOf(':');
  return colon > uri.lastIndexOf('/') ? uri.slice(colon + 1) : 'latest';
}

/** LangChain's `langgraph deploy` names `framework_config_path` this way in the source_revision_config it sends. */
const FRAMEWORK_CONFIG_PATH_ALIAS = 'langgraph_config_path';

/**
 * A request's source_revision_config with `langgraph_config_path` read as framework_config_path (answers
 * only ever show framework_config_path). Both given with different values is a 422: which one was meant
 * cannot be guessed. Anything that is not an object is returned as it is, for the schema to judge.
 */
export function applyConfigPathAlias(config: unknown): unknown {
  if (
    config === null ||
    typeof config !== 'object' ||
    Array.isArray(config) ||
    !(FRAMEWORK_CONFIG_PATH_ALIAS in config)
  )
    return config;
  const { [FRAMEWORK_CONFIG_PATH_ALIAS]: alias, ...rest } = config as Record<string, unknown>;
  if (alias === null || alias === undefined) return rest;
  const named = rest.framework_config_path;
  if (named !== null && named !== undefined && named !== alias) {
    throw new ValidationError([
      {
        type: 'value_error',
        loc: ['body', 'source_revision_config', FRAMEWORK_CONFIG_PATH_ALIAS],
        msg: `Value error, ${FRAMEWORK_CONFIG_PATH_ALIAS} is another name for framework_config_path; both were given, with different values: send one`,
        input: alias,
      },
    ]);
  }
  return { ...rest, framework_config_path: alias };
}
