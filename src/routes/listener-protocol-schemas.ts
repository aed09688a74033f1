/**
 * The wire shape of the listener protocol, version 1 (docs/listener-protocol.md): the one definition
 * of what a listener agent and the service say to each other. The routes validate and serialise with
 * these schemas (and the OpenAPI document shows them), the service builds and reads the `Static<>`
 * types, and the listener agent reads the types generated from that document (@slipway/sdk's
 * listener-protocol.ts, which also holds the protocol's version, the one definition of it).
 */
import { PROTOCOL_VERSION } from '@slipway/sdk/listener-protocol';
import { Type, type Static } from 'typebox';
import { LISTENER_REPORTED_STATUSES, REVISION_STATUSES } from '../domain/states.ts';
import { DateTime, Nullable, StringEnum, Uuid } from '../http/schema-helpers.ts';
import { LISTENER_CONDITIONS } from '../store/schema.ts';
import { ResourceSpec, SecretReference } from './deployment-schemas.ts';

export { PROTOCOL_VERSION };

const NAMESPACE = Type.String({ pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$', maxLength: 63 });

// ----- desired state -----------------------------------------------------------------------------

export const DesiredRevision = Type.Object(
  {
    id: Uuid(),
    number: Type.Integer({ description: "The revision's number in its deployment, 1 for the first." }),
    status: StringEnum(REVISION_STATUSES),
    image_uri: Nullable(Type.String()),
    secrets: Type.Array(Type.Object({ name: Type.String(), value: Type.String() }), {
      description: 'Decrypted, for a Kubernetes Secret of the deployment.',
    }),
    secret_references: Nullable(
      Type.Array(SecretReference, { description: "The deployment's secret_references, as in the deployment's entry." }),
    ),
    // The deployment's current resource_spec, as in the deployment's entry (kept for agents that read it here).
    resource_spec: Nullable(ResourceSpec),
  },
  { title: 'DesiredRevision' },
);

/**
 * A revision served at an endpoint: its image and its own secrets (each revision runs with its snapshot of
 * them), for the endpoint's own Deployment and Secret. An addition to protocol 1 (docs/listener-protocol.md).
 */
export const DesiredEndpointRevision = Type.Object(
  {
    id: Uuid(),
    number: Type.Integer({ description: "The revision's number in its deployment." }),
    image_uri: Nullable(Type.String()),
    secrets: Type.Array(Type.Object({ name: Type.String(), value: Type.String() }), {
      description: 'Decrypted, for a Kubernetes Secret of the endpoint.',
    }),
  },
  { title: 'DesiredEndpointRevision' },
);

/** A second revision that takes `weight` percent of the endpoint's requests. */
export const DesiredEndpointSplit = Type.Object(
  {
    revision_id: Uuid(),
    weight: Type.Integer({
      minimum: 0,
      maximum: 100,
      description: "The percentage of the endpoint's requests this revision takes; the endpoint's revision the rest.",
    }),
    revision: DesiredEndpointRevision,
  },
  { title: 'DesiredEndpointSplit' },
);

export const DesiredEndpoint = Type.Object(
  {
    name: Type.String({ description: 'The endpoint name (a DNS label without `--`).' }),
    revision: DesiredEndpointRevision,
    served_revision_id: Nullable(
      Uuid({ description: 'What the service has as served there: the agent reports when that differs.' }),
    ),
    split: Nullable(DesiredEndpointSplit),
  },
  { title: 'DesiredEndpoint' },
);

export const DesiredDeployment = Type.Object(
  {
    deployment_id: Uuid(),
    name: Type.String(),
    namespace: Nullable(Type.String({ description: 'source_config.listener_config.k8s_namespace.' })),
    delete: Type.Boolean({
      description: 'The deployment was deleted: remove everything of it, then POST .../deletions.',
    }),
    custom_url: Nullable(Type.String()),
    // The deployment's current source_config.resource_spec: a patch of it applies in place, without a revision.
    resource_spec: Nullable(ResourceSpec),
    secret_references: Nullable(
      Type.Array(SecretReference, {
        description:
          "The deployment's current secret_references (environment variables read from existing Kubernetes Secrets).",
      }),
    ),
    revision: Nullable(DesiredRevision),
    // Added within protocol 1: an agent of before ignores it; a service of before does not send it.
    endpoints: Type.Optional(
      Type.Array(DesiredEndpoint, {
        description:
          "The deployment's endpoints, each with the revision it is pinned to and its split (null: none); absent from a service that does not send them.",
      }),
    ),
  },
  { title: 'DesiredDeployment' },
);

export const DesiredState = Type.Object(
  {
    protocol: Type.Literal(PROTOCOL_VERSION),
    listener_id: Uuid(),
    deployments: Type.Array(DesiredDeployment),
  },
  {
    title: 'DesiredState',
    description: 'Every deployment of the listener with the revision that should run (null: nothing should).',
  },
);

/** A revision the listener should run, with the deployment's current in-place values. */
export type DesiredRevision = Static<typeof DesiredRevision>;
/** A deployment of the listener, with the revision that should run (null: nothing should). */
export type DesiredDeployment = Static<typeof DesiredDeployment>;
export type DesiredState = Static<typeof DesiredState>;
export type DesiredEndpoint = Static<typeof DesiredEndpoint>;
export type DesiredEndpointRevision = Static<typeof DesiredEndpointRevision>;
export type DesiredEndpointSplit = Static<typeof DesiredEndpointSplit>;

// ----- reports, deletions, heartbeats ------------------------------------------------------------

export const ReportBody = Type.Object(
  {
    revision_id: Uuid(),
    status: StringEnum(LISTENER_REPORTED_STATUSES),
    failure_reason: Type.Optional(
      Type.String({
        pattern: '^[a-z][a-z0-9_]{0,63}$',
        description:
          'Machine-readable, with DEPLOY_FAILED: image_pull_failed, crash_loop, progress_deadline_exceeded, invalid_manifest, ...',
      }),
    ),
    message: Type.Optional(Type.String({ maxLength: 4096, description: 'For people: what happened.' })),
  },
  { title: 'RevisionReport' },
);

export const ReportResult = Type.Object(
  {
    applied: Type.Boolean({
      description: 'false: the report changed nothing (a retry, a stale report, or a revision in a final state).',
    }),
    status: StringEnum(REVISION_STATUSES, { description: "The revision's status now." }),
    not_applied_reason: Nullable(
      StringEnum(['duplicate', 'behind', 'superseded', 'final'] as const, {
        description:
          "Why not: already in that status; behind its status; not the deployment's latest revision; in a final state.",
      }),
    ),
  },
  { title: 'RevisionReportResult', description: 'What the report did.' },
);

export const EndpointReportBody = Type.Object(
  {
    deployment_id: Uuid(),
    endpoint: Type.String({ minLength: 1, maxLength: 63 }),
    revision_id: Uuid({ description: 'The revision the report is about.' }),
    status: StringEnum(['SERVED', 'FAILED'] as const, {
      description:
        "SERVED: the endpoint's own Deployment runs the revision, every replica available; FAILED: it cannot (message says why).",
    }),
    message: Type.Optional(Type.String({ maxLength: 4096 })),
    // Added within protocol 1: a service of before ignores it, and the report then names a revision
    // that is not the endpoint's, which changes nothing there.
    split: Type.Optional(
      Type.Object(
        {
          weight: Type.Integer({
            minimum: 0,
            maximum: 100,
            description: "The split's weight the agent's route gives it (the desired state's `split.weight`).",
          }),
        },
        {
          description:
            "The report is about the endpoint's traffic split: revision_id is the split's revision. SERVED: it takes `weight` percent of the endpoint's requests (its Deployment rolled out, the Gateway accepted the route); FAILED: it takes none, `message` says why in plain words.",
        },
      ),
    ),
  },
  { title: 'EndpointReport' },
);

export const EndpointReportResult = Type.Object(
  {
    applied: Type.Boolean({
      description: 'false: nothing changed (a repeat, or the endpoint was moved or deleted since).',
    }),
  },
  { title: 'EndpointReportResult' },
);

export const DeletionBody = Type.Object({ deployment_id: Uuid() }, { title: 'DeletionConfirmation' });

export const DeploymentCondition = Type.Object(
  {
    deployment_id: Uuid(),
    revision_id: Uuid({ description: 'The revision the agent runs for it (its serving revision).' }),
    condition: StringEnum(LISTENER_CONDITIONS, {
      description:
        'update_failed: an in-place change (resource_spec, secret_references, custom_url) was refused or does not roll out, and the pods of before keep serving; crash_loop: the pods of the serving revision keep crashing.',
    }),
    reason: Type.String({
      pattern: '^[a-z][a-z0-9_]{0,63}$',
      description:
        'Machine-readable, like a DEPLOY_FAILED reason: invalid_manifest, crash_loop, image_pull_failed, ...',
    }),
    message: Type.Optional(Type.String({ maxLength: 4096 })),
    change: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 128,
        description:
          "For update_failed: the agent's id of the in-place change it is about (the same change, the same id). An entry with another change than the one told before is a new failure: a new deployment.update_failed event, even with the same reason.",
      }),
    ),
  },
  { title: 'ListenerDeploymentCondition' },
);

export const HeartbeatBody = Type.Object(
  {
    version: Type.String({ minLength: 1, maxLength: 128, description: "The agent's version." }),
    namespaces: Type.Array(NAMESPACE, {
      maxItems: 1000,
      uniqueItems: true,
      description: 'The namespaces the agent watches.',
    }),
    message: Type.Optional(Type.String({ maxLength: 4096 })),
    deployments: Type.Optional(
      Type.Array(DeploymentCondition, {
        maxItems: 10000,
        description:
          'Every deployment whose serving revision is not healthy; a deployment left out is healthy. Without this field the conditions stay as they were (an agent that does not tell them).',
      }),
    ),
    observed_at: Type.Optional(
      DateTime({
        description:
          "The agent's clock when it saw the `deployments` conditions: a heartbeat observed no later than one already applied changes no condition.",
      }),
    ),
  },
  { title: 'Heartbeat' },
);

export type ReportBody = Static<typeof ReportBody>;
export type ReportResult = Static<typeof ReportResult>;
export type DeletionBody = Static<typeof DeletionBody>;
export type EndpointReportBody = Static<typeof EndpointReportBody>;
export type EndpointReportResult = Static<typeof EndpointReportResult>;
/** A deployment whose serving revision is not healthy, as a heartbeat tells it. */
export type DeploymentCondition = Static<typeof DeploymentCondition>;
export type HeartbeatBody = Static<typeof HeartbeatBody>;
