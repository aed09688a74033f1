/**
 * `slipway deploy [dir]`: pack the folder, upload it through an upload URL (the flow LangChain's CLI
 * uses too: POST .../upload-url, PUT the tarball there), create the deployment or patch it when one of
 * that name exists, and follow the new revision to its end. With `--image` a container image is
 * deployed instead: on the own data plane, or with `--listener` on a listener's cluster. A folder's app
 * config is checked first, with the service's own rules (given by the service package, which owns them:
 * src/cli/cli-program.ts), so a mistake in it creates nothing.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { Command } from 'commander';
import type { Deployment, DeploymentCreate, DeploymentPatch, DeploymentSource, Secret } from '@slipway/sdk/api-aliases';
import type { SlipwayClient } from '@slipway/sdk/slipway-client';
import { SlipwayError } from '@slipway/sdk/slipway-error';
import type { CliContext } from './cli-context.ts';
import { CliError, EXIT } from './cli-errors.ts';
import { withExample, type ActionRunner } from './command-help.ts';
import { resolveListener } from './resource-resolve.ts';
import { followRevision, printDeployed } from './revision-progress.ts';
import { readSecrets, type SecretInput } from './secrets-input.ts';
import { packSource, type PackedSource } from './source-pack.ts';

/** App config files looked for when --config is not given, in this order (docs/app-config.md). */
const APP_CONFIG_FILES = ['slipway.json', 'langgraph.json'];
const DNS_LABEL = /^[a-z][a-z0-9-]{0,62}$/;
/** Secret values are never shown; sending this keeps the stored value (docs/lifecycle.md). */
const KEEP_SECRET = '********';

/**
 * Checks a folder's app config before anything is created or uploaded, and returns the mistake in the
 * service's words, or null when it is fine. The rules are the service's data plane's; the `slipway`
 * command of a Slipway installation passes them in (src/cli/cli-program.ts). Without it, a mistake
 * shows only as a failed build.
 */
export type AppConfigCheck = (
  folder: string,
  configPath: string,
  overrides: { install_command?: string | null; build_command?: string | null },
) => Promise<string | null>;

interface DeployOptions {
  name?: string;
  config?: string;
  secret: string[];
  secretsFile?: string;
  wait: boolean;
  image?: string;
  listener?: string;
  namespace?: string;
}

export function deployCommand(run: ActionRunner, checkAppConfig?: AppConfigCheck): Command {
  const command = new Command('deploy')
    .description('Deploy a folder (or a container image) and follow it until it serves')
    .argument('[dir]', 'the app folder; it needs an app config (slipway.json or langgraph.json)', '.')
    .option(
      '-n, --name <name>',
      "deployment name (default: the folder's name); an existing deployment of this name gets a new revision",
    )
    .option('-c, --config <path>', 'app config file inside the folder (default: slipway.json, else langgraph.json)')
    .option(
      '-s, --secret <NAME=VALUE>',
      'a secret for the app (repeatable); other secrets of an existing deployment are kept',
      collect,
      [],
    )
    .option('--secrets-file <file>', 'secrets from a dotenv file (NAME=VALUE lines); --secret wins for the same name')
    .option('--no-wait', 'return once the revision is created, without following it')
    .option('--image <uri>', 'deploy this container image instead of a folder')
    .option('--listener <id|compute_id>', "run the image on this listener's cluster (source external_container)")
    .option('--namespace <namespace>', "with --listener: the cluster namespace (one of the listener's)");
  return withExample(command, [
    'slipway deploy ./support-agent --name support-agent --secret OPENAI_API_KEY=sk-...',
    'slipway deploy --image ghcr.io/acme/agent:1.4 --listener prod-eu-1 --name agent',
  ]).action(
    run(async (ctx, dir: string, options: DeployOptions) => {
      if (options.listener !== undefined && options.image === undefined)
        throw new CliError('--listener needs --image: a listener runs container images', EXIT.usage);
      if (options.namespace !== undefined && options.listener === undefined)
        throw new CliError('--namespace goes with --listener', EXIT.usage);
      const secrets = await readSecrets(options.secret, options.secretsFile);
      const client = await ctx.client();
      const result =
        options.image !== undefined
          ? await deployImage(ctx, client, dir, options.image, options, secrets)
          : await deployFolder(ctx, client, dir, options, secrets, checkAppConfig);
      if (!options.wait) {
        if (ctx.output.json) ctx.output.data({ deployment: result.deployment, revision_id: result.revisionId });
        else ctx.output.result(result.revisionId);
        ctx.output.note(
          `Revision ${result.revisionId} of ${result.deployment.name} is queued. Follow it: slipway logs ${result.deployment.name} --build --follow`,
        );
        return;
      }
      printDeployed(ctx, await followRevision(ctx, client, result.deployment, result.revisionId));
    }),
  );
}

const collect = (value: string, previous: string[]) => [...previous, value];

interface Started {
  deployment: Deployment;
  revisionId: string;
}

async function deployFolder(
  ctx: CliContext,
  client: SlipwayClient,
  dir: string,
  options: DeployOptions,
  secrets: SecretInput[],
  check: AppConfigCheck | undefined,
): Promise<Started> {
  const folder = path.resolve(dir);
  const stat = await fs.stat(folder).catch(() => null);
  if (!stat?.isDirectory()) throw new CliError(`${dir} is not a folder`, EXIT.usage);
  const configPath = await findAppConfig(folder, dir, options.config);
  const name = deploymentName(options.name, folder);

  const existing = await client.deployments.findByName(name);
  if (existing && existing.source !== 'internal_source') {
    throw new CliError(
      `deployment '${name}' is a ${existing.source} deployment; a folder deploys as internal_source`,
      EXIT.usage,
      ['Pick another --name, or deploy it with --image.'],
    );
  }
  if (check) await checkAppConfig(check, folder, configPath, existing);
  ctx.output.note(`Packing ${dir} ...`);
  const packed = await packSource(folder);
  ctx.output.note(`Packed ${packed.files.length} files (${formatBytes(packed.tarball.length)}).`);
  await refuseTooLarge(client, folder, dir, packed);

  let deployment = existing;
  if (!deployment) {
    // Made without a source first (no revision yet): the upload URL belongs to a deployment.
    deployment = await client.deployments.create({ name, source: 'internal_source', source_config: {}, secrets });
    ctx.output.note(`Created deployment ${name} (${deployment.id}).`);
  }
  const target = await client.uploads.url(deployment.id);
  await client.uploads.put(target.upload_url, packed.tarball);
  const patch: DeploymentPatch = {
    source_revision_config: { source_tarball_path: target.object_path, framework_config_path: configPath },
  };
  if (existing && secrets.length > 0) patch.secrets = mergeSecrets(existing, secrets);
  const patched = await client.deployments.update(deployment.id, patch);
  if (!patched.latest_revision_id) throw new CliError(`the service made no revision for ${name}`, EXIT.failed);
  return { deployment: patched, revisionId: patched.latest_revision_id };
}

async function deployImage(
  ctx: CliContext,
  client: SlipwayClient,
  dir: string,
  image: string,
  options: DeployOptions,
  secrets: SecretInput[],
): Promise<Started> {
  if (dir !== '.') throw new CliError('give either a folder or --image, not both', EXIT.usage);
  if (options.name === undefined)
    throw new CliError('--image needs --name: there is no folder to name the deployment after', EXIT.usage);
  const name = deploymentName(options.name, '');
  const listener = options.listener !== undefined ? await resolveListener(client, options.listener) : null;
  const source: DeploymentSource = listener ? 'external_container' : 'internal_container';
  const existing = await client.deployments.findByName(name);
  if (existing) {
    if (existing.source !== source)
      throw new CliError(
        `deployment '${name}' is a ${existing.source} deployment, not ${source}`,
        EXIT.usage,
        [listener ? '' : 'Add --listener to deploy on a listener.'].filter(Boolean),
      );
    const patch: DeploymentPatch = { source_revision_config: { image_uri: image } };
    if (secrets.length > 0) patch.secrets = mergeSecrets(existing, secrets);
    const patched = await client.deployments.update(existing.id, patch);
    return { deployment: patched, revisionId: patched.latest_revision_id! };
  }
  const revision = { image_uri: image };
  const body: DeploymentCreate = listener
    ? {
        name,
        source: 'external_container',
        source_config: {
          listener_id: listener.id,
          ...(options.namespace ? { listener_config: { k8s_namespace: options.namespace } } : {}),
        },
        source_revision_config: revision,
        secrets,
      }
    : { name, source: 'internal_container', source_config: {}, source_revision_config: revision, secrets };
  const created = await client.deployments.create(body);
  ctx.output.note(`Created deployment ${name} (${created.id}).`);
  if (!created.latest_revision_id) throw new CliError(`the service made no revision for ${name}`, EXIT.failed);
  return { deployment: created, revisionId: created.latest_revision_id };
}

/**
 * Refuses a packed folder larger than the service takes, before anything is created or uploaded (the
 * service would refuse it only once it all arrived, after a deployment was made for it: issue 34). A
 * service too old to tell its limit (404) is left to refuse the upload itself.
 */
async function refuseTooLarge(client: SlipwayClient, folder: string, shown: string, packed: PackedSource) {
  const limits = await client.uploads.limits().catch((error: unknown) => {
    if (error instanceof SlipwayError && error.status === 404) return null;
    throw error;
  });
  if (limits === null || packed.tarball.length <= limits.max_bytes) return;
  const sizes = await Promise.all(
    packed.files.map(async (file) => ({ file, size: (await fs.lstat(path.join(folder, file))).size })),
  );
  const largest = sizes
    .sort((a, b) => b.size - a.size)
    .slice(0, 3)
    .map((f) => `${f.file} (${formatBytes(f.size)})`);
  throw new CliError(
    `${shown} packs to ${formatBytes(packed.tarball.length)}, more than the ${formatBytes(limits.max_bytes)} this service takes (its setting ${limits.setting})`,
    EXIT.usage,
    [
      'Nothing was created or uploaded.',
      `The largest files packed: ${largest.join(', ')}.`,
      'Leave files out with a .slipwayignore in the folder (the rules of .gitignore, which is followed too; node_modules and .git are never packed), or have the operator raise the limit.',
    ],
  );
}

/**
 * Checks the app config as the service's data plane will (the same rules and words), before anything
 * is created or uploaded: a mistake would otherwise be found only after the deployment was made, as a
 * failed build.
 */
async function checkAppConfig(
  check: AppConfigCheck,
  folder: string,
  configPath: string,
  existing: Deployment | null,
): Promise<void> {
  const { install_command, build_command } = existing?.source_config ?? {};
  const mistake = await check(folder, configPath, { install_command, build_command });
  if (mistake !== null)
    throw new CliError(mistake, EXIT.usage, [
      'Nothing was created or uploaded. docs/app-config.md lists the fields of the file.',
    ]);
}

/** The config file to name in framework_config_path; a folder without one cannot be built. */
async function findAppConfig(folder: string, shown: string, given: string | undefined): Promise<string> {
  const candidates = given !== undefined ? [given] : APP_CONFIG_FILES;
  for (const candidate of candidates) {
    const relative = path.posix.normalize(candidate.split(path.sep).join('/'));
    if (path.posix.isAbsolute(relative) || relative.startsWith('../'))
      throw new CliError(`--config ${candidate}: give a path inside the folder`, EXIT.usage);
    if ((await fs.stat(path.join(folder, relative)).catch(() => null))?.isFile()) return relative;
  }
  if (given !== undefined) throw new CliError(`${shown} has no app config ${given}`, EXIT.usage);
  throw new CliError(
    `${shown} has no app config: add a slipway.json (see docs/app-config.md; {} is enough for a Node app with a start script) or name one with --config`,
    EXIT.usage,
  );
}

/** --name, else the folder's name made into a DNS label ("My Agent" -> "my-agent"). */
function deploymentName(given: string | undefined, folder: string): string {
  if (given !== undefined) {
    if (!DNS_LABEL.test(given))
      throw new CliError(
        `--name ${given}: a deployment name is lowercase letters, digits and -, starting with a letter, at most 63 characters`,
        EXIT.usage,
      );
    return given;
  }
  const derived = path
    .basename(folder)
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^[^a-z]+/, '')
    .replace(/-+/g, '-')
    .slice(0, 63)
    .replace(/-+$/, '');
  if (!DNS_LABEL.test(derived))
    throw new CliError(
      `cannot make a deployment name of the folder name '${path.basename(folder)}': pass --name`,
      EXIT.usage,
    );
  return derived;
}

/** The deployment's secrets with the given ones set: a list replaces the whole set, so the others are sent as "keep". */
function mergeSecrets(existing: Deployment, given: SecretInput[]): Secret[] {
  const merged = new Map<string, string>(existing.secrets.map((secret) => [secret.name, KEEP_SECRET]));
  for (const secret of given) merged.set(secret.name, secret.value);
  return [...merged].map(([name, value]) => ({ name, value }));
}

function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}
