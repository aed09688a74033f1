/**
 * A fake of the service's side of listener protocol version 1 (node:http): the desired state with an
 * ETag and long-poll (`If-None-Match` waits up to `wait` seconds for a change, then 304), status
 * reports moving a revision forward as the service's state table does (a report that is not ahead
 * changes nothing: idempotent), deletion confirmations and heartbeats, all recorded for assertions.
 */
import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { eventually } from '../support/wait.ts';

export interface FakeRevision {
  id: string;
  status: string;
  image_uri: string | null;
  secrets: { name: string; value: string }[];
  secret_references: { name: string; secret_name: string; secret_key: string }[] | null;
  resource_spec: Record<string, unknown> | null;
}

export interface FakeDeployment {
  deployment_id: string;
  name: string;
  namespace: string | null;
  delete: boolean;
  custom_url: string | null;
  /** The deployment's current values, which the service sends since in-place changes reach the cluster (absent: a service of before). */
  resource_spec?: Record<string, unknown> | null;
  secret_references?: { name: string; secret_name: string; secret_key: string }[] | null;
  revision: FakeRevision | null;
  /** The deployment's endpoints (absent: a service of before, which sends none). */
  endpoints?: FakeEndpoint[];
}

export interface FakeEndpointRevision {
  id: string;
  number: number;
  image_uri: string | null;
  secrets: { name: string; value: string }[];
}

export interface FakeEndpoint {
  name: string;
  revision: FakeEndpointRevision;
  served_revision_id: string | null;
  split: { revision_id: string; weight: number; revision: FakeEndpointRevision } | null;
}

export interface RecordedEndpointReport {
  deployment_id: string;
  endpoint: string;
  revision_id: string;
  status: string;
  message?: string;
  /** A report about the endpoint's split (its revision is the split's): the weight it is served at. */
  split?: { weight: number };
  applied: boolean;
}

export interface RecordedReport {
  revision_id: string;
  status: string;
  failure_reason?: string;
  message?: string;
  applied: boolean;
}

const RANK: Readonly<Record<string, number>> = {
  CREATING: 0,
  QUEUED: 0,
  AWAITING_DEPLOY: 1,
  DEPLOYING: 2,
  DEPLOYED: 3,
  DEPLOY_FAILED: 3,
};
const FINAL = new Set([
  'DEPLOYED',
  'DEPLOY_FAILED',
  'INTERRUPTED',
  'SKIPPED',
  'UNKNOWN',
  'CREATE_FAILED',
  'BUILD_FAILED',
]);

export class FakeSlipway {
  readonly reports: RecordedReport[] = [];
  /** Endpoint reports (POST .../endpoint-reports), in order. */
  readonly endpointReports: RecordedEndpointReport[] = [];
  readonly deletions: string[] = [];
  readonly heartbeats: {
    version: string;
    namespaces: string[];
    message?: string;
    deployments?: { deployment_id: string; revision_id: string; condition: string; reason: string; message: string }[];
    observed_at?: string;
  }[] = [];
  /** Every desired-state request: its If-None-Match and answer status. */
  readonly polls: { ifNoneMatch: string | null; status: number }[] = [];
  private deployments: FakeDeployment[] = [];
  private readonly changes = new EventEmitter();

  private constructor(
    private readonly server: http.Server,
    readonly listenerId: string,
    readonly credential: string,
  ) {
    this.changes.setMaxListeners(0);
  }

  static async start(listenerId: string, credential: string): Promise<FakeSlipway> {
    const server = http.createServer((req, res) => {
      fake.handle(req, res).catch((error: unknown) => {
        if (!res.headersSent) FakeSlipway.send(res, 500, { detail: String(error) });
      });
    });
    const fake = new FakeSlipway(server, listenerId, credential);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return fake;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.changes.emit('closing');
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  // ----- what tests drive and read -------------------------------------------------------------

  /** Adds or replaces a deployment in the desired state (a new revision, a delete mark...). */
  upsert(deployment: FakeDeployment): void {
    this.deployments = [
      ...this.deployments.filter((d) => d.deployment_id !== deployment.deployment_id),
      structuredClone(deployment),
    ];
    this.changed();
  }

  deployment(id: string): FakeDeployment | undefined {
    return this.deployments.find((d) => d.deployment_id === id);
  }

  /** The statuses reported for a revision, in order (applied or not). */
  statusesOf(revisionId: string): string[] {
    return this.reports.filter((r) => r.revision_id === revisionId).map((r) => r.status);
  }

  /** Resolves with the first truthy value of `check`, evaluated now and after every request. */
  waitFor<T>(check: () => T | undefined | null | false, what = 'a request to the fake Slipway'): Promise<T> {
    return eventually(what, check, {
      wake: (recheck) => {
        this.changes.on('request', recheck);
        return () => this.changes.off('request', recheck);
      },
    });
  }

  // ----- the server ----------------------------------------------------------------------------

  private state() {
    return { protocol: 1, listener_id: this.listenerId, deployments: this.deployments };
  }

  private etag(): string {
    return `"${createHash('sha256').update(JSON.stringify(this.state())).digest('base64url').slice(0, 24)}"`;
  }

  private changed(): void {
    this.changes.emit('state');
  }

  private static send(res: ServerResponse, code: number, body?: unknown, headers: Record<string, string> = {}): void {
    res.writeHead(code, { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers });
    res.end(body === undefined ? undefined : JSON.stringify(body));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      await this.route(req, res);
    } finally {
      this.changes.emit('request');
    }
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://fake');
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    if (req.headers.authorization !== `Bearer ${this.credential}`) {
      FakeSlipway.send(res, 401, { detail: 'Invalid or missing listener credential', code: 'unauthorized' });
      return;
    }
    const match = /^\/v2\/listeners\/([^/]+)\/(desired-state|reports|endpoint-reports|deletions|heartbeat)$/.exec(
      url.pathname,
    );
    if (!match) {
      FakeSlipway.send(res, 404, { detail: 'Not Found' });
      return;
    }
    if (match[1] !== this.listenerId) {
      FakeSlipway.send(res, 404, { detail: `Listener ${match[1]} not found` });
      return;
    }
    const body = text === '' ? {} : (JSON.parse(text) as Record<string, unknown>);
    switch (`${req.method} ${match[2]}`) {
      case 'GET desired-state':
        return this.desiredState(req, res, url);
      case 'POST reports':
        return this.report(res, body);
      case 'POST endpoint-reports':
        return this.endpointReport(res, body);
      case 'POST deletions': {
        const id = String(body.deployment_id);
        const deployment = this.deployment(id);
        this.deletions.push(id);
        if (deployment && !deployment.delete) {
          FakeSlipway.send(res, 409, { detail: `Deployment ${id} is not being deleted`, code: 'conflict' });
          return;
        }
        this.deployments = this.deployments.filter((d) => d.deployment_id !== id);
        this.changed();
        FakeSlipway.send(res, 204);
        return;
      }
      case 'POST heartbeat':
        this.heartbeats.push(body as (typeof this.heartbeats)[number]);
        FakeSlipway.send(res, 200, { id: this.listenerId, last_seen_at: new Date().toISOString() });
        return;
      default:
        FakeSlipway.send(res, 405, { detail: 'Method Not Allowed' });
    }
  }

  private async desiredState(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const wait = Number(url.searchParams.get('wait') ?? '0');
    if (!Number.isInteger(wait) || wait < 0 || wait > 60) {
      FakeSlipway.send(res, 422, { detail: 'wait must be an integer from 0 to 60' });
      return;
    }
    const ifNoneMatch = req.headers['if-none-match'] ?? null;
    if (ifNoneMatch !== null && ifNoneMatch === this.etag()) {
      const changed = await new Promise<boolean>((resolve) => {
        const done = (value: boolean) => {
          clearTimeout(timer);
          this.changes.off('state', onState);
          this.changes.off('closing', onClosing);
          res.off('close', onClose);
          resolve(value);
        };
        const onState = () => {
          if (this.etag() !== ifNoneMatch) done(true);
        };
        const onClosing = () => done(false);
        const onClose = () => done(false);
        const timer = setTimeout(() => done(false), wait * 1000);
        this.changes.on('state', onState);
        this.changes.on('closing', onClosing);
        res.on('close', onClose);
      });
      if (!changed) {
        this.polls.push({ ifNoneMatch, status: 304 });
        if (!res.destroyed) FakeSlipway.send(res, 304, undefined, { etag: this.etag() });
        return;
      }
    }
    this.polls.push({ ifNoneMatch, status: 200 });
    FakeSlipway.send(res, 200, this.state(), { etag: this.etag() });
  }

  /** As the service does: SERVED moves served_revision_id while the endpoint asks for the revision. */
  private endpointReport(res: ServerResponse, body: Record<string, unknown>): void {
    const deployment = this.deployment(String(body.deployment_id));
    if (!deployment) {
      FakeSlipway.send(res, 404, {
        detail: `Deployment ID ${String(body.deployment_id)} not found.`,
        code: 'not_found',
      });
      return;
    }
    const endpoint = deployment.endpoints?.find((e) => e.name === body.endpoint);
    const revisionId = String(body.revision_id);
    const status = String(body.status);
    const split = body.split as { weight: number } | undefined;
    let applied =
      endpoint !== undefined &&
      (split === undefined
        ? endpoint.revision.id === revisionId
        : endpoint.split?.revision_id === revisionId && endpoint.split.weight === split.weight);
    if (applied && status === 'SERVED' && split === undefined) {
      applied = endpoint!.served_revision_id !== revisionId;
      endpoint!.served_revision_id = revisionId;
      if (applied) this.changed();
    }
    this.endpointReports.push({
      deployment_id: deployment.deployment_id,
      endpoint: String(body.endpoint),
      revision_id: revisionId,
      status,
      ...(typeof body.message === 'string' ? { message: body.message } : {}),
      ...(split === undefined ? {} : { split }),
      applied,
    });
    FakeSlipway.send(res, 200, { applied });
  }

  private report(res: ServerResponse, body: Record<string, unknown>): void {
    const revisionId = String(body.revision_id);
    const status = String(body.status);
    if (!['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED', 'DEPLOY_FAILED'].includes(status)) {
      FakeSlipway.send(res, 422, { detail: `status ${status} cannot be reported` });
      return;
    }
    const deployment = this.deployments.find((d) => d.revision?.id === revisionId);
    const revision = deployment?.revision;
    if (!revision) {
      FakeSlipway.send(res, 404, { detail: `Revision ${revisionId} not found`, code: 'not_found' });
      return;
    }
    const applied = !FINAL.has(revision.status) && (RANK[status] ?? 0) > (RANK[revision.status] ?? 0);
    this.reports.push({
      revision_id: revisionId,
      status,
      ...(typeof body.failure_reason === 'string' ? { failure_reason: body.failure_reason } : {}),
      ...(typeof body.message === 'string' ? { message: body.message } : {}),
      applied,
    });
    if (applied) {
      revision.status = status;
      this.changed();
    }
    FakeSlipway.send(res, 200, { applied, status: revision.status });
  }
}
