/**
 * Commands name things the way people do: a deployment by its name or id, a revision by its id (or
 * an id prefix within a deployment), a listener by id or compute_id. These turn such a name into the
 * resource, or into a not-found error that says how to list what exists.
 */
import type { Deployment, Listener, Revision } from '@slipway/sdk/api-aliases';
import type { SlipwayClient } from '@slipway/sdk/slipway-client';
import { SlipwayError } from '@slipway/sdk/slipway-error';
import { CliError, EXIT } from './cli-errors.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (value: string): boolean => UUID.test(value);

const isNotFound = (error: unknown) => error instanceof SlipwayError && error.status === 404;

export async function resolveDeployment(client: SlipwayClient, ref: string): Promise<Deployment> {
  if (isUuid(ref)) {
    try {
      return await client.deployments.get(ref);
    } catch (error) {
      if (!isNotFound(error)) throw error;
      // A name may look like anything; an id that is not one may still be a name below.
    }
  }
  const found = await client.deployments.findByName(ref);
  if (found) return found;
  throw new CliError(`no deployment named '${ref}' in this workspace`, EXIT.notFound, [
    '`slipway deployments ls` lists them.',
  ]);
}

/**
 * A revision by id. With a deployment, an id prefix of 4 or more characters will do (tables show
 * ids whole, but people type the start); without one every deployment is searched for the id.
 */
export async function resolveRevision(
  client: SlipwayClient,
  ref: string,
  deploymentRef: string | undefined,
): Promise<{ deployment: Deployment; revision: Revision }> {
  if (deploymentRef !== undefined) {
    const deployment = await resolveDeployment(client, deploymentRef);
    if (isUuid(ref)) {
      try {
        return { deployment, revision: await client.revisions.get(deployment.id, ref) };
      } catch (error) {
        if (!isNotFound(error)) throw error;
        throw new CliError(`deployment '${deployment.name}' has no revision ${ref}`, EXIT.notFound, [
          `\`slipway revisions ls ${deployment.name}\` lists them.`,
        ]);
      }
    }
    const prefix = ref.toLowerCase();
    if (prefix.length < 4)
      throw new CliError(`revision '${ref}': give the id, or at least its first 4 characters`, EXIT.usage);
    const matches: Revision[] = [];
    for await (const revision of client.revisions.all(deployment.id))
      if (revision.id.startsWith(prefix)) matches.push(revision);
    if (matches.length === 1) return { deployment, revision: matches[0]! };
    if (matches.length > 1)
      throw new CliError(
        `revision '${ref}' is ambiguous: ${matches.length} revisions of '${deployment.name}' start with it`,
        EXIT.usage,
      );
    throw new CliError(`deployment '${deployment.name}' has no revision starting with '${ref}'`, EXIT.notFound, [
      `\`slipway revisions ls ${deployment.name}\` lists them.`,
    ]);
  }
  if (!isUuid(ref))
    throw new CliError(
      `revision '${ref}' is not a revision id; give the whole id, or its start with --deployment`,
      EXIT.usage,
    );
  for await (const deployment of client.deployments.all()) {
    try {
      return { deployment, revision: await client.revisions.get(deployment.id, ref) };
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
  throw new CliError(`no revision ${ref} in any deployment of this workspace`, EXIT.notFound);
}

export async function resolveListener(client: SlipwayClient, ref: string): Promise<Listener> {
  if (isUuid(ref)) {
    try {
      return await client.listeners.get(ref);
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
  for await (const listener of client.listeners.all()) if (listener.compute_id === ref) return listener;
  throw new CliError(`no listener with id or compute_id '${ref}' in this workspace`, EXIT.notFound, [
    '`slipway listeners ls` lists them.',
  ]);
}
