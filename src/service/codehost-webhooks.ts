/**
 * Push webhooks of code-host integrations (docs/codehost.md). A delivery is authenticated by its signature alone
 * (X-Hub-Signature-256, HMAC-SHA256 of the raw body with the integration's webhook secret); a push to
 * the branch that a build_on_push codehost deployment tracks creates one revision of it, recording the
 * pushed commit as repo_commit_sha.
 *
 * Every delivery to an existing integration is recorded with its outcome (the `deliveries` endpoint
 * shows them): `revision_created`, `ignored` (understood, nothing to build), `duplicate` (a redelivery
 * of a delivery that already built) or `rejected` (refused with a 4xx; nothing else changes).
 * A delivery that built is recorded in the same transaction as its revisions, and its id can build only
 * once (the unique index of migrations/003_codehost.sql), even when GitHub redelivers it concurrently;
 * and a commit builds once per deployment, whatever the delivery id (see decidePush).
 */
import type { Kysely, Transaction } from 'kysely';
import {
  parsePushEvent,
  pushIsForRepository,
  pushTarget,
  trackedBranch,
  type PushEvent,
} from '../codehost/push-event.ts';
import { parsePullRequestEvent } from '../codehost/pull-request-event.ts';
import { verifyWebhookSignature } from '../codehost/webhook-signature.ts';
import { AppError, notFound } from '../errors.ts';
import {
  codehostDeploymentsOfIntegration,
  deploymentsWithCommit,
  getIntegrationById,
  type CodehostDeploymentOfIntegration,
} from '../store/codehost-integrations.ts';
import { lockDeployment } from '../store/deployments.ts';
import type { Database, WebhookDeliveryRow } from '../store/schema.ts';
import {
  claimDelivery,
  findProcessedDelivery,
  listDeliveries,
  recordDelivery,
  settleDelivery,
  type DeliveryFacts,
  type DeliveryResult,
} from '../store/webhook-deliveries.ts';
import type { CodehostIntegrationService } from './codehost-integrations.ts';
import type { DeploymentService } from './deployments.ts';
import type { Page } from './page.ts';
import type { PreviewService } from './pull-request-previews.ts';

export interface IncomingDelivery {
  integrationId: string;
  /** The body exactly as received: the signature is over these bytes. */
  body: Buffer;
  signature: string | string[] | undefined;
  event: string | string[] | undefined;
  deliveryId: string | string[] | undefined;
}

export interface WebhookServiceDeps {
  db: Kysely<Database>;
  integrations: CodehostIntegrationService;
  deployments: DeploymentService;
  /** Pull-request previews (src/service/pull-request-previews.ts); without it pull_request events do nothing. */
  previews?: PreviewService;
}

// GitHub sends a GUID and an event name; anything else printable and short is kept as sent.
const HEADER_VALUE = /^[\x21-\x7e]{1,200}$/;

function headerValue(value: string | string[] | undefined): string | null {
  return typeof value === 'string' && HEADER_VALUE.test(value.trim()) ? value.trim() : null;
}

const shortSha = (sha: string): string => sha.slice(0, 12);

/** What a push does, decided inside the delivery's transaction. */
type PushDecision = DeliveryResult & { refusal?: AppError };

/** Builds every deployment that tracks the pushed branch, or says why none is built. */
async function decidePush(
  deployments: DeploymentService,
  tx: Transaction<Database>,
  facts: DeliveryFacts & { deliveryId: string },
  workspaceId: string,
  event: PushEvent,
): Promise<PushDecision> {
  const repository = event.repository.full_name;
  const ofIntegration = await codehostDeploymentsOfIntegration(tx, facts.integrationId);
  const forRepo = ofIntegration.filter(
    (d) => d.workspace_id === workspaceId && d.repo_url !== null && pushIsForRepository(event, d.repo_url),
  );
  if (forRepo.length === 0) {
    const message = `No codehost deployment of this integration uses the repository ${repository} (${event.repository.html_url}).`;
    return {
      outcome: 'rejected',
      reason: 'unknown_repository',
      message,
      refusal: new AppError('not_found', message),
    };
  }
  const target = pushTarget(event);
  if (target.kind === 'ignored') return { outcome: 'ignored', reason: target.reason, message: target.message };

  const names = (list: CodehostDeploymentOfIntegration[]): string => list.map((d) => `'${d.name}'`).join(', ');
  const building = forRepo.filter((d) => d.build_on_push);
  if (building.length === 0) {
    return {
      outcome: 'ignored',
      reason: 'build_on_push_off',
      message: `No deployment of ${repository} has source_config.build_on_push set (deployments: ${names(forRepo)}).`,
    };
  }
  // The tracked branch is that of the latest revision; one made from another source (revision_source)
  // tracks nothing until a codehost revision comes again.
  const refOf = (d: CodehostDeploymentOfIntegration): string | null =>
    d.latest_revision_source === 'codehost' && d.latest_revision_config?.repo_ref
      ? d.latest_revision_config.repo_ref
      : null;
  const tracking = building.filter((d) => {
    const ref = refOf(d);
    return ref !== null && trackedBranch(ref) === target.branch;
  });
  if (tracking.length === 0) {
    const tracked = building
      .map((d) => `'${d.name}' tracks ${trackedBranch(refOf(d) ?? '') ?? 'no branch'}`)
      .join(', ');
    return {
      outcome: 'ignored',
      reason: 'branch_not_tracked',
      message: `No build_on_push deployment of ${repository} tracks branch ${target.branch} (${tracked}).`,
    };
  }
  // A commit builds once per deployment. The signature covers the body but not the delivery id, so a
  // captured push replayed under a new id must not build again (nor roll back to an old commit); and a
  // push sent by two webhooks (a repository's and its organization's) is one push. Locked first, in id
  // order, so that concurrent deliveries of one push serialise here.
  for (const deployment of tracking) await lockDeployment(tx, workspaceId, deployment.id);
  const built = await deploymentsWithCommit(
    tx,
    tracking.map((d) => d.id),
    target.commitSha,
  );
  const toBuild = tracking.filter((d) => !built.has(d.id));
  if (toBuild.length === 0) {
    const revisions = tracking.map((d) => `'${d.name}' revision ${built.get(d.id) ?? '?'}`).join(', ');
    return {
      outcome: 'ignored',
      reason: 'commit_already_built',
      message: `Commit ${shortSha(target.commitSha)} was already built (${revisions}); redeploy that revision to run it again.`,
    };
  }
  const revisionIds: string[] = [];
  for (const deployment of toBuild) {
    const view = await deployments.patch(
      workspaceId,
      deployment.id,
      { source_revision_config: { repo_ref: refOf(deployment), repo_commit_sha: target.commitSha } },
      {
        tx,
        cause: {
          cause: 'push',
          integration_id: facts.integrationId,
          delivery_id: facts.deliveryId,
          ref: event.ref,
          commit_sha: target.commitSha,
        },
      },
    );
    if (view.latest_revision_id !== null) revisionIds.push(view.latest_revision_id);
  }
  return {
    outcome: 'revision_created',
    reason: 'push',
    message: `Commit ${shortSha(target.commitSha)} of branch ${target.branch} created a revision of ${names(toBuild)}.`,
    revisionIds,
  };
}

export function createWebhookService({ db, integrations, deployments, previews }: WebhookServiceDeps) {
  /**
   * Claims the delivery id, decides, and settles the record, all in one transaction: a failure leaves no
   * trace but the error, and GitHub may redeliver.
   */
  async function processOnce(
    facts: DeliveryFacts & { deliveryId: string },
    decide: (tx: Transaction<Database>) => Promise<PushDecision>,
  ): Promise<{ row: WebhookDeliveryRow; refusal?: AppError }> {
    return db.transaction().execute(async (tx) => {
      // Claimed as revision_created, the outcome the unique index covers, until the decision is known.
      const claimed = await claimDelivery(tx, facts, {
        outcome: 'revision_created',
        reason: 'processing',
        message: 'Being processed.',
      });
      if (claimed === null) {
        const first = await findProcessedDelivery(tx, facts.integrationId, facts.deliveryId);
        const when = first ? ` at ${first.received_at.toISOString()}` : '';
        const row = await recordDelivery(tx, facts, {
          outcome: 'duplicate',
          reason: 'redelivery',
          message: `Delivery ${facts.deliveryId} already created revisions${when}; a redelivery builds nothing new.`,
          revisionIds: first?.revision_ids ?? [],
        });
        return { row };
      }
      const { refusal, ...result } = await decide(tx);
      const row = await settleDelivery(tx, claimed, result);
      return refusal ? { row, refusal } : { row };
    });
  }

  return {
    /**
     * Handles one delivery. Returns its record when it was understood (built, ignored or a duplicate);
     * throws AppError, after recording the delivery as rejected, when it is refused.
     */
    async receive(delivery: IncomingDelivery): Promise<WebhookDeliveryRow> {
      const integration = await getIntegrationById(db, delivery.integrationId);
      // Nothing to record it against; and the id proves nothing without a signature.
      if (!integration) throw notFound('Integration', delivery.integrationId);
      const facts: DeliveryFacts = {
        integrationId: integration.id,
        workspaceId: integration.workspace_id,
        deliveryId: headerValue(delivery.deliveryId),
        event: headerValue(delivery.event),
      };
      const refuse = async (reason: string, error: AppError, more: Partial<DeliveryFacts> = {}): Promise<never> => {
        await recordDelivery(db, { ...facts, ...more }, { outcome: 'rejected', reason, message: error.detail });
        throw error;
      };

      const signature = verifyWebhookSignature(
        integrations.webhookSecretOf(integration),
        delivery.body,
        delivery.signature,
      );
      if (!signature.ok) {
        return refuse(
          `signature_${signature.reason}`,
          new AppError(
            'webhook_signature_invalid',
            `${signature.message} Check that the webhook's secret on the code host is the integration's webhook secret.`,
          ),
        );
      }
      const { event, deliveryId } = facts;
      if (event === null)
        return refuse(
          'missing_event',
          new AppError('invalid_request', 'The X-GitHub-Event header is missing or malformed.'),
        );
      if (deliveryId === null)
        return refuse(
          'missing_delivery_id',
          new AppError('invalid_request', 'The X-GitHub-Delivery header is missing or malformed.'),
        );
      const claimable = { ...facts, deliveryId };

      let payload: unknown;
      try {
        payload = JSON.parse(delivery.body.toString('utf8'));
      } catch {
        // The parser's message quotes the body; the reason is enough.
        return refuse('malformed_payload', new AppError('malformed_json', 'The delivery body is not valid JSON.'));
      }

      if (event === 'ping') {
        return (
          await processOnce(claimable, async () => ({
            outcome: 'ignored',
            reason: 'ping',
            message: 'Ping received: the webhook reaches Slipway and its signature is valid.',
          }))
        ).row;
      }
      if (event === 'pull_request' && previews) {
        const parsed = parsePullRequestEvent(payload);
        if (!parsed.ok)
          return refuse(
            'malformed_payload',
            new AppError('invalid_request', `The pull_request payload is malformed: ${parsed.message}`),
          );
        const pr = parsed.event;
        const merged =
          typeof payload === 'object' &&
          payload !== null &&
          (payload as { pull_request?: { merged?: unknown } }).pull_request?.merged === true;
        const prFacts = {
          ...claimable,
          repository: pr.repository.full_name,
          ref: `refs/pull/${pr.number}/head`,
          commitSha: pr.headSha,
        };
        const { row, refusal } = await processOnce(prFacts, (tx) =>
          previews.decide(tx, prFacts, integration.workspace_id, pr, merged),
        );
        if (refusal) throw refusal;
        return row;
      }
      if (event !== 'push') {
        return (
          await processOnce(claimable, async () => ({
            outcome: 'ignored',
            reason: 'event_not_handled',
            message: `Slipway builds on push and pull_request events only; a ${event} event does nothing.`,
          }))
        ).row;
      }
      const parsed = parsePushEvent(payload);
      if (!parsed.ok)
        return refuse(
          'malformed_payload',
          new AppError('invalid_request', `The push payload is malformed: ${parsed.message}`),
        );
      const push = parsed.event;
      // PostgreSQL text cannot hold NUL; these strings are stored and quoted in messages.
      if (
        [push.ref, push.repository.full_name, push.repository.html_url, push.repository.clone_url].some((v) =>
          v.includes('\u0000'),
        )
      ) {
        return refuse(
          'malformed_payload',
          new AppError('invalid_request', 'The push payload is malformed: a string holds a NUL character.'),
        );
      }
      const pushFacts = { ...claimable, repository: push.repository.full_name, ref: push.ref, commitSha: push.after };
      const { row, refusal } = await processOnce(pushFacts, (tx) =>
        decidePush(deployments, tx, pushFacts, integration.workspace_id, push),
      );
      if (refusal) throw refusal;
      return row;
    },

    /** The deliveries an integration of the workspace received, newest first. */
    async listDeliveries(workspaceId: string, integrationId: string, page: Page): Promise<WebhookDeliveryRow[]> {
      const integration = await integrations.get(workspaceId, integrationId);
      return listDeliveries(db, integration.id, page.limit, page.offset);
    },
  };
}

export type WebhookService = ReturnType<typeof createWebhookService>;
