/**
 * `slipway login` stores the service address and an API key (checked against the service first) in
 * the user's config file; `slipway logout` removes it. In CI, set SLIPWAY_URL and SLIPWAY_API_KEY
 * instead: they win over the file.
 */
import { text } from 'node:stream/consumers';
import { Command } from 'commander';
import { SlipwayClient } from '@slipway/sdk/slipway-client';
import { SlipwayError } from '@slipway/sdk/slipway-error';
import { DEFAULT_URL, removeStoredConfig, writeStoredConfig } from './cli-config.ts';
import { CliError, EXIT } from './cli-errors.ts';
import { withExample, type ActionRunner } from './command-help.ts';
import { ask, canPrompt } from './cli-prompt.ts';

export function loginCommand(run: ActionRunner, version: string): Command {
  return withExample(
    new Command('login')
      .description('Check an API key against the service and save both for later commands')
      .option('--api-key <key>', 'the key (default: asked for at the terminal, or read from stdin)'),
    ['slipway login --url http://127.0.0.1:8124', 'echo "$KEY" | slipway login --url https://slipway.example.com'],
  ).action(
    run(async (ctx, options: { apiKey?: string }) => {
      const interactive = canPrompt();
      const flagUrl = ctx.options.url ?? ctx.environment.url;
      const url = (
        flagUrl ?? (interactive ? (await ask(`Service URL [${DEFAULT_URL}]: `)) || DEFAULT_URL : DEFAULT_URL)
      ).replace(/\/+$/, '');
      try {
        new URL(url);
      } catch {
        throw new CliError(`--url ${url}: not a URL (e.g. http://127.0.0.1:8124)`, EXIT.usage);
      }
      const apiKey =
        options.apiKey ?? (interactive ? await ask('API key: ', { hidden: true }) : (await text(process.stdin)).trim());
      if (!apiKey)
        throw new CliError('no API key given', EXIT.usage, [
          'Pass --api-key, type it at the prompt, or pipe it on stdin.',
        ]);
      const tenantId = ctx.options.tenant ?? null;

      const client = new SlipwayClient({
        baseUrl: url,
        apiKey,
        tenantId,
        userAgent: `slipway-cli/${version}`,
        maxRetries: 1,
      });
      try {
        await client.deployments.page({ limit: 1 });
      } catch (error) {
        if (error instanceof SlipwayError && error.code === 'workspace_required') {
          throw new CliError(
            'this organization key has several workspaces: pick one with --tenant <workspace id>',
            EXIT.usage,
          );
        }
        throw error;
      }
      await writeStoredConfig(ctx.environment.configFile, { url, api_key: apiKey, tenant_id: tenantId });
      if (ctx.output.json) return ctx.output.data({ url, config_file: ctx.environment.configFile });
      ctx.output.result(`Logged in to ${url}; saved to ${ctx.environment.configFile}.`);
      if (ctx.environment.apiKey) ctx.output.warn('SLIPWAY_API_KEY is set in this shell: it wins over the saved key.');
    }),
  );
}

export function logoutCommand(run: ActionRunner): Command {
  return withExample(new Command('logout').description('Remove the saved service address and API key'), [
    'slipway logout',
  ]).action(
    run(async (ctx) => {
      const removed = await removeStoredConfig(ctx.environment.configFile);
      if (ctx.output.json) return ctx.output.data({ config_file: ctx.environment.configFile, removed });
      ctx.output.result(removed ? `Removed ${ctx.environment.configFile}.` : 'Not logged in.');
    }),
  );
}
