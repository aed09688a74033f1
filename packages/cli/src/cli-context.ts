/**
 * What every command's action gets: the output (JSON or tables, colours), and the client made from
 * the resolved connection. Global options (`--json`, `--url`, `--tenant`) are read here, wherever on
 * the command line they were given.
 */
import type { Command } from 'commander';
import { SlipwayClient } from '@slipway/sdk/slipway-client';
import { resolveConnection, type CliEnvironment, type Connection } from './cli-config.ts';
import { CliError, EXIT } from './cli-errors.ts';
import { Output, type OutputStreams } from './cli-output.ts';

export interface GlobalOptions {
  json?: boolean;
  url?: string;
  tenant?: string;
}

export interface CliContext {
  environment: CliEnvironment;
  output: Output;
  options: GlobalOptions;
  /** The service address and key, from flags, the environment or the saved login. */
  connection(): Promise<Connection>;
  /** A client with an API key; a missing key is an error naming the fix. */
  client(): Promise<SlipwayClient>;
}

/** The version sent as User-Agent (the package's, read by main.ts). */
export interface CliRuntime {
  environment: CliEnvironment;
  streams: OutputStreams;
  version: string;
  /** The last connection a command resolved, so the error handler can name the service. */
  lastUrl: string | null;
  /**
   * Drops the CLI's own Ctrl-C handler (exit 130 at once), for `slipway server`: the service's
   * graceful shutdown must be the only one to answer SIGINT there.
   */
  handOverSignals(): void;
}

export function createContext(runtime: CliRuntime, command: Command): CliContext {
  const options = command.optsWithGlobals<GlobalOptions>();
  const output = new Output(runtime.streams, { json: options.json === true, noColor: runtime.environment.noColor });
  let resolved: Promise<Connection> | null = null;
  const connection = () => {
    resolved ??= resolveConnection(runtime.environment, options).then((c) => {
      runtime.lastUrl = c.url;
      return c;
    });
    return resolved;
  };
  return {
    environment: runtime.environment,
    output,
    options,
    connection,
    async client() {
      const c = await connection();
      if (!c.apiKey) {
        throw new CliError('not logged in: no API key', EXIT.auth, [
          'Run `slipway login`, or set SLIPWAY_URL and SLIPWAY_API_KEY.',
        ]);
      }
      return new SlipwayClient({
        baseUrl: c.url,
        apiKey: c.apiKey,
        tenantId: c.tenantId,
        userAgent: `slipway-cli/${runtime.version}`,
        // A field this CLI sends that the service does not know (an older service) was ignored: say so.
        onWarning: (warning) => output.warn(warning),
      });
    },
  };
}
