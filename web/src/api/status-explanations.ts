/**
 * Why deployments have their status, in the words `slipway status` and `slipway ls` use: the rules are
 * the SDK's (packages/sdk/src/deployment-status.ts); this only fetches what they ask for, with the
 * dashboard's client. Only what a deployment needs is asked for: the latest revision of one not serving
 * it (unless the page has it already), and each listener once.
 */
import { explainStatus, explanationNeeds } from '@slipway/sdk/deployment-status';
import { SlipwayError } from '@slipway/sdk/slipway-error';
import { data, type Api } from './client.ts';
import type { Deployment, Listener, Revision } from './types.ts';

/** A resource that went away meanwhile (deleted, superseded) is explained without it: null. */
const unlessGone = (error: unknown): null => {
  if (error instanceof SlipwayError && error.status === 404) return null;
  throw error;
};

/**
 * The explanation of each deployment that has one, by deployment id. `known` are revisions the page
 * already holds (a deployment's timeline): those are not asked for again.
 */
export async function explainDeployments(
  api: Api,
  deployments: readonly Deployment[],
  known: readonly Revision[] = [],
): Promise<Map<string, string>> {
  const needs = deployments.map((d) => ({ deployment: d, ...explanationNeeds(d) }));
  const listenerIds = new Set(
    needs.filter((n) => n.listener).map((n) => String(n.deployment.source_config.listener_id)),
  );
  const listeners = new Map<string, Listener | null>(
    await Promise.all(
      [...listenerIds].map(
        async (id) =>
          [
            id,
            await data(api.GET('/v2/listeners/{listener_id}', { params: { path: { listener_id: id } } })).catch(
              unlessGone,
            ),
          ] as const,
      ),
    ),
  );
  const explained = new Map<string, string>();
  await Promise.all(
    needs.map(async ({ deployment: d, latestRevision, listener }) => {
      const revisionId = d.latest_revision_id;
      const latest =
        latestRevision && revisionId !== null
          ? (known.find((r) => r.id === revisionId) ??
            (await data(
              api.GET('/v2/deployments/{deployment_id}/revisions/{revision_id}', {
                params: { path: { deployment_id: d.id, revision_id: revisionId } },
              }),
            ).catch(unlessGone)))
          : null;
      const why = explainStatus(
        d,
        latest,
        listener ? (listeners.get(String(d.source_config.listener_id)) ?? null) : null,
      );
      if (why) explained.set(d.id, why);
    }),
  );
  return explained;
}
