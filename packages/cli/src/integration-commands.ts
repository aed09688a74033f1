/**
 * `slipway integrations ls|get|rm|repos|deliveries`: code-host integrations (docs/codehost.md).
 * Creating one takes a token or a GitHub App's private key, which belongs in a request body rather
 * than on a command line: see docs/codehost.md for the request.
 */
import { Command } from 'commander';
import type { CodehostDelivery, CodehostIntegration } from '@slipway/sdk/api-aliases';
import { CliError, EXIT } from './cli-errors.ts';
import { ago, orDash, styleStatus } from './cli-format.ts';
import { withExample, type ActionRunner } from './command-help.ts';
import { confirm } from './cli-prompt.ts';
import { isUuid } from './resource-resolve.ts';
import type { SlipwayClient } from '@slipway/sdk/slipway-client';

async function resolveIntegration(client: SlipwayClient, ref: string): Promise<CodehostIntegration> {
  for await (const integration of client.integrations.all())
    if (integration.id === ref.toLowerCase() || (!isUuid(ref) && integration.name === ref)) return integration;
  throw new CliError(`no code-host integration with id or name '${ref}'`, EXIT.notFound, [
    '`slipway integrations ls` lists them.',
  ]);
}

export function integrationsCommand(run: ActionRunner): Command {
  const integrations = withExample(
    new Command('integrations')
      .alias('integration')
      .description('Code-host integrations: list them, their repositories and webhook deliveries'),
    ['slipway integrations ls'],
  );

  integrations.addCommand(
    withExample(new Command('ls').alias('list').description('List the code-host integrations of the workspace'), [
      'slipway integrations ls',
    ]).action(
      run(async (ctx) => {
        const client = await ctx.client();
        const rows: CodehostIntegration[] = [];
        for await (const integration of client.integrations.all()) rows.push(integration);
        if (ctx.output.json) return ctx.output.data(rows);
        ctx.output.table(
          rows,
          [
            { header: 'NAME', value: (i) => i.name },
            { header: 'KIND', value: (i) => i.kind },
            { header: 'API URL', value: (i) => i.api_url },
            { header: 'ID', value: (i) => i.id },
            { header: 'CREATED', value: (i) => ago(i.created_at) },
          ],
          'code-host integrations',
        );
      }),
    ),
  );

  integrations.addCommand(
    withExample(new Command('get').description('Show an integration').argument('<integration>', 'id or name'), [
      'slipway integrations get github',
    ]).action(
      run(async (ctx, ref: string) => {
        const client = await ctx.client();
        const integration = await resolveIntegration(client, ref);
        if (ctx.output.json) return ctx.output.data(integration);
        ctx.output.fields([
          ['name', integration.name],
          ['id', integration.id],
          ['kind', integration.kind],
          ['api url', integration.api_url],
          ['app id', orDash(integration.app_id)],
          ['installation', orDash(integration.installation_id)],
          ['webhook url', integration.webhook_url],
          ['created', integration.created_at],
        ]);
      }),
    ),
  );

  integrations.addCommand(
    withExample(
      new Command('repos')
        .description('List the repositories an integration reaches')
        .argument('<integration>', 'id or name'),
      ['slipway integrations repos github'],
    ).action(
      run(async (ctx, ref: string) => {
        const client = await ctx.client();
        const repos = await client.integrations.repositories((await resolveIntegration(client, ref)).id);
        if (ctx.output.json) return ctx.output.data(repos);
        ctx.output.table(
          repos,
          [
            { header: 'REPOSITORY', value: (r) => `${r.owner}/${r.name}` },
            { header: 'DEFAULT BRANCH', value: (r) => r.default_branch },
            { header: 'URL', value: (r) => r.url },
          ],
          'repositories',
        );
      }),
    ),
  );

  integrations.addCommand(
    withExample(
      new Command('deliveries')
        .description('List the webhook deliveries an integration received, newest first')
        .argument('<integration>', 'id or name'),
      ['slipway integrations deliveries github'],
    ).action(
      run(async (ctx, ref: string) => {
        const client = await ctx.client();
        const integration = await resolveIntegration(client, ref);
        const rows: CodehostDelivery[] = [];
        for await (const delivery of client.integrations.deliveries(integration.id).all()) rows.push(delivery);
        if (ctx.output.json) return ctx.output.data(rows);
        ctx.output.table(
          rows,
          [
            { header: 'RECEIVED', value: (d) => ago(d.received_at) },
            { header: 'OUTCOME', value: (d) => d.outcome, style: (text) => styleStatus(ctx.output.out, text) },
            { header: 'REPOSITORY', value: (d) => orDash(d.repository) },
            { header: 'REF', value: (d) => orDash(d.ref) },
            { header: 'REASON', value: (d) => d.reason },
          ],
          'deliveries',
        );
      }),
    ),
  );

  integrations.addCommand(
    withExample(
      new Command('rm')
        .alias('delete')
        .description('Delete an integration (needs an admin key)')
        .argument('<integration>', 'id or name')
        .option('-y, --yes', 'do not ask for confirmation'),
      ['slipway integrations rm github --yes'],
    ).action(
      run(async (ctx, ref: string, options: { yes?: boolean }) => {
        const client = await ctx.client();
        const integration = await resolveIntegration(client, ref);
        if (
          !options.yes &&
          !(await confirm(ctx, `Delete code-host integration ${integration.name} (${integration.id})?`))
        )
          throw new CliError('not deleted (confirm with --yes)', EXIT.usage);
        await client.integrations.delete(integration.id);
        if (ctx.output.json) return ctx.output.data({ id: integration.id, deleted: true });
        ctx.output.result(`Deleted integration ${integration.name}.`);
      }),
    ),
  );
  return integrations;
}
