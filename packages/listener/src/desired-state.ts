/**
 * The desired state of listener protocol version 1, as the agent uses it. Its shape is the service's
 * own: the types are generated from the service's OpenAPI document, whose schemas the service answers
 * by, and the version is the one the service serves; both come from @slipway/sdk's listener-protocol
 * module. What the agent checks
 * itself is what no schema says: that the answer speaks protocol 1 and is for this listener, so that a
 * service of another protocol version (or a proxy answering in its place) is refused as a whole
 * instead of half-applied.
 *
 * A deployment's `resource_spec` and `secret_references` are its current values, which apply in place
 * to the revision that runs; a service of before sent them only in the revision (its snapshot). The
 * agent reads them from the deployment when they are there, and keeps them on the revision it uses.
 */
import {
  PROTOCOL_VERSION,
  type DesiredEndpoint,
  type DesiredEndpointRevision,
  type DesiredEndpointSplit,
  type DesiredState as WireDesiredState,
  type EndpointReportBody,
  type ReportBody,
} from '@slipway/sdk/listener-protocol';

export { PROTOCOL_VERSION };
export type { WireDesiredState };
type WireDeployment = WireDesiredState['deployments'][number];

export type ReportedStatus = ReportBody['status'];
/** An endpoint of a deployment (an addition to protocol 1: a service of before sends none). */
export type { DesiredEndpoint, DesiredEndpointRevision, DesiredEndpointSplit };
export type EndpointReportedStatus = EndpointReportBody['status'];

/** A revision, with the deployment's current in-place values (see above). */
export type DesiredRevision = NonNullable<WireDeployment['revision']>;

/** A deployment; its in-place values are on its revision. */
export type DesiredDeployment = Omit<WireDeployment, 'resource_spec' | 'secret_references' | 'revision'> & {
  readonly revision: DesiredRevision | null;
};

export interface DesiredState {
  readonly protocol: typeof PROTOCOL_VERSION;
  readonly listener_id: string;
  readonly deployments: readonly DesiredDeployment[];
}

export class ProtocolError extends Error {
  override name = 'ProtocolError';
}

function ofDeployment(wire: WireDeployment): DesiredDeployment {
  const { resource_spec, secret_references, revision, ...deployment } = wire;
  if (revision === null || revision === undefined) return { ...deployment, revision: null };
  return {
    ...deployment,
    revision: {
      ...revision,
      // A service of before sends neither on the deployment (undefined), and not always on the revision.
      resource_spec: resource_spec !== undefined ? resource_spec : (revision.resource_spec ?? null),
      secret_references: secret_references !== undefined ? secret_references : (revision.secret_references ?? null),
    },
  };
}

/** The desired state of `body` for listener `listenerId`; a ProtocolError when it is not one. */
export function readDesiredState(body: WireDesiredState, listenerId: string): DesiredState {
  // What came, before trusting it to be what the document says.
  const raw: unknown = body;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw new ProtocolError('desired state: the body must be a JSON object');
  const { protocol, listener_id: id, deployments } = raw as Record<string, unknown>;
  if (protocol !== PROTOCOL_VERSION) {
    throw new ProtocolError(
      `desired state: protocol ${JSON.stringify(protocol)} is not supported; this agent speaks protocol ${PROTOCOL_VERSION} (upgrade the agent or the service)`,
    );
  }
  if (typeof id !== 'string' || id.toLowerCase() !== listenerId.toLowerCase())
    throw new ProtocolError(`desired state: it is for listener ${JSON.stringify(id)}, not ${listenerId}`);
  if (!Array.isArray(deployments)) throw new ProtocolError('desired state: deployments must be an array');
  return { protocol: PROTOCOL_VERSION, listener_id: id, deployments: body.deployments.map(ofDeployment) };
}
