/**
 * What the fake API server needs of server-side apply and of the API server's schema, as plain
 * functions over JSON:
 * - field sets: which leaf fields an applied configuration sets (lists are atomic here, which is enough
 *   for the objects the agent writes), and the fieldsV1 form `metadata.managedFields` shows them in;
 * - what a manager's apply does to the live object: a field it set before and leaves out now is removed
 *   when no other manager owns it (a Deployment's `replicas` then defaults to 1: issue 25's drop of an
 *   autoscaled app to one replica), the fields it sets are merged in;
 * - the first field of an object its type does not declare, from the schema @kubernetes/client-node was
 *   generated from (the model classes' attribute maps), with the path the API server names it by.
 */
import { isDeepStrictEqual } from 'node:util';
import * as k8s from '@kubernetes/client-node';

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/** A field path, as JSON of its keys: a member of a field set. */
export type FieldPath = string;

/** Metadata fields the API server sets itself; never part of a manager's field set. */
const SERVER_METADATA = new Set([
  'name',
  'namespace',
  'uid',
  'resourceVersion',
  'generation',
  'creationTimestamp',
  'deletionTimestamp',
  'managedFields',
]);

/** The part of an object managers own: metadata's labels and annotations, everything but status. */
function ownable(object: Json): Json {
  const { apiVersion: _a, kind: _k, status: _s, metadata, ...rest } = object;
  const meta = isObject(metadata)
    ? Object.fromEntries(Object.entries(metadata).filter(([k]) => !SERVER_METADATA.has(k)))
    : {};
  return Object.keys(meta).length > 0 ? { ...rest, metadata: meta } : rest;
}

/** The leaf fields `object` sets (a list, a scalar or an empty object is a leaf). */
export function fieldSet(object: Json): Set<FieldPath> {
  const out = new Set<FieldPath>();
  const walk = (value: unknown, path: string[]) => {
    if (isObject(value) && Object.keys(value).length > 0) {
      for (const [k, v] of Object.entries(value)) if (v !== undefined) walk(v, [...path, k]);
    } else out.add(JSON.stringify(path));
  };
  walk(ownable(object), []);
  return out;
}

function getAt(object: Json, path: readonly string[]): unknown {
  let at: unknown = object;
  for (const key of path) {
    if (!isObject(at)) return undefined;
    at = at[key];
  }
  return at;
}

function deleteAt(object: Json, path: readonly string[]): void {
  const parents: Json[] = [];
  let at: Json = object;
  for (const key of path.slice(0, -1)) {
    const next = at[key];
    if (!isObject(next)) return;
    parents.push(at);
    at = next;
  }
  delete at[path[path.length - 1]!];
  // An object left empty by the removal goes too, as it would from the applied configuration.
  for (let i = path.length - 2; i >= 0; i -= 1) {
    const parent = parents[i]!;
    const child = parent[path[i]!];
    if (isObject(child) && Object.keys(child).length === 0) delete parent[path[i]!];
    else break;
  }
}

/** `applied` merged into `live`: objects recursively, anything else (lists included) replaced. */
function merge(live: unknown, applied: unknown): unknown {
  if (!isObject(live) || !isObject(applied)) return structuredClone(applied);
  const out: Json = { ...live };
  for (const [k, v] of Object.entries(applied)) if (v !== undefined) out[k] = merge(live[k], v);
  return out;
}

/** One manager's fields of an object. */
export interface Ownership {
  readonly operation: 'Apply' | 'Update';
  readonly fields: Set<FieldPath>;
}

export type Owners = Map<string, Ownership>;

/** A field another manager owns with another value than the applied one. */
export interface Conflict {
  readonly manager: string;
  readonly field: string;
}

const dotted = (path: FieldPath): string => `.${(JSON.parse(path) as string[]).join('.')}`;

/**
 * Server-side apply of `applied` by `manager` onto `live` (undefined: a create): the object after it,
 * and the owners after it; or the conflicts, when the apply is not forced.
 */
export function serverSideApply(
  live: Json | undefined,
  applied: Json,
  owners: Owners,
  manager: string,
  force: boolean,
): { object: Json; owners: Owners } | { conflicts: Conflict[] } {
  const fields = fieldSet(applied);
  const next: Owners = new Map([...owners].map(([m, o]) => [m, { operation: o.operation, fields: new Set(o.fields) }]));
  const conflicts: Conflict[] = [];
  for (const [other, ownership] of next) {
    if (other === manager) continue;
    for (const field of fields) {
      if (!ownership.fields.has(field)) continue;
      const path = JSON.parse(field) as string[];
      if (live !== undefined && isDeepStrictEqual(getAt(ownable(live), path), getAt(ownable(applied), path))) continue;
      if (force) ownership.fields.delete(field);
      else conflicts.push({ manager: other, field: dotted(field) });
    }
  }
  if (conflicts.length > 0) return { conflicts };
  const object: Json = structuredClone(live ?? {});
  const before = next.get(manager)?.fields ?? new Set<FieldPath>();
  for (const field of before) {
    if (fields.has(field)) continue;
    const path = JSON.parse(field) as string[];
    const ownedElsewhere = [...next].some(
      ([m, o]) => m !== manager && [...o.fields].some((f) => f === field || f.startsWith(field.slice(0, -1) + ',')),
    );
    if (!ownedElsewhere) deleteAt(object, path);
  }
  next.set(manager, { operation: 'Apply', fields });
  for (const [m, o] of next) if (o.fields.size === 0) next.delete(m);
  return { object: merge(object, applied) as Json, owners: next };
}

/** An Update (a controller's write, `kubectl scale`): the fields are this manager's, whoever had them. */
export function takeOver(owners: Owners, manager: string, changed: readonly string[][]): Owners {
  const fields = changed.map((p) => JSON.stringify(p));
  const next: Owners = new Map();
  for (const [m, o] of owners) {
    const kept = new Set([...o.fields].filter((f) => !fields.includes(f)));
    if (kept.size > 0) next.set(m, { operation: o.operation, fields: kept });
  }
  const mine = next.get(manager)?.fields ?? new Set<FieldPath>();
  for (const f of fields) mine.add(f);
  next.set(manager, { operation: 'Update', fields: mine });
  return next;
}

/** The owners as `metadata.managedFields` shows them (fieldsV1: `f:<field>` nested, `{}` at each leaf). */
export function managedFieldsOf(owners: Owners, apiVersion: string): Json[] {
  return [...owners].map(([manager, o]) => {
    const fieldsV1: Json = {};
    for (const field of o.fields) {
      let at = fieldsV1;
      for (const key of JSON.parse(field) as string[]) {
        const k = `f:${key}`;
        at[k] = isObject(at[k]) ? at[k] : {};
        at = at[k] as Json;
      }
    }
    return {
      manager,
      operation: o.operation,
      apiVersion,
      time: new Date().toISOString(),
      fieldsType: 'FieldsV1',
      fieldsV1,
    };
  });
}

// ----- the schema --------------------------------------------------------------------------------

interface Attribute {
  readonly name: string;
  readonly baseName: string;
  readonly type: string;
}

const MODELS = k8s as unknown as Record<string, { getAttributeTypeMap?: () => Attribute[] } | undefined>;

const ROOT_TYPES: Readonly<Record<string, string>> = {
  'apps/v1/Deployment': 'V1Deployment',
  'apps/v1/StatefulSet': 'V1StatefulSet',
  'autoscaling/v2/HorizontalPodAutoscaler': 'V2HorizontalPodAutoscaler',
  'v1/Service': 'V1Service',
  'v1/Secret': 'V1Secret',
  'v1/Pod': 'V1Pod',
  'v1/PersistentVolumeClaim': 'V1PersistentVolumeClaim',
};

/**
 * The first field of `object` its schema does not declare, as the API server names it
 * (`.spec.template.spec.volumes[0].emptyDir.sizelimit`); null when every field is declared. Field names
 * are case-sensitive, as on the API server: `runAsNonroot` is not `runAsNonRoot`.
 */
export function undeclaredField(object: Json): string | null {
  const root = ROOT_TYPES[`${String(object.apiVersion)}/${String(object.kind)}`];
  if (root === undefined) return null;
  const walk = (value: unknown, type: string, path: string): string | null => {
    if (value === null || value === undefined) return null;
    const list = /^Array<(.+)>$/.exec(type);
    if (list) {
      if (!Array.isArray(value)) return null;
      for (let i = 0; i < value.length; i += 1) {
        const found = walk(value[i], list[1]!, `${path}[${i}]`);
        if (found !== null) return found;
      }
      return null;
    }
    const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
    if (map) {
      if (!isObject(value)) return null;
      for (const [k, v] of Object.entries(value)) {
        const found = walk(v, map[1]!, `${path}.${k}`);
        if (found !== null) return found;
      }
      return null;
    }
    const attributes = MODELS[type]?.getAttributeTypeMap?.();
    if (attributes === undefined || !isObject(value)) return null;
    for (const [k, v] of Object.entries(value)) {
      const attribute = attributes.find((a) => a.baseName === k);
      if (attribute === undefined) return `${path}.${k}`;
      const found = walk(v, attribute.type, `${path}.${k}`);
      if (found !== null) return found;
    }
    return null;
  };
  return walk(object, root, '');
}

/** `object` without the field at `path` (as `undeclaredField` names it). */
export function withoutField(object: Json, path: string): Json {
  const keys = path
    .slice(1)
    .replace(/\[(\d+)\]/g, '.$1')
    .split('.');
  const copy = structuredClone(object);
  let at: unknown = copy;
  for (const key of keys.slice(0, -1)) at = (at as Record<string, unknown>)[key];
  delete (at as Record<string, unknown>)[keys[keys.length - 1]!];
  return copy;
}
