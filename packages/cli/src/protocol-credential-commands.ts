/**
 * `slipway protocol-credentials ls|create|revoke <deployment>`: the credentials callers send to a
 * deployment's MCP (/mcp) and A2A (/a2a) endpoints when it requires one (SLIPWAY_PROTOCOLS_AUTH=credential,
 * docs/langgraph.md). Creating and revoking need an admin key; lists never show a credential.
 */
import { Command } from 'commander';
import type { ProtocolCredential } from '@slipway/sdk/api-aliases';
import { CliError, EXIT } from './cli-errors.ts';
import { ago, orDash } from './cli-format.ts';
import { withExample, type ActionRunner } from './command-help.ts';
import { confirm } from './cli-prompt.ts';
import { isUuid, resolveDeployment } from './resource-resolve.ts';

export function protocolCredentialsCommand(run: ActionRunner): Command {
  const credentials = withExample(
    new Command('protocol-credentials')
      .alias('protocol-credential')
      .description("Create, list and revoke credentials for a deployment's MCP and A2A endpoints"),
    ['slipway protocol-credentials create my-agent --name claude-desktop'],
  );

  credentials.addCommand(
    withExample(
      new Command('ls')
        .alias('list')
        .description("List a deployment's protocol credentials (never the credentials themselves)")
        .argument('<deployment>', 'the deployment name or id')
        .option('-a, --all', 'also revoked credentials'),
      ['slipway protocol-credentials ls my-agent'],
    ).action(
      run(async (ctx, ref: string, options: { all?: boolean }) => {
        const client = await ctx.client();
        const deployment = await resolveDeployment(client, ref);
        const rows: ProtocolCredential[] = [];
        for await (const credential of client.protocolCredentials.all(deployment.id))
          if (options.all || credential.revoked_at === null) rows.push(credential);
        if (ctx.output.json) return ctx.output.data(rows);
        ctx.output.table(
          rows,
          [
            { header: 'NAME', value: (c) => c.name },
            { header: 'PREFIX', value: (c) => c.credential_prefix },
            { header: 'ID', value: (c) => c.id },
            { header: 'CREATED', value: (c) => ago(c.created_at) },
            { header: 'LAST USED', value: (c) => (c.last_used_at ? ago(c.last_used_at) : orDash(null)) },
            { header: 'REVOKED', value: (c) => (c.revoked_at ? ago(c.revoked_at) : orDash(null)) },
          ],
          `protocol credentials of ${deployment.name}`,
        );
      }),
    ),
  );

  credentials.addCommand(
    withExample(
      new Command('create')
        .description('Create a credential for the MCP and A2A endpoints of a deployment; it is printed once')
        .argument('<deployment>', 'the deployment name or id')
        .option('--name <name>', 'what it is for (e.g. claude-desktop)'),
      [
        'slipway protocol-credentials create my-agent --name claude-desktop',
        'TOKEN=$(slipway protocol-credentials create my-agent --json | jq -r .credential)',
      ],
    ).action(
      run(async (ctx, ref: string, options: { name?: string }) => {
        const client = await ctx.client();
        const deployment = await resolveDeployment(client, ref);
        const created = await client.protocolCredentials.create(
          deployment.id,
          options.name === undefined ? {} : { name: options.name },
        );
        if (ctx.output.json) return ctx.output.data(created);
        ctx.output.result(created.credential);
        ctx.output.note(
          `Created protocol credential ${created.name} (${created.id}) for ${deployment.name}. ` +
            'Keep it now: it is not shown again. Callers send it as Authorization: Bearer <credential> ' +
            'to /mcp and /a2a when the deployment sets SLIPWAY_PROTOCOLS_AUTH=credential.',
        );
      }),
    ),
  );

  credentials.addCommand(
    withExample(
      new Command('revoke')
        .alias('rm')
        .description('Revoke a protocol credential; the deployment refuses it within 10 seconds')
        .argument('<deployment>', 'the deployment name or id')
        .argument('<credential>', 'the credential id, or its name')
        .option('-y, --yes', 'do not ask for confirmation'),
      ['slipway protocol-credentials revoke my-agent claude-desktop --yes'],
    ).action(
      run(async (ctx, ref: string, credentialRef: string, options: { yes?: boolean }) => {
        const client = await ctx.client();
        const deployment = await resolveDeployment(client, ref);
        let credential: ProtocolCredential | undefined;
        for await (const candidate of client.protocolCredentials.all(deployment.id))
          if (
            candidate.revoked_at === null &&
            (isUuid(credentialRef) ? candidate.id === credentialRef.toLowerCase() : candidate.name === credentialRef)
          )
            credential ??= candidate;
        if (!credential)
          throw new CliError(
            `deployment '${deployment.name}' has no active protocol credential with id or name '${credentialRef}'`,
            EXIT.notFound,
            [`\`slipway protocol-credentials ls ${deployment.name}\` lists them.`],
          );
        if (
          !options.yes &&
          !(await confirm(
            ctx,
            `Revoke protocol credential ${credential.name} (${credential.credential_prefix}...) of ${deployment.name}?`,
          ))
        )
          throw new CliError('not revoked (confirm with --yes)', EXIT.usage);
        await client.protocolCredentials.revoke(deployment.id, credential.id);
        if (ctx.output.json) return ctx.output.data({ id: credential.id, revoked: true });
        ctx.output.result(`Revoked protocol credential ${credential.name} (${credential.id}) of ${deployment.name}.`);
      }),
    ),
  );
  return credentials;
}
