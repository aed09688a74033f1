/**
 * `slipway endpoints ls|set|promote|split|unsplit|rm <deployment>`: a deployment's endpoints, named addresses pinned to
 * its revisions, each at `<slug>--<name>.<apps domain>` (docs/app-urls.md, "Endpoints"). `set` and
 * `promote` wait until the service's own data plane serves the revision there (its instances healthy, the
 * route switched), unless --no-wait.
 */
import { Command } from 'commander';
import type { DeploymentEndpoint, SlipwayClient } from '@slipway/sdk';
import { CliError, EXIT } from './cli-errors.ts';
import { ago, orDash } from './cli-format.ts';
import type { CliContext } from './cli-context.ts';
import { withExample, type ActionRunner } from './command-help.ts';
import { confirm } from './cli-prompt.ts';
import { resolveDeployment, resolveRevision } from './resource-resolve.ts';

const short = (id: string | null) => (id === null ? orDash(null) : id.slice(0, 8));

/** Says the endpoint as moved, then waits (unless told not to) until it serves the revision. */
async function settle(
  ctx: CliContext,
  client: SlipwayClient,
  deploymentId: string,
  endpoint: DeploymentEndpoint,
  wait: boolean,
): Promise<void> {
  let result = endpoint;
  if (wait && endpoint.served_revision_id !== endpoint.revision_id) {
    ctx.output.note(`Starting revision ${short(endpoint.revision_id)} at ${endpoint.name}...`);
    try {
      result = await client.endpoints.waitServed(deploymentId, endpoint.name, endpoint.revision_id);
    } catch (error) {
      throw new CliError(error instanceof Error ? error.message : String(error), EXIT.failed, [
        'What served at the endpoint before keeps serving.',
      ]);
    }
  }
  if (ctx.output.json) return ctx.output.data(result);
  ctx.output.result(
    result.served_revision_id === result.revision_id
      ? `${result.name} serves revision ${result.revision_id}${result.url ? ` at ${result.url}` : ''}`
      : `${result.name} is pinned to revision ${result.revision_id}; the data plane starts it now`,
  );
}

export function endpointsCommand(run: ActionRunner): Command {
  const endpoints = withExample(
    new Command('endpoints')
      .alias('endpoint')
      .description('Named addresses of a deployment, each pinned to a revision: list, set, promote, remove'),
    ['slipway endpoints set my-agent staging 7a2c', 'slipway endpoints promote my-agent staging production'],
  );

  endpoints.addCommand(
    withExample(
      new Command('ls')
        .alias('list')
        .description("List a deployment's endpoints with their revisions and URLs")
        .argument('<deployment>', 'the deployment name or id'),
      ['slipway endpoints ls my-agent'],
    ).action(
      run(async (ctx, ref: string) => {
        const client = await ctx.client();
        const deployment = await resolveDeployment(client, ref);
        const rows = await client.endpoints.list(deployment.id);
        if (ctx.output.json) return ctx.output.data(rows);
        ctx.output.table(
          rows,
          [
            { header: 'NAME', value: (e) => e.name },
            { header: 'REVISION', value: (e) => short(e.revision_id) },
            {
              header: 'SERVING',
              value: (e) =>
                e.served_revision_id === e.revision_id
                  ? short(e.served_revision_id)
                  : `${short(e.served_revision_id)} (moving)`,
            },
            {
              header: 'SPLIT',
              value: (e) =>
                e.split === null
                  ? orDash(null)
                  : `${e.split.weight}% ${short(e.split.revision_id)}${
                      e.split.served ? '' : e.split.not_served_reason ? ' (not served)' : ' (starting)'
                    }${e.split.sticky ? '' : ' per request'}`,
            },
            { header: 'URL', value: (e) => orDash(e.url) },
            { header: 'MOVED', value: (e) => ago(e.updated_at) },
          ],
          `endpoints of ${deployment.name}`,
        );
      }),
    ),
  );

  endpoints.addCommand(
    withExample(
      new Command('set')
        .description('Create an endpoint at a revision, or move it there (a DEPLOYED revision of the deployment)')
        .argument('<deployment>', 'the deployment name or id')
        .argument('<name>', 'the endpoint name (e.g. staging)')
        .argument('<revision>', 'the revision id, or its first 4 or more characters')
        .option('--no-wait', 'do not wait until the data plane serves it'),
      ['slipway endpoints set my-agent staging 7a2c41d0'],
    ).action(
      run(async (ctx, ref: string, name: string, revisionRef: string, options: { wait: boolean }) => {
        const client = await ctx.client();
        const { deployment, revision } = await resolveRevision(client, revisionRef, ref);
        const endpoint = await client.endpoints.set(deployment.id, name, revision.id);
        await settle(ctx, client, deployment.id, endpoint, options.wait);
      }),
    ),
  );

  endpoints.addCommand(
    withExample(
      new Command('promote')
        .description('Move an endpoint to the revision another one is pinned to: the same build, not built again')
        .argument('<deployment>', 'the deployment name or id')
        .argument('<from>', 'the endpoint whose revision is promoted (e.g. staging)')
        .argument('<to>', 'the endpoint that takes it (e.g. production)')
        .option('--no-wait', 'do not wait until the data plane serves it'),
      ['slipway endpoints promote my-agent staging production'],
    ).action(
      run(async (ctx, ref: string, from: string, to: string, options: { wait: boolean }) => {
        const client = await ctx.client();
        const deployment = await resolveDeployment(client, ref);
        const endpoint = await client.endpoints.promote(deployment.id, from, to);
        await settle(ctx, client, deployment.id, endpoint, options.wait);
      }),
    ),
  );

  endpoints.addCommand(
    withExample(
      new Command('split')
        .description(
          "Send a share of an endpoint's clients to another revision (each client and LangGraph thread stays on one), or change the share",
        )
        .argument('<deployment>', 'the deployment name or id')
        .argument('<name>', 'the endpoint name (e.g. production)')
        .argument('<revision>', 'the revision id, or its first 4 or more characters')
        .requiredOption('--weight <percent>', 'percent of clients for the revision, 1 to 99')
        .option(
          '--rollback',
          'take the split back by itself when the revision answers more 5xx than the endpoint revision',
        )
        .option('--rollback-window <seconds>', 'the window the rollback compares over (30 to 1800)'),
      ['slipway endpoints split my-agent production 7a2c --weight 10 --rollback'],
    ).action(
      run(
        async (
          ctx,
          ref: string,
          name: string,
          revisionRef: string,
          options: { weight: string; rollback?: boolean; rollbackWindow?: string },
        ) => {
          const weight = Number(options.weight);
          if (!/^\d+$/.test(options.weight) || weight < 1 || weight > 99)
            throw new CliError('--weight must be a whole number of percent from 1 to 99', EXIT.usage);
          const client = await ctx.client();
          const { deployment, revision } = await resolveRevision(client, revisionRef, ref);
          const rollback =
            options.rollback || options.rollbackWindow !== undefined
              ? options.rollbackWindow === undefined
                ? {}
                : { window_seconds: Number(options.rollbackWindow) }
              : undefined;
          const endpoint = await client.endpoints.split(deployment.id, name, revision.id, weight, rollback);
          if (ctx.output.json) return ctx.output.data(endpoint);
          ctx.output.result(
            `${name} sends ${weight}% of its clients to revision ${revision.id}` +
              (endpoint.split?.served ? '' : ' once its instances are healthy') +
              (endpoint.split?.sticky === false
                ? " (per request: the cluster's Gateway keeps no client on a revision)"
                : '') +
              (endpoint.split?.rollback ? ', rolled back by itself if it does worse' : ''),
          );
        },
      ),
    ),
  );

  endpoints.addCommand(
    withExample(
      new Command('unsplit')
        .description("Take an endpoint's traffic split back: every client to the endpoint's revision again")
        .argument('<deployment>', 'the deployment name or id')
        .argument('<name>', 'the endpoint name'),
      ['slipway endpoints unsplit my-agent production'],
    ).action(
      run(async (ctx, ref: string, name: string) => {
        const client = await ctx.client();
        const deployment = await resolveDeployment(client, ref);
        await client.endpoints.unsplit(deployment.id, name);
        if (ctx.output.json) return ctx.output.data({ name, split: null });
        ctx.output.result(`${name} of ${deployment.name} serves its own revision to every client again.`);
      }),
    ),
  );

  endpoints.addCommand(
    withExample(
      new Command('rm')
        .alias('delete')
        .description("Delete an endpoint; its instances are drained and stopped (the deployment's own URL stays)")
        .argument('<deployment>', 'the deployment name or id')
        .argument('<name>', 'the endpoint name')
        .option('-y, --yes', 'do not ask for confirmation'),
      ['slipway endpoints rm my-agent staging --yes'],
    ).action(
      run(async (ctx, ref: string, name: string, options: { yes?: boolean }) => {
        const client = await ctx.client();
        const deployment = await resolveDeployment(client, ref);
        if (!options.yes && !(await confirm(ctx, `Delete endpoint ${name} of ${deployment.name}?`)))
          throw new CliError('not deleted (confirm with --yes)', EXIT.usage);
        await client.endpoints.delete(deployment.id, name);
        if (ctx.output.json) return ctx.output.data({ name, deleted: true });
        ctx.output.result(`Deleted endpoint ${name} of ${deployment.name}.`);
      }),
    ),
  );
  return endpoints;
}
