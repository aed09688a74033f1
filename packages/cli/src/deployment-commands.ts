/**
 * Deployments and their revisions: `deployments ls|get|rm`, `revisions ls`, `rollback`, `interrupt`
 * and `logs`.
 */
import { Command } from 'commander';
import type { Deployment, Listener, LogLine, LogType, Revision } from '@slipway/sdk/api-aliases';
import { agentProtocolAddresses } from '@slipway/sdk/agent-protocols';
import { explainStatus, explanationNeeds } from '@slipway/sdk/deployment-status';
import { ok, type SlipwayClient } from '@slipway/sdk/slipway-client';
import { SlipwayError } from '@slipway/sdk/slipway-error';
import type { CliContext } from './cli-context.ts';
import { CliError, EXIT } from './cli-errors.ts';
import { ago, orDash, styleStatus } from './cli-format.ts';
import { withExample, type ActionRunner } from './command-help.ts';
import { confirm } from './cli-prompt.ts';
import { resolveDeployment, resolveRevision } from './resource-resolve.ts';
import { describeInstances, specOf } from './scale-command.ts';
import { followRevision, printDeployed } from './revision-progress.ts';

export function deploymentsCommand(run: ActionRunner): Command {
  const deployments = withExample(
    new Command('deployments').aliases(['deployment', 'apps']).description('List, show and delete deployments'),
    ['slipway deployments ls', 'slipway deployments get support-agent'],
  );

  deployments.addCommand(listDeploymentsCommand(run, 'deployments ls', 'ls', ['list']));
  deployments.addCommand(showDeploymentCommand(run, 'deployments get', 'get', ['show', 'info', 'status']));
  deployments.addCommand(
    withExample(
      new Command('rm')
        .aliases(['delete', 'destroy'])
        .description('Delete a deployment: its app stops, its database and files are removed')
        .argument('<deployment>', 'name or id')
        .option('-y, --yes', 'do not ask for confirmation (needed when not on a terminal)')
        .option('--delete-tracing-project', 'also delete its tracing project'),
      ['slipway deployments rm support-agent --yes'],
    ).action(
      run(async (ctx, ref: string, options: { yes?: boolean; deleteTracingProject?: boolean }) => {
        const client = await ctx.client();
        const deployment = await resolveDeployment(client, ref);
        if (
          !options.yes &&
          !(await confirm(
            ctx,
            `Delete deployment ${deployment.name} (${deployment.id})? Its app stops and its database is dropped.`,
          ))
        ) {
          throw new CliError('not deleted (confirm with --yes)', EXIT.usage);
        }
        await ok(
          client.api.DELETE('/v2/deployments/{deployment_id}', {
            params: {
              path: { deployment_id: deployment.id },
              query: { delete_tracing_project: options.deleteTracingProject === true },
            },
          }),
        );
        if (ctx.output.json) return ctx.output.data({ id: deployment.id, name: deployment.name, deleted: true });
        ctx.output.result(`Deleted ${deployment.name} (${deployment.id}); its teardown finishes in the background.`);
      }),
    ),
  );
  return deployments;
}

/**
 * `deployments ls`, also `slipway ls` at the top, where users of other PaaS command lines look for it
 * (docs/cli.md, "Aliases").
 */
export function listDeploymentsCommand(run: ActionRunner, path: string, name: string, aliases: string[]): Command {
  return withExample(
    new Command(name)
      .aliases(aliases)
      .description('List the deployments of the workspace, newest first')
      .option(
        '--status <status>',
        'only deployments in this status (READY, UNUSED, AWAITING_DATABASE, AWAITING_DELETE, UNKNOWN)',
      )
      .option('--name-contains <text>', 'only deployments whose name contains this (any case)'),
    [`slipway ${path} --status READY`, `slipway ${path} --json | jq -r ".[].name"`],
  ).action(
    run(async (ctx, options: { status?: Deployment['status']; nameContains?: string }) => {
      const client = await ctx.client();
      const rows: Deployment[] = [];
      for await (const page of client.deployments.pages({
        ...(options.status ? { status: options.status } : {}),
        ...(options.nameContains ? { name_contains: options.nameContains } : {}),
      }))
        rows.push(...page.resources);
      if (ctx.output.json) return ctx.output.data(rows);
      const why = await statusExplanations(client, rows);
      ctx.output.table(
        rows,
        [
          { header: 'NAME', value: (d) => d.name },
          { header: 'STATUS', value: (d) => d.status, style: (text) => styleStatus(ctx.output.out, text) },
          { header: 'WHY', value: (d) => orDash(why.get(d.id)) },
          { header: 'SOURCE', value: (d) => d.source },
          { header: 'ID', value: (d) => d.id },
          { header: 'UPDATED', value: (d) => ago(d.updated_at) },
          { header: 'URL', value: (d) => orDash(d.source_config.custom_url) },
        ],
        'deployments',
      );
    }),
  );
}

/** `deployments get`, also `slipway status` at the top (docs/cli.md, "Aliases"). */
export function showDeploymentCommand(run: ActionRunner, path: string, name: string, aliases: string[]): Command {
  return withExample(
    new Command(name)
      .aliases(aliases)
      .description('Show a deployment, why it has its status, and its latest revision')
      .argument('<deployment>', 'name or id'),
    [`slipway ${path} support-agent`],
  ).action(
    run(async (ctx, ref: string) => {
      const client = await ctx.client();
      const deployment = await resolveDeployment(client, ref);
      const latest = deployment.latest_revision_id
        ? await client.revisions.get(deployment.id, deployment.latest_revision_id)
        : null;
      const listener = explanationNeeds(deployment).listener
        ? await findListener(client, deployment.source_config.listener_id as string)
        : null;
      const why = explainStatus(deployment, latest, listener);
      if (ctx.output.json) return ctx.output.data({ ...deployment, latest_revision: latest, status_detail: why });
      const out = ctx.output.out;
      ctx.output.fields([
        ['name', deployment.name],
        ['id', deployment.id],
        ['status', styleStatus(out, deployment.status)],
        ...(why ? [['why', why] as [string, string]] : []),
        ['source', deployment.source],
        ['url', orDash(deployment.source_config.custom_url)],
        ...protocolFields(deployment.source_config.custom_url, latest?.source_revision_config.framework_config_path),
        [
          'latest revision',
          latest
            ? `${latest.id} ${styleStatus(out, latest.status)}${latest.failure_reason ? ` (${latest.failure_reason})` : ''}`
            : '-',
        ],
        ['active revision', orDash(deployment.active_revision_id)],
        ['secrets', deployment.secrets.map((s) => s.name).join(', ') || '-'],
        ['created', `${deployment.created_at} (${ago(deployment.created_at)})`],
        ['updated', `${deployment.updated_at} (${ago(deployment.updated_at)})`],
      ]);
    }),
  );
}

/** The MCP and A2A addresses of a LangGraph deployment, as fields (none for another app). */
function protocolFields(
  customUrl: string | null | undefined,
  configPath: string | null | undefined,
): [string, string][] {
  const addresses = agentProtocolAddresses(customUrl, configPath);
  return addresses
    ? [
        ['mcp', addresses.mcp],
        ['a2a', addresses.a2a],
        ['agent card', addresses.agentCard],
      ]
    : [];
}

/** A listener by id, or null when it is gone or not visible (the explanation then names its id). */
async function findListener(client: SlipwayClient, listenerId: string): Promise<Listener | null> {
  return client.listeners.get(listenerId).catch((error: unknown) => {
    if (error instanceof SlipwayError && error.status === 404) return null;
    throw error;
  });
}

/**
 * Why each deployment of a list has its status (packages/sdk/src/deployment-status.ts), by id. Only what a
 * row needs is fetched: the latest revision of those not serving it, the listeners once.
 */
async function statusExplanations(client: SlipwayClient, rows: Deployment[]): Promise<Map<string, string>> {
  const needs = rows.map((d) => ({ deployment: d, ...explanationNeeds(d) }));
  const listeners = new Map<string, Listener>();
  if (needs.some((n) => n.listener)) for await (const l of client.listeners.all()) listeners.set(l.id, l);
  const explained = new Map<string, string>();
  // A few at a time: a long list should not open a connection per row at once.
  for (let i = 0; i < needs.length; i += 8) {
    await Promise.all(
      needs.slice(i, i + 8).map(async ({ deployment: d, latestRevision, listener }) => {
        const latest =
          latestRevision && d.latest_revision_id
            ? await client.revisions.get(d.id, d.latest_revision_id).catch((error: unknown) => {
                // Deleted or superseded meanwhile: the row shows its status alone.
                if (error instanceof SlipwayError && error.status === 404) return null;
                throw error;
              })
            : null;
        const why = explainStatus(
          d,
          latest,
          listener ? (listeners.get(String(d.source_config.listener_id)) ?? null) : null,
        );
        if (why) explained.set(d.id, why);
      }),
    );
  }
  return explained;
}

export function revisionsCommand(run: ActionRunner): Command {
  const revisions = withExample(
    new Command('revisions').aliases(['revision', 'releases']).description('List the revisions of a deployment'),
    ['slipway revisions ls support-agent'],
  );
  revisions.addCommand(
    withExample(
      new Command('ls')
        .alias('list')
        .description('List the revisions of a deployment, newest first')
        .argument('<deployment>', 'name or id'),
      ['slipway revisions ls support-agent --json'],
    ).action(
      run(async (ctx, ref: string) => {
        const client = await ctx.client();
        const deployment = await resolveDeployment(client, ref);
        const rows: Revision[] = [];
        for await (const revision of client.revisions.all(deployment.id)) rows.push(revision);
        if (ctx.output.json) return ctx.output.data(rows);
        ctx.output.table(
          rows,
          [
            { header: 'ID', value: (r) => r.id },
            { header: 'STATUS', value: (r) => r.status, style: (text) => styleStatus(ctx.output.out, text) },
            { header: 'ACTIVE', value: (r) => (r.id === deployment.active_revision_id ? 'yes' : '') },
            { header: 'CREATED', value: (r) => ago(r.created_at) },
            { header: 'REASON', value: (r) => orDash(r.failure_reason) },
          ],
          'revisions',
        );
      }),
    ),
  );
  return revisions;
}

export function rollbackCommand(run: ActionRunner): Command {
  return withExample(
    new Command('rollback')
      .alias('redeploy')
      .description(
        'Redeploy what an earlier revision ran (its source, secrets, build commands, cpu and memory) as a new revision, and follow it; the instance counts stay as they are',
      )
      .argument('<revision>', 'the revision id (or, with --deployment, the start of it)')
      .option(
        '-d, --deployment <deployment>',
        "the revision's deployment (name or id); without it every deployment is searched",
      )
      .option('--no-wait', 'return once the new revision is created'),
    ['slipway rollback 7a2c41d0 -d support-agent'],
  ).action(
    run(async (ctx, ref: string, options: { deployment?: string; wait: boolean }) => {
      const client = await ctx.client();
      const { deployment, revision } = await resolveRevision(client, ref, options.deployment);
      const redeployed = await client.revisions.redeploy(deployment.id, revision.id);
      const newRevision = redeployed.latest_revision_id!;
      ctx.output.note(`Redeploying revision ${revision.id} of ${deployment.name} as revision ${newRevision}.`);
      ctx.output.note(
        `Restored from it: the source, secrets, install and build commands, cpu and memory. Kept: ${describeInstances(specOf(redeployed))} (change with: slipway scale ${deployment.name}).`,
      );
      if (!options.wait) {
        if (ctx.output.json) ctx.output.data({ deployment: redeployed, revision_id: newRevision });
        else ctx.output.result(newRevision);
        return;
      }
      printDeployed(ctx, await followRevision(ctx, client, redeployed, newRevision));
    }),
  );
}

export function interruptCommand(run: ActionRunner): Command {
  return withExample(
    new Command('interrupt')
      .description('Stop a revision that is queued, building or starting (it ends INTERRUPTED)')
      .argument('<revision>', 'the revision id (or, with --deployment, the start of it)')
      .option('-d, --deployment <deployment>', "the revision's deployment (name or id)"),
    ['slipway interrupt 7a2c41d0 -d support-agent'],
  ).action(
    run(async (ctx, ref: string, options: { deployment?: string }) => {
      const client = await ctx.client();
      const { deployment, revision } = await resolveRevision(client, ref, options.deployment);
      const interrupted = await client.revisions.interrupt(deployment.id, revision.id);
      if (ctx.output.json) return ctx.output.data(interrupted);
      ctx.output.result(`Revision ${interrupted.id} of ${deployment.name} is ${interrupted.status}.`);
    }),
  );
}

export function logsCommand(run: ActionRunner): Command {
  return withExample(
    new Command('logs')
      .description("Print a revision's app output (or, with --build, its build output); --follow streams it")
      .argument('<deployment>', 'name or id')
      .option(
        '-r, --revision <revision>',
        'the revision (default: the serving one for app output, the latest for --build)',
      )
      .option('-b, --build', 'the build log instead of the app output')
      .option('-f, --follow', 'keep printing new lines until the log ends (a serving app: until Ctrl-C)'),
    ['slipway logs support-agent --follow', 'slipway logs support-agent --build --revision 7a2c41d0'],
  ).action(
    run(async (ctx, ref: string, options: { revision?: string; build?: boolean; follow?: boolean }) => {
      const client = await ctx.client();
      const type: LogType = options.build ? 'build' : 'deploy';
      const deployment = await resolveDeployment(client, ref);
      const revisionId = options.revision
        ? (await resolveRevision(client, options.revision, deployment.id)).revision.id
        : type === 'deploy'
          ? (deployment.active_revision_id ?? deployment.latest_revision_id)
          : deployment.latest_revision_id;
      if (!revisionId)
        throw new CliError(`deployment '${deployment.name}' has no revision yet`, EXIT.notFound, [
          'Deploy it: slipway deploy <dir> --name ' + deployment.name,
        ]);
      if (options.follow) return followLines(ctx, client, deployment.id, revisionId, type);
      let cursor: string | undefined;
      for (;;) {
        const page = await client.logs.page(deployment.id, revisionId, {
          type,
          limit: 1000,
          ...(cursor ? { cursor } : {}),
        });
        for (const line of page.lines) printLine(ctx, line);
        if (page.lines.length < 1000) break;
        cursor = page.next_cursor;
      }
    }),
  );
}

async function followLines(
  ctx: CliContext,
  client: SlipwayClient,
  deploymentId: string,
  revisionId: string,
  type: LogType,
): Promise<void> {
  for await (const event of client.logs.follow(deploymentId, revisionId, { type })) {
    if (event.kind === 'line') printLine(ctx, event.line);
    else if (ctx.output.json) ctx.output.record(event);
    else if (event.kind === 'status')
      ctx.output.note(
        ctx.output.err.dim(`-- revision ${event.status}${event.failure_reason ? ` (${event.failure_reason})` : ''}`),
      );
  }
}

function printLine(ctx: CliContext, line: LogLine): void {
  if (ctx.output.json) return ctx.output.record({ kind: 'line', ...line });
  const out = ctx.output.out;
  const time = out.dim(line.time.slice(11, 19));
  const text =
    line.stream === 'system'
      ? out.cyan(line.message)
      : line.stream === 'stderr'
        ? out.yellow(line.message)
        : line.message;
  ctx.output.result(`${time} ${text}`);
}
