/** `slipway listeners ls|create|rm`: the Kubernetes clusters deployments can run on (docs/listener.md). */
import { Command } from 'commander';
import type { Listener } from '@slipway/sdk/api-aliases';
import { CliError, EXIT } from './cli-errors.ts';
import { ago, orDash, styleStatus } from './cli-format.ts';
import { withExample, type ActionRunner } from './command-help.ts';
import { confirm } from './cli-prompt.ts';
import { resolveListener } from './resource-resolve.ts';

export function listenersCommand(run: ActionRunner): Command {
  const listeners = withExample(
    new Command('listeners')
      .alias('listener')
      .description("Register, list and remove listeners (your clusters' agents)"),
    ['slipway listeners ls'],
  );

  listeners.addCommand(
    withExample(new Command('ls').alias('list').description('List the listeners of the workspace'), [
      'slipway listeners ls --json',
    ]).action(
      run(async (ctx) => {
        const client = await ctx.client();
        const rows: Listener[] = [];
        for await (const listener of client.listeners.all()) rows.push(listener);
        if (ctx.output.json) return ctx.output.data(rows);
        ctx.output.table(
          rows,
          [
            { header: 'COMPUTE ID', value: (l) => l.compute_id },
            { header: 'STATE', value: (l) => l.state, style: (text) => styleStatus(ctx.output.out, text) },
            { header: 'NAMESPACES', value: (l) => l.compute_config.k8s_namespaces.join(',') },
            { header: 'ID', value: (l) => l.id },
            { header: 'LAST SEEN', value: (l) => ago(l.last_seen_at) },
            { header: 'AGENT', value: (l) => orDash(l.agent_version) },
          ],
          'listeners',
        );
      }),
    ),
  );

  listeners.addCommand(
    withExample(
      new Command('create')
        .description('Register a Kubernetes cluster as a listener')
        .argument('<compute_id>', 'your name for the cluster, unique in the workspace (e.g. prod-eu-1)')
        .requiredOption('--namespace <namespace...>', 'the namespaces deployments may use (one or more)')
        .option('--listener-version <version>', 'the listener version you run', '0.1.0'),
      ['slipway listeners create prod-eu-1 --namespace agents'],
    ).action(
      run(async (ctx, computeId: string, options: { namespace: string[]; listenerVersion: string }) => {
        const client = await ctx.client();
        const listener = await client.listeners.create({
          compute_type: 'k8s',
          compute_id: computeId,
          compute_config: { k8s_namespaces: options.namespace },
          version: options.listenerVersion,
        });
        if (ctx.output.json) return ctx.output.data(listener);
        ctx.output.result(listener.id);
        ctx.output.note(
          `Registered listener ${computeId}. Give its agent a credential: POST /v2/listeners/${listener.id}/credentials (docs/listener.md).`,
        );
      }),
    ),
  );

  listeners.addCommand(
    withExample(
      new Command('rm')
        .alias('delete')
        .description('Remove a listener (refused while deployments use it)')
        .argument('<listener>', 'id or compute_id')
        .option('-y, --yes', 'do not ask for confirmation'),
      ['slipway listeners rm prod-eu-1 --yes'],
    ).action(
      run(async (ctx, ref: string, options: { yes?: boolean }) => {
        const client = await ctx.client();
        const listener = await resolveListener(client, ref);
        if (!options.yes && !(await confirm(ctx, `Remove listener ${listener.compute_id} (${listener.id})?`)))
          throw new CliError('not removed (confirm with --yes)', EXIT.usage);
        await client.listeners.delete(listener.id);
        if (ctx.output.json) return ctx.output.data({ id: listener.id, deleted: true });
        ctx.output.result(`Removed listener ${listener.compute_id}.`);
      }),
    ),
  );
  return listeners;
}
