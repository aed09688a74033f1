/**
 * The input of a code-host integration's create and update (docs/codehost.md), checked before anything
 * connects to a host or is stored: the API URL, the credentials (a token, or a GitHub App installation),
 * the webhook secret, and the operator's allow-list of hosts. Secret fields are checked without ever
 * echoing their value.
 */
import { randomBytes } from 'node:crypto';
import { isAllowedApiUrl, notAllowedMessage } from '../codehost/allowed-urls.ts';
import type { CodeHostCredentials } from '../codehost/github-client.ts';
import { AppError, ValidationError } from '../errors.ts';

export interface CreateIntegrationInput {
  name: string;
  api_url?: string | null;
  /** The secret fields are `unknown`: the route leaves them out of its schema so that a 422 never echoes them. */
  token?: unknown;
  app_id?: string | number | null;
  private_key?: unknown;
  installation_id?: string | number | null;
  webhook_secret?: unknown;
}

export interface UpdateIntegrationInput {
  name?: string | null;
  /** Cannot change: the deployments' repo_url were checked against this host. The same value is fine. */
  api_url?: unknown;
  token?: unknown;
  app_id?: string | number | null;
  private_key?: unknown;
  installation_id?: string | number | null;
  webhook_secret?: unknown;
  /** Generate a new webhook secret, returned once. */
  rotate_webhook_secret?: boolean | null;
}

const TOKEN_MAX = 1024;
const PRIVATE_KEY_MAX = 16 * 1024;
const WEBHOOK_SECRET_MIN = 16;
const WEBHOOK_SECRET_MAX = 256;

/** A 422 item that names the field but, unlike schema errors, never echoes the value: it is a secret. */
function secretFieldError(field: string, msg: string): ValidationError {
  return new ValidationError([{ type: 'secret_invalid', loc: ['body', field], msg }]);
}

function secretString(value: unknown, field: string, min: number, max: number, noSpaces: boolean): string {
  const ok = typeof value === 'string' && value.length >= min && value.length <= max && !(noSpaces && /\s/.test(value));
  if (!ok) {
    throw secretFieldError(
      field,
      `Input should be a string of ${min} to ${max} characters${noSpaces ? ' without spaces' : ''} (the value is not shown: it is a secret)`,
    );
  }
  return value;
}

export const given = (value: unknown): boolean => value !== undefined && value !== null;

/** api_url: https (http only when allowed), no credentials, query or fragment; trailing slashes dropped. */
export function checkApiUrl(raw: string, allowInsecure: boolean): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new AppError('invalid_request', 'api_url is not a valid URL');
  }
  if (url.protocol !== 'https:' && !(allowInsecure && url.protocol === 'http:')) {
    throw new AppError(
      'invalid_request',
      allowInsecure
        ? 'api_url must be an http or https URL'
        : 'api_url must be an https URL (plain http is accepted only when the service runs with SLIPWAY_ALLOW_INSECURE_CODEHOST=1)',
    );
  }
  if (url.username !== '' || url.password !== '')
    throw new AppError(
      'invalid_request',
      'api_url must not carry credentials; give them as token or app_id, private_key and installation_id',
    );
  if (url.search !== '' || url.hash !== '')
    throw new AppError('invalid_request', 'api_url must not have a query or a fragment');
  return `${url.origin}${url.pathname}`.replace(/\/+$/, '');
}

/** Either a token, or the three fields of a GitHub App installation; never both. */
export function checkCredentials(
  input: Pick<CreateIntegrationInput, 'token' | 'app_id' | 'private_key' | 'installation_id'>,
): CodeHostCredentials {
  const appFields = (['app_id', 'private_key', 'installation_id'] as const).filter((f) => given(input[f]));
  if (given(input.token)) {
    if (appFields.length > 0) {
      throw new AppError(
        'invalid_request',
        `Give either token, or app_id, private_key and installation_id; not both (got token and ${appFields.join(', ')}).`,
      );
    }
    return { token: secretString(input.token, 'token', 1, TOKEN_MAX, true) };
  }
  if (appFields.length === 0) {
    throw new AppError(
      'field_required',
      'token is required (or, for a GitHub App, app_id, private_key and installation_id)',
    );
  }
  for (const field of ['app_id', 'private_key', 'installation_id'] as const) {
    if (!given(input[field])) throw new AppError('field_required', `${field} is required for a GitHub App integration`);
  }
  return {
    app_id: String(input.app_id),
    private_key: secretString(input.private_key, 'private_key', 1, PRIVATE_KEY_MAX, false),
    installation_id: String(input.installation_id),
  };
}

/** Which code hosts a write may make the service connect to: the operator's allow-list. */
export interface HostPolicy {
  allowedApiUrls?: readonly string[];
}

/** 400 naming the setting when `apiUrl` is off the list; no list, no limit. */
export function checkAllowedApiUrl(apiUrl: string, allowed: readonly string[] | undefined): void {
  if (allowed !== undefined && !isAllowedApiUrl(apiUrl, allowed))
    throw new AppError('invalid_request', notAllowedMessage(apiUrl));
}

/** An update may repeat the integration's api_url but not change it: its deployments' repo_url were checked against it. */
export function checkApiUrlUnchanged(input: UpdateIntegrationInput, apiUrl: string): void {
  if (given(input.api_url)) {
    const asked = typeof input.api_url === 'string' ? checkApiUrl(input.api_url, true) : null;
    if (asked !== apiUrl)
      throw new AppError(
        'field_immutable',
        'api_url cannot be changed after creation; create another integration for another host',
      );
  }
}

/** A new integration's webhook secret: the one given, or a generated one. */
export function webhookSecretOfNew(input: CreateIntegrationInput): string {
  return given(input.webhook_secret)
    ? secretString(input.webhook_secret, 'webhook_secret', WEBHOOK_SECRET_MIN, WEBHOOK_SECRET_MAX, false)
    : randomBytes(32).toString('hex');
}

/** An update's new webhook secret: the one given, or a generated one on rotate_webhook_secret; null for none. */
export function newWebhookSecret(input: UpdateIntegrationInput): string | null {
  if (given(input.webhook_secret) && input.rotate_webhook_secret === true) {
    throw new AppError('invalid_request', 'Give either webhook_secret or rotate_webhook_secret, not both.');
  }
  let webhookSecret: string | null = null;
  if (given(input.webhook_secret))
    webhookSecret = secretString(input.webhook_secret, 'webhook_secret', WEBHOOK_SECRET_MIN, WEBHOOK_SECRET_MAX, false);
  if (input.rotate_webhook_secret === true) webhookSecret = randomBytes(32).toString('hex');
  return webhookSecret;
}
