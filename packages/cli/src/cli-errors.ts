/**
 * Exit codes of `slipway` (docs/cli.md lists them) and the one place that turns any failure into a
 * message a user can act on: a SlipwayError from the service, a usage mistake, or a bug (which shows
 * its stack only with SLIPWAY_DEBUG=1).
 */
import { SlipwayError } from '@slipway/sdk/slipway-error';

export const EXIT = {
  ok: 0,
  /** The operation ran and failed: a revision ended in a failure, an unexpected error. */
  failed: 1,
  /** The command line or its input is wrong: an unknown option, a folder without an app config, a request the service refused (400, 409, 422). */
  usage: 2,
  /** Not logged in, or the API key is refused (401, 403). */
  auth: 3,
  /** What the command names does not exist (404, an unknown deployment name). */
  notFound: 4,
  /** The service is unreachable, timed out or failed (5xx). */
  unavailable: 5,
  /** Interrupted with Ctrl-C. */
  interrupted: 130,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** A failure the CLI itself recognised, with the message to print and the exit code. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: ExitCode = EXIT.failed,
    /** Further lines printed under the message (a hint, the last log lines). */
    readonly details: string[] = [],
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/** The message and exit code for any error a command threw. */
export function describeFailure(error: unknown, serviceUrl: string | null): CliError {
  if (error instanceof CliError) return error;
  if (error instanceof SlipwayError) return describeServiceError(error, serviceUrl);
  const message = error instanceof Error ? error.message : String(error);
  return new CliError(`unexpected error: ${message}`, EXIT.failed, [
    'Run again with SLIPWAY_DEBUG=1 for details, and report it if it persists.',
  ]);
}

function describeServiceError(error: SlipwayError, serviceUrl: string | null): CliError {
  const quote = error.requestId ? [`request id: ${error.requestId}`] : [];
  if (error.status === null) {
    // The detail names the address and the reason ("cannot reach http://...: connection refused").
    const hint = serviceUrl
      ? `Check that the service runs at ${serviceUrl}, or point SLIPWAY_URL or \`slipway login --url\` at it.`
      : 'Check that the service runs, and SLIPWAY_URL.';
    return new CliError(error.detail, EXIT.unavailable, [hint]);
  }
  if (error.status === 401) {
    return new CliError(`the service refused the API key: ${error.detail}`, EXIT.auth, [
      'Run `slipway login` with a valid key, or set SLIPWAY_API_KEY.',
      ...quote,
    ]);
  }
  if (error.code === 'workspace_required') {
    // Not a refusal of the key: the command line has to say which workspace it means.
    return new CliError('this organization key has several workspaces: name one', EXIT.usage, [
      'Add --tenant <workspace id>, set SLIPWAY_TENANT_ID, or save one with `slipway login --tenant`.',
    ]);
  }
  if (error.status === 403) return new CliError(`not allowed: ${error.detail}`, EXIT.auth, quote);
  if (error.status === 404) return new CliError(error.detail, EXIT.notFound, quote);
  if (error.status >= 500)
    return new CliError(`the service failed (${error.status} ${error.code}): ${error.detail}`, EXIT.unavailable, quote);
  const issues = error.issues.map((issue) => `${issue.loc.join('.')}: ${issue.msg}`);
  return new CliError(
    issues.length > 0 ? 'the service refused the request:' : `the service refused the request: ${error.detail}`,
    EXIT.usage,
    [...issues, ...quote],
  );
}
