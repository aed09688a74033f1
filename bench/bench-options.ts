/** Command-line flags of `npm run bench -- [flags]`, with their defaults in one place. */
import { parseArgs } from 'node:util';

export interface BenchOptions {
  /** Deployments in each measured workspace, ascending (the first is the "small" size). */
  sizes: number[];
  connections: number;
  warmupSeconds: number;
  durationSeconds: number;
  /** Upper bound of requests per measured run, so that no run can go on unbounded. */
  maxRequests: number;
  /** Log level of the service under test; its log goes to /dev/null. */
  logLevel: string;
  /** Only the scenarios named by these keys or key prefixes (all when empty). */
  only: string[];
  /** Rewrite the results section of docs/performance.md. */
  writeDocs: boolean;
  /** Experiment: every statement as a named prepared statement (bench/prepared-statements.ts). */
  preparedStatements: boolean;
  /** Measured deployments per app and sandbox mode in the data plane group (bench/data-plane.ts). */
  deployments: number;
  /** Rounds of the data plane group's proxy runs; each run measures durationSeconds / proxyRounds. */
  proxyRounds: number;
  /** Simulated listeners long-polling at once in the listener group (bench/listener-polls.ts). */
  listeners: number;
  /** Measured patches per phase of the listener group. */
  patches: number;
}

export const USAGE = `Usage: npm run bench -- [flags]

  --quick              smoke run: sizes 1000,10000, 1 s per run, 0.5 s warm-up (about 2 minutes)
  --sizes A,B          deployments in the two measured workspaces (default 1000,100000)
  --duration S         seconds measured per run (default 4)
  --warmup S           seconds of warm-up before each run (default 1)
  --connections N      concurrent connections, HTTP and SQL alike (default 32)
  --max-requests N     upper bound of requests per run (default 400000)
  --log-level L        the service's log level, logged to /dev/null (default info, as in production)
  --only a,b           only these scenarios, by key or key prefix: list (all four lists),
                       list-first, list-late, list-name, list-status, get, revisions,
                       create, patch, listener; the data plane group: dataplane (both parts),
                       dataplane-deploy (create to DEPLOYED, and the commands under each
                       sandbox), dataplane-proxy (the app directly, through its edge, a plain
                       nginx and the built-in edge; the API's p99 alone and under app load),
                       dataplane-api (only the API's p99 alone and under the tiny app's load);
                       each with SLIPWAY_SANDBOX=none and the default full isolation side by side;
                       the listener group: listeners (long-polls: patch to answer, memory);
                       the LangGraph state group: langgraph (runs/s and first stream event,
                       PostgreSQL against in memory; installs from the npm registry);
                       the traffic split group: split (the app edge's req/s with a 10% split
                       against none, each edge; about a minute);
                       the app start group: appstart (the CPU of building the API, its schemas
                       compiled when first used against all at start; about a minute);
                       the test start group: teststart (the CPU a test file's process spends
                       loading the harness: npm test's bundle, a bundle leaving the packages
                       to Node, tsx; about a minute)
  --deployments N      measured deployments per app and sandbox mode in the data plane group
                       (default 5, quick 3)
  --rounds N           rounds of the data plane group's proxy and API runs, the two sandbox
                       modes in turn in each, and of the traffic split group's runs; --duration
                       is split among them (default 2)
  --listeners N        listeners long-polling at once in the listener group (default 1000,
                       quick 200); needs about N + 512 open files per process (ulimit -n)
  --patches N          measured patches per phase of the listener group (default 200, quick 50)
  --write-docs         replace the results section of docs/performance.md with this run's
  --prepared-statements  experiment: the service and the SQL baseline send named prepared
                       statements (not what production does; see bench/prepared-statements.ts)
  --help

The database is an embedded PostgreSQL in a temporary directory, or a fresh database created on the
server named by DATABASE_URL (dropped at the end).`;

function positive(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number, got '${raw}'`);
  return value;
}

export function parseBenchOptions(argv: string[]): BenchOptions | 'help' {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean', default: false },
      sizes: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string' },
      'max-requests': { type: 'string' },
      'log-level': { type: 'string' },
      only: { type: 'string' },
      'write-docs': { type: 'boolean', default: false },
      'prepared-statements': { type: 'boolean', default: false },
      deployments: { type: 'string' },
      rounds: { type: 'string' },
      listeners: { type: 'string' },
      patches: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.help) return 'help';
  const quick = values.quick ?? false;
  const sizes = (values.sizes ?? (quick ? '1000,10000' : '1000,100000'))
    .split(',')
    .map((s) => positive('sizes', s.trim(), 0));
  if (sizes.length !== 2 || sizes[0]! >= sizes[1]! || sizes.some((s) => !Number.isInteger(s) || s < 100)) {
    throw new Error('--sizes takes two ascending integers of at least 100, e.g. 1000,100000');
  }
  const connections = positive('connections', values.connections, 32);
  if (!Number.isInteger(connections)) throw new Error('--connections must be an integer');
  const deployments = positive('deployments', values.deployments, quick ? 3 : 5);
  if (!Number.isInteger(deployments) || deployments > 50)
    throw new Error('--deployments must be an integer from 1 to 50');
  const proxyRounds = positive('rounds', values.rounds, 2);
  if (!Number.isInteger(proxyRounds) || proxyRounds > 10) throw new Error('--rounds must be an integer from 1 to 10');
  const listeners = positive('listeners', values.listeners, quick ? 200 : 1000);
  if (!Number.isInteger(listeners) || listeners > 20_000)
    throw new Error('--listeners must be an integer from 1 to 20000');
  const patches = positive('patches', values.patches, quick ? 50 : 200);
  if (!Number.isInteger(patches)) throw new Error('--patches must be an integer');
  return {
    sizes,
    connections,
    durationSeconds: positive('duration', values.duration, quick ? 1 : 4),
    warmupSeconds: values.warmup === '0' ? 0 : positive('warmup', values.warmup, quick ? 0.5 : 1),
    maxRequests: positive('max-requests', values['max-requests'], 400_000),
    logLevel: values['log-level'] ?? 'info',
    only: values.only
      ? values.only
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean)
      : [],
    writeDocs: values['write-docs'] ?? false,
    preparedStatements: values['prepared-statements'] ?? false,
    deployments,
    proxyRounds,
    listeners,
    patches,
  };
}
