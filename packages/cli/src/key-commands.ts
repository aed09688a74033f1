/** `slipway keys ls|create|revoke`: API keys of the workspace or organization (admin keys only). */
import { Command, Option } from 'commander';
import type { ApiKey, ApiKeyCreate } from '@slipway/sdk/api-aliases';
import { CliError, EXIT } from './cli-errors.ts';
import { ago, orDash } from './cli-format.ts';
import { withExample, type ActionRunner } from './command-help.ts';
import { confirm } from './cli-prompt.ts';
import { isUuid } from './resource-resolve.ts';

export function keysCommand(run: ActionRunner): Command {
  const keys = withExample(
    new Command('keys').alias('key').description('Create, list and revoke API keys (needs an admin key)'),
    ['slipway keys ls'],
  );

  keys.addCommand(
    withExample(
      new Command('ls')
        .alias('list')
        .description('List API keys (never their values)')
        .option('-a, --all', 'also revoked keys'),
      ['slipway keys ls'],
    ).action(
      run(async (ctx, options: { all?: boolean }) => {
        const client = await ctx.client();
        const rows: ApiKey[] = [];
        for await (const key of client.apiKeys.all()) if (options.all || key.revoked_at === null) rows.push(key);
        if (ctx.output.json) return ctx.output.data(rows);
        ctx.output.table(
          rows,
          [
            { header: 'NAME', value: (k) => k.name },
            { header: 'ROLE', value: (k) => k.role },
            { header: 'PREFIX', value: (k) => k.key_prefix },
            { header: 'SCOPE', value: (k) => (k.workspace_id ? 'workspace' : 'organization') },
            { header: 'ID', value: (k) => k.id },
            { header: 'CREATED', value: (k) => ago(k.created_at) },
            { header: 'REVOKED', value: (k) => (k.revoked_at ? ago(k.revoked_at) : orDash(null)) },
          ],
          'API keys',
        );
      }),
    ),
  );

  keys.addCommand(
    withExample(
      new Command('create')
        .description('Create an API key; its value is printed once')
        .argument('<name>', 'what the key is for (e.g. ci-deploy)')
        .addOption(new Option('--role <role>', 'admin or member').choices(['admin', 'member']).default('member'))
        .option('--organization', 'an organization key (all workspaces) instead of one for the current workspace'),
      ['slipway keys create ci-deploy --role member', 'KEY=$(slipway keys create ci --json | jq -r .key)'],
    ).action(
      run(async (ctx, name: string, options: { role: NonNullable<ApiKeyCreate['role']>; organization?: boolean }) => {
        const client = await ctx.client();
        const created = await client.apiKeys.create({
          name,
          role: options.role,
          ...(options.organization ? { workspace_id: null } : {}),
        });
        if (ctx.output.json) return ctx.output.data(created);
        ctx.output.result(created.key);
        ctx.output.note(
          `Created ${created.role} key ${name} (${created.id}). Keep the key now: it is not shown again.`,
        );
      }),
    ),
  );

  keys.addCommand(
    withExample(
      new Command('revoke')
        .description('Revoke an API key; requests with it fail from now on')
        .argument('<key>', 'the key id, or its name')
        .option('-y, --yes', 'do not ask for confirmation'),
      ['slipway keys revoke ci-deploy --yes'],
    ).action(
      run(async (ctx, ref: string, options: { yes?: boolean }) => {
        const client = await ctx.client();
        let key: ApiKey | undefined;
        for await (const candidate of client.apiKeys.all())
          if (
            candidate.revoked_at === null &&
            (isUuid(ref) ? candidate.id === ref.toLowerCase() : candidate.name === ref)
          )
            key ??= candidate;
        if (!key)
          throw new CliError(`no active API key with id or name '${ref}'`, EXIT.notFound, [
            '`slipway keys ls` lists them.',
          ]);
        if (!options.yes && !(await confirm(ctx, `Revoke API key ${key.name} (${key.key_prefix}...)?`)))
          throw new CliError('not revoked (confirm with --yes)', EXIT.usage);
        await client.apiKeys.revoke(key.id);
        if (ctx.output.json) return ctx.output.data({ id: key.id, revoked: true });
        ctx.output.result(`Revoked API key ${key.name} (${key.id}).`);
      }),
    ),
  );
  return keys;
}
