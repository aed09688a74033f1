/**
 * `slipway scale`: shows or changes how many instances of a deployment run. It patches
 * `source_config.resource_spec` (min_scale, queue_min_scale), which makes no revision: the service's
 * own data plane starts or stops instances of the running app, and a listener re-applies its manifests
 * (docs/lifecycle.md, "Which patch makes a revision"). The counts are the deployment's: a rollback keeps
 * them ("What a redeploy restores"). On the own data plane it waits for the deployment's
 * `deployment.scaled` (or `deployment.scale_failed`) event. `--web 0` pauses a deployment of the own data
 * plane: no web instance runs and its URL answers 503 until it is scaled up again (docs/data-plane.md).
 */
import { Command, InvalidArgumentError } from 'commander';
import type { Deployment } from '@slipway/sdk/api-aliases';
import type { SlipwayClient } from '@slipway/sdk/slipway-client';
import { sleep } from '@slipway/sdk/sleep';
import { CliError, EXIT } from './cli-errors.ts';
import { withExample, type ActionRunner } from './command-help.ts';
import { resolveDeployment } from './resource-resolve.ts';

/** How long the command waits for the data plane to report the new counts. */
const WAIT_MS = 180_000;
const POLL_MS = 500;

const count = (minimum: number) => (value: string) => {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < minimum || n > 1000)
    throw new InvalidArgumentError(`expected a whole number from ${minimum} to 1000`);
  return n;
};

type ResourceSpec = Record<string, unknown>;

export const specOf = (deployment: Deployment): ResourceSpec =>
  (deployment.source_config.resource_spec as ResourceSpec | null | undefined) ?? {};

/** The instance counts a resource spec asks for, as the user reads them ("2 web instance(s), 1 worker(s)"). */
export const describeInstances = (spec: ResourceSpec) => {
  const web = typeof spec.min_scale === 'number' ? spec.min_scale : 1;
  const workers = typeof spec.queue_min_scale === 'number' ? `, ${spec.queue_min_scale} worker(s)` : '';
  return `${web} web instance(s)${workers}`;
};

/** The number of events the deployment has now: where to look for the outcome of the change. */
async function eventCount(client: SlipwayClient, deploymentId: string): Promise<number> {
  let offset = 0;
  for await (const page of client.deployments.events(deploymentId).pages()) offset = page.offset;
  return offset;
}

/** The outcome event of a scale change, once the data plane wrote it (null when the wait ran out). */
async function scaleOutcome(
  client: SlipwayClient,
  deploymentId: string,
  from: number,
): Promise<{ type: string; data: Record<string, unknown> } | null> {
  let offset = from;
  for (const deadline = Date.now() + WAIT_MS; Date.now() < deadline; await sleep(POLL_MS)) {
    for await (const page of client.deployments.events(deploymentId).pages({ offset })) {
      offset = page.offset;
      const outcome = page.resources.find(
        (e) => e.type === 'deployment.scaled' || e.type === 'deployment.scale_failed',
      );
      if (outcome) return outcome;
    }
  }
  return null;
}

export function scaleCommand(run: ActionRunner): Command {
  return withExample(
    new Command('scale')
      .description(
        'Show or change how many instances of a deployment run (in place: no new revision, no rebuild; a rollback keeps the counts)',
      )
      .argument('<deployment>', 'name or id')
      .option('-w, --web <count>', 'web instances (resource_spec.min_scale; 0 pauses the deployment)', count(0))
      .option('-q, --workers <count>', 'queue worker instances (resource_spec.queue_min_scale)', count(0))
      .option('--no-wait', 'return once the change is stored'),
    [
      'slipway scale support-agent',
      'slipway scale support-agent --web 3',
      'slipway scale support-agent --workers 0',
      'slipway scale support-agent --web 0',
    ],
  ).action(
    run(async (ctx, ref: string, options: { web?: number; workers?: number; wait: boolean }) => {
      const client = await ctx.client();
      const deployment = await resolveDeployment(client, ref);
      const current = specOf(deployment);
      if (options.web === undefined && options.workers === undefined) {
        if (ctx.output.json) return ctx.output.data({ min_scale: current.min_scale ?? 1, ...current });
        return ctx.output.result(`${deployment.name}: ${describeInstances(current)}`);
      }
      const spec: ResourceSpec = {
        ...current,
        ...(options.web !== undefined ? { min_scale: options.web } : {}),
        ...(options.workers !== undefined ? { queue_min_scale: options.workers } : {}),
      };
      // The service's own data plane reports the outcome as an event; a listener reports none.
      const waits = options.wait && deployment.active_revision_id !== null && !deployment.source_config.listener_id;
      const from = waits ? await eventCount(client, deployment.id) : 0;
      const updated = await client.deployments.update(deployment.id, { source_config: { resource_spec: spec } });
      if (!waits) {
        if (ctx.output.json) return ctx.output.data(updated);
        return ctx.output.result(
          `${updated.name} will run ${describeInstances(specOf(updated))}` +
            (updated.source_config.listener_id ? ' (its listener applies the change).' : '.'),
        );
      }
      const progress = ctx.output.progress(`Scaling ${updated.name} to ${describeInstances(spec)}`);
      const outcome = await scaleOutcome(client, deployment.id, from).finally(() => progress.stop());
      if (outcome === null)
        throw new CliError(
          `${updated.name}: the change is stored, but the data plane did not report it within ${WAIT_MS / 1000} s`,
          EXIT.failed,
          [`Check with: slipway logs ${updated.name}`],
        );
      if (outcome.type === 'deployment.scale_failed')
        throw new CliError(`${updated.name} could not be scaled: ${String(outcome.data.message)}`, EXIT.failed);
      if (ctx.output.json) return ctx.output.data(updated);
      ctx.output.result(`${updated.name} runs ${describeInstances(spec)}.`);
    }),
  );
}
