/**
 * The desired state of listener protocol version 1, as the agent reads it. `parseDesiredState`
 * checks the shape of every field the agent relies on, so that a service speaking another protocol
 * version (or a proxy answering in its place) is refused as a whole instead of half-applied.
 * The resource spec stays a plain object here: `readResourceSpec` reads it field by field.
 *
 * A deployment's `resource_spec` and `secret_references` are its current values, which apply in place
 * to the revision that runs; a service of before sent them only in the revision (its snapshot). The
 * agent reads them from the deployment when they are there, and keeps them on the revision it builds.
 */

export const PROTOCOL_VERSION = 1;

export const REPORTED_STATUSES = ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED', 'DEPLOY_FAILED'] as const;
export type ReportedStatus = (typeof REPORTED_STATUSES)[number];

export interface DesiredSecret {
  readonly name: string;
  readonly value: string;
}

export interface DesiredSecretReference {
  readonly name: string;
  readonly secret_name: string;
  readonly secret_key: string;
}

export interface DesiredRevision {
  readonly id: string;
  /** The revision's status as the service last saw it. */
  readonly status: string;
  readonly image_uri: string | null;
  readonly secrets: readonly DesiredSecret[];
  /** The deployment's current values (see above), else the revision's own. */
  readonly secret_references: readonly DesiredSecretReference[] | null;
  readonly resource_spec: Readonly<Record<string, unknown>> | null;
}

export interface DesiredDeployment {
  readonly deployment_id: string;
  readonly name: string;
  /** null: the deployment names none, and the agent's first namespace applies. */
  readonly namespace: string | null;
  readonly delete: boolean;
  readonly custom_url: string | null;
  readonly revision: DesiredRevision | null;
}

export interface DesiredState {
  readonly protocol: typeof PROTOCOL_VERSION;
  readonly listener_id: string;
  readonly deployments: readonly DesiredDeployment[];
}

export class ProtocolError extends Error {
  override name = 'ProtocolError';
}

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

function field<T>(obj: Json, key: string, where: string, check: (v: unknown) => v is T, what: string): T {
  const value = obj[key];
  if (!check(value)) throw new ProtocolError(`desired state: ${where}.${key} must be ${what}`);
  return value;
}

const isString = (v: unknown): v is string => typeof v === 'string';
const isBoolean = (v: unknown): v is boolean => typeof v === 'boolean';
const isStringOrNull = (v: unknown): v is string | null => v === null || typeof v === 'string';
const isArray = (v: unknown): v is unknown[] => Array.isArray(v);
const isObjectOrNull = (v: unknown): v is Json | null => v === null || isObject(v);
const optionalStringOrNull = (obj: Json, key: string, where: string): string | null =>
  obj[key] === undefined ? null : field(obj, key, where, isStringOrNull, 'a string or null');

/** The in-place fields of `obj`; undefined for a field it does not carry. */
function parseInPlace(
  obj: Json,
  where: string,
): { secret_references?: DesiredSecretReference[] | null; resource_spec?: Json | null } {
  const references =
    obj.secret_references === undefined
      ? undefined
      : field(
          obj,
          'secret_references',
          where,
          (v): v is unknown[] | null => v === null || Array.isArray(v),
          'an array or null',
        );
  return {
    ...(references === undefined
      ? {}
      : {
          secret_references:
            references === null
              ? null
              : references.map((r, i) => {
                  const at = `${where}.secret_references[${i}]`;
                  if (!isObject(r)) throw new ProtocolError(`desired state: ${at} must be an object`);
                  return {
                    name: field(r, 'name', at, isString, 'a string'),
                    secret_name: field(r, 'secret_name', at, isString, 'a string'),
                    secret_key: field(r, 'secret_key', at, isString, 'a string'),
                  };
                }),
        }),
    ...(obj.resource_spec === undefined
      ? {}
      : { resource_spec: field(obj, 'resource_spec', where, isObjectOrNull, 'an object or null') }),
  };
}

function parseRevision(
  raw: unknown,
  where: string,
  deployment: ReturnType<typeof parseInPlace>,
): DesiredRevision | null {
  if (raw === null || raw === undefined) return null;
  if (!isObject(raw)) throw new ProtocolError(`desired state: ${where} must be an object or null`);
  const secrets = field(raw, 'secrets', where, isArray, 'an array').map((s, i) => {
    if (!isObject(s)) throw new ProtocolError(`desired state: ${where}.secrets[${i}] must be an object`);
    return {
      name: field(s, 'name', `${where}.secrets[${i}]`, isString, 'a string'),
      value: field(s, 'value', `${where}.secrets[${i}]`, isString, 'a string'),
    };
  });
  const own = parseInPlace(raw, where);
  return {
    id: field(raw, 'id', where, isString, 'a string'),
    status: field(raw, 'status', where, isString, 'a string'),
    image_uri: optionalStringOrNull(raw, 'image_uri', where),
    secrets,
    secret_references:
      deployment.secret_references !== undefined ? deployment.secret_references : (own.secret_references ?? null),
    resource_spec: deployment.resource_spec !== undefined ? deployment.resource_spec : (own.resource_spec ?? null),
  };
}

export function parseDesiredState(body: unknown, listenerId: string): DesiredState {
  if (!isObject(body)) throw new ProtocolError('desired state: the body must be a JSON object');
  if (body.protocol !== PROTOCOL_VERSION) {
    throw new ProtocolError(
      `desired state: protocol ${JSON.stringify(body.protocol)} is not supported; this agent speaks protocol ${PROTOCOL_VERSION} (upgrade the agent or the service)`,
    );
  }
  const id = field(body, 'listener_id', 'body', isString, 'a string');
  if (id.toLowerCase() !== listenerId.toLowerCase())
    throw new ProtocolError(`desired state: it is for listener ${id}, not ${listenerId}`);
  const deployments = field(body, 'deployments', 'body', isArray, 'an array').map((raw, i): DesiredDeployment => {
    const where = `deployments[${i}]`;
    if (!isObject(raw)) throw new ProtocolError(`desired state: ${where} must be an object`);
    return {
      deployment_id: field(raw, 'deployment_id', where, isString, 'a string'),
      name: field(raw, 'name', where, isString, 'a string'),
      namespace: optionalStringOrNull(raw, 'namespace', where),
      delete: field(raw, 'delete', where, isBoolean, 'a boolean'),
      custom_url: optionalStringOrNull(raw, 'custom_url', where),
      revision: parseRevision(raw.revision, `${where}.revision`, parseInPlace(raw, where)),
    };
  });
  return { protocol: PROTOCOL_VERSION, listener_id: id, deployments };
}
