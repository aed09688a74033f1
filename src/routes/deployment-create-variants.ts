/**
 * What the OpenAPI document says of a deployment create body, per source: a `oneOf` discriminated by
 * `source`, each variant with the fields that source requires (`source_config.integration_id`, a
 * complete `source_revision_config`...) and only the fields it takes (issue 34, item 8:
 * fuzzers and generated clients sent bodies the document allowed and the service refused by rules it
 * did not state). Built from the source rules themselves (src/domain/sources.ts), so the two cannot
 * drift. Documentation only: requests are still validated by the flat schema, so that a missing field
 * keeps the contract's 400 naming it (`source_revision_config.repo_ref is required for source codehost`)
 * rather than a 422 of the whole oneOf.
 */
import { IMMUTABLE_CONFIG_FIELDS, REVISION_FIELDS, SOURCES, SOURCE_RULES, type Source } from '../domain/sources.ts';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const plain = (schema: unknown): JsonObject => JSON.parse(JSON.stringify(schema)) as JsonObject;

/** The schema without its `null`: `type: ['object', 'null']` becomes `type: 'object'`. */
function notNull(schema: JsonObject): JsonObject {
  const type = schema.type;
  if (!Array.isArray(type)) return schema;
  const out: JsonObject = { ...schema, type: type.find((t) => t !== 'null') ?? null };
  if (Array.isArray(schema.enum)) out.enum = schema.enum.filter((v) => v !== null);
  return out;
}

const properties = (schema: JsonObject): JsonObject => (schema.properties ?? {}) as JsonObject;

/** source_config for `source`: its fields, the required ones present. */
function sourceConfigOf(source: Source, sourceConfig: JsonObject): JsonObject {
  const rule = SOURCE_RULES[source];
  const allowed = new Set<string>([...rule.configRequired, ...rule.configOptional]);
  const props: JsonObject = {};
  for (const [name, schema] of Object.entries(properties(sourceConfig)))
    if (allowed.has(name))
      props[name] = rule.configRequired.includes(name as never) ? notNull(schema as JsonObject) : schema;
  const { title: _title, ...rest } = sourceConfig;
  const out: JsonObject = { ...rest, properties: props };
  if (rule.configRequired.length > 0) out.required = [...rule.configRequired];
  return rule.configRequired.length > 0 ? notNull(out) : out;
}

/**
 * source_revision_config for `source`: `complete`, every field a revision of it needs
 * (framework_config_path also as `langgraph_config_path`, LangChain's name), else none of them (a
 * create without a revision).
 */
function revisionConfigOf(source: Source, revisionConfig: JsonObject, complete: boolean): JsonObject {
  const needed = SOURCE_RULES[source].revisionFields;
  const props: JsonObject = {};
  for (const [name, schema] of Object.entries(properties(revisionConfig))) {
    const field = name === 'langgraph_config_path' ? 'framework_config_path' : name;
    if (!REVISION_FIELDS.includes(field as never)) props[name] = schema;
    else if (complete && needed.includes(field as never)) props[name] = notNull(schema as JsonObject);
  }
  const { title: _title, ...rest } = revisionConfig;
  const out: JsonObject = { ...notNull(rest), properties: props };
  if (!complete) return out;
  // framework_config_path may come as langgraph_config_path (LangChain's name): required is one or the
  // other, which client generators cannot read from an anyOf of `required` lists, so it is said in words.
  const required = needed.filter((f) => f !== 'framework_config_path');
  return {
    ...out,
    required,
    ...(needed.includes('framework_config_path')
      ? {
          description: `Every field a revision of ${source} needs; framework_config_path (or langgraph_config_path) is required too.`,
        }
      : {}),
  };
}

const VARIANT_TITLES: Readonly<Record<Source, string>> = {
  codehost: 'DeploymentCreateCodehost',
  internal_source: 'DeploymentCreateInternalSource',
  internal_container: 'DeploymentCreateInternalContainer',
  external_container: 'DeploymentCreateExternalContainer',
};

/** The create body `base` (the flat schema requests are validated with) as a oneOf by source. */
export function createBodyBySource(base: unknown): JsonObject {
  const flat = plain(base);
  const props = properties(flat);
  const variants = SOURCES.map((source): JsonObject => {
    const rule = SOURCE_RULES[source];
    const sourceConfig = sourceConfigOf(source, notNull(props.source_config as JsonObject));
    const revision = notNull(props.source_revision_config as JsonObject);
    const complete = revisionConfigOf(source, revision, true);
    const variantProps: JsonObject = {
      ...props,
      source: { type: 'string', enum: [source], const: source },
      source_config: rule.configRequired.length > 0 ? sourceConfig : { anyOf: [sourceConfig, { type: 'null' }] },
      source_revision_config:
        rule.revisionAtCreate === 'required'
          ? complete
          : {
              anyOf: [complete, revisionConfigOf(source, revision, false), { type: 'null' }],
              description:
                'Complete (a first revision is made), or without its fields (none is made yet: upload a source and patch it in).',
            },
    };
    if (!rule.secretReferences) delete variantProps.secret_references;
    const required = ['name', 'source'];
    if (rule.configRequired.length > 0) required.push('source_config');
    if (rule.revisionAtCreate === 'required') required.push('source_revision_config');
    return { ...flat, title: VARIANT_TITLES[source], properties: variantProps, required };
  });
  return {
    title: flat.title ?? 'DeploymentCreate',
    description:
      'One shape per source, with the fields each source takes and those it requires: a required field missing, or a field of another source given (not null), is 400 naming it.',
    oneOf: variants,
  };
}

/**
 * What a PATCH of a deployment takes, by the stored deployment's source, in words: a schema cannot see
 * the stored source, so the operation's description says it (issue 34, item 8), as a table made from
 * the same source rules the service applies (src/domain/sources.ts, src/domain/deployment-plan.ts).
 */
export function patchRulesBySource(): string {
  const list = (fields: readonly string[]) => (fields.length > 0 ? fields.join(', ') : '(none)');
  const rows = SOURCES.map((source) => {
    const rule = SOURCE_RULES[source];
    const config = [...rule.configRequired, ...rule.configOptional];
    return `| ${source} | ${list(config)} | ${list(rule.revisionFields)} | ${rule.secretReferences ? 'yes' : 'no'} |`;
  });
  return [
    "The fields a patch may give depend on the deployment's source, which a schema cannot see:",
    '',
    '| source | source_config | source_revision_config | secret_references |',
    '|---|---|---|---|',
    ...rows,
    '',
    'Any other field of source_config or source_revision_config given (not null) is 400 `field_not_allowed` naming it ' +
      '(`source_config.listener_id is not allowed for source internal_container`). ' +
      `${IMMUTABLE_CONFIG_FIELDS.map((f) => `source_config.${f}`).join(', ')}, name and source take only their current value ` +
      '(another is 400 `field_immutable`: `source_config.deployment_type cannot be changed after creation`). ' +
      'A source_revision_config keeps the fields it leaves out from the latest revision of the same source; a revision missing one is 400 `field_required` ' +
      '(`source_revision_config.image_uri is required for source internal_container`). ' +
      'revision_source may name internal_source or internal_container (never codehost) for a deployment of another source, except an external_container one, and then needs a source_revision_config (400 otherwise).',
  ].join('\n');
}
