// Starts LangChain's open-source LangGraph API server for a langgraph.json project (docs/langgraph.md),
// with its state in the deployment's own PostgreSQL database when it has one.
//
// The data plane copies this file into a LangGraph revision's source as .slipway/langgraph-server.mjs,
// and the directory langgraph/ beside it as .slipway/langgraph/ (src/dataplane/app-config-file.ts),
// and starts it from the source root:
//
//   node .slipway/langgraph-server.mjs js|python <path of langgraph.json>
//
// with PORT and HOST set. A JS project's build runs `schemas <path of langgraph.json>` after its
// install: the graphs' schemas, read once for every instance (langgraph/graph-schemas.mjs). Plain
// JavaScript: it runs inside the app's sandbox, on the Node.js that runs
// the service, and imports only what the project's install put beside the config, and its own modules:
// the PostgreSQL layer is langgraph/serve.mjs and the modules it names.
//
// - js with DATABASE_URL (the deployment's database) and the pinned server (1.5.x): the server of the
//   project's @langchain/langgraph-api, started through its own `startServer(options, { ops })` hook
//   with the PostgreSQL operations of langgraph/, its checkpointer backed by @langchain/langgraph-checkpoint-
//   postgres's PostgresSaver and its store by that package's PostgresStore. LangChain's HTTP layer
//   (routes, validation, streaming, custom auth and http apps) serves the requests unchanged; only where
//   assistants, threads, runs, checkpoints and store items live changes. Started as the API's own
//   `dev` command starts it (its tsx, its preload hook), with this file as the entrypoint (`serve`).
// - js otherwise: the API's own entrypoint, in memory, as @langchain/langgraph-cli's `dev` starts it,
//   but without `tsx watch`: a deployed revision's files never change.
// - python: `langgraph dev --no-reload --no-browser` of the venv's langgraph-cli[inmem], in the
//   config's directory, as a user runs it (in memory).
//
// The in-memory servers snapshot to `.langgraph_api/` in the project's directory. A redeploy copies an
// older revision's directory, snapshot included: the snapshot is kept only for the revision that wrote
// it, so a restart of the same revision finds its state and a new revision starts empty, never with
// another revision's past.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { hasPostgresPackages } from './langgraph/packages.mjs';

/** The @langchain/langgraph-api releases whose storage contract (`Ops`) the PostgreSQL layer implements. */
const POSTGRES_API_VERSIONS = /^1\.5\./;

// ---------------------------------------------------------------------------------------------------
// The launcher
// ---------------------------------------------------------------------------------------------------

function keepStateOfThisRevisionOnly(projectDir) {
  // On Slipway `.langgraph_api` is a link to the deployment's own writable directory (the source is
  // read-only): its contents are cleared, never the link.
  const stateDir = process.env.SLIPWAY_DATA_DIR
    ? path.join(process.env.SLIPWAY_DATA_DIR, 'langgraph_api')
    : path.join(projectDir, '.langgraph_api');
  const marker = path.join(stateDir, '.slipway-revision');
  const revision = process.env.SLIPWAY_REVISION_ID || '';
  let owner;
  try {
    owner = fs.readFileSync(marker, 'utf8');
  } catch {
    owner = null;
  }
  if (owner === revision) return;
  fs.mkdirSync(stateDir, { recursive: true });
  for (const name of fs.readdirSync(stateDir)) fs.rmSync(path.join(stateDir, name), { recursive: true, force: true });
  fs.writeFileSync(marker, revision);
}

/** The config named on the command line, from the source root (the current directory), and its directory. */
function readConfig(configArgument) {
  const configPath = path.resolve(process.cwd(), configArgument);
  const config = JSON.parse(fs.readFileSync(configPath, 'utf8').replace(/^\uFEFF/, ''));
  return { configPath, projectDir: path.dirname(configPath), config };
}

function launch(mode, configArgument) {
  const sourceRoot = process.cwd();
  const { configPath, projectDir, config } = readConfig(configArgument);
  const host = process.env.HOST || '127.0.0.1';
  const port = process.env.PORT || '2024';

  function jsServer() {
    // Resolved from the project, as `npx @langchain/langgraph-cli dev` run there would find it.
    const fromProject = createRequire(path.join(projectDir, 'package.json'));
    let apiPackageJson;
    try {
      apiPackageJson = fromProject.resolve('@langchain/langgraph-api/package.json');
    } catch {
      console.error(
        `@langchain/langgraph-api is not installed for ${configArgument}: add it (or @langchain/langgraph-cli) to the project's dependencies, or let the default install command add it.`,
      );
      process.exit(1);
    }
    const apiDir = path.dirname(apiPackageJson);
    const apiVersion = JSON.parse(fs.readFileSync(apiPackageJson, 'utf8')).version;
    const fromApi = createRequire(apiPackageJson);
    // The API's own tsx (its dist/, found from tsx/esm/api). spawnServer runs tsx's CLI, a process that
    // only starts Node.js with tsx's hooks and relays signals to it: Node.js is started so here, without
    // that process between (about 50 MB less per instance); the launcher relays the signals.
    const tsxDist = path.resolve(path.dirname(fromApi.resolve('tsx/esm/api')), '../..');
    const options = {
      port: Number.parseInt(port, 10),
      nWorkers: 10,
      host,
      graphs: config.graphs,
      // LangChain's server lets a request that says `x-auth-scheme: langsmith` past a project's custom
      // auth as LangGraph Studio's user, trusting LangSmith's proxy to have checked it first. No proxy
      // here checks anything: anyone could send the header. Studio authenticates like any client.
      auth: config.auth ? { ...config.auth, disable_studio_auth: true } : config.auth,
      ui: config.ui,
      ui_config: config.ui_config,
      cwd: projectDir,
      http: config.http,
    };
    let entry;
    if (process.env.DATABASE_URL && POSTGRES_API_VERSIONS.test(apiVersion) && hasPostgresPackages(fromProject)) {
      // This file again, as the server process: the state layer below. The instance id names this
      // instance in the leases of the runs it executes.
      entry = [fileURLToPath(import.meta.url), 'serve', randomUUID()];
      // The TTLs of langgraph.json, which only the PostgreSQL layer reads.
      Object.assign(options, { checkpointer: config.checkpointer, store: config.store });
    } else {
      if (process.env.DATABASE_URL)
        console.error(
          `The LangGraph state stays in memory: the PostgreSQL layer needs @langchain/langgraph-api 1.5.x (found ${apiVersion}) and @langchain/langgraph-checkpoint-postgres installed beside ${configArgument}.`,
        );
      keepStateOfThisRevisionOnly(projectDir);
      // The entrypoint reports to a `langgraph dev` parent over a pipe named by this pid; with none
      // listening it goes on without.
      entry = [path.join(apiDir, 'dist', 'cli', 'entrypoint.mjs'), String(process.pid)];
    }
    const args = [
      // tsx's hooks, as its CLI gives them to the process it starts: require's, then import's.
      '--require',
      path.join(tsxDist, 'preflight.cjs'),
      '--import',
      pathToFileURL(path.join(tsxDist, 'loader.mjs')).toString(),
      '--import',
      pathToFileURL(path.join(apiDir, 'dist', 'preload.mjs')).toString(),
      ...entry,
      // Last: the API's preload hook reads the options from the last argument.
      JSON.stringify(options),
    ];
    return spawn(process.execPath, args, {
      cwd: projectDir,
      stdio: 'inherit',
      env: { ...process.env, NODE_ENV: 'development', LANGGRAPH_API_URL: `http://${host}:${port}` },
    });
  }

  function pythonServer() {
    keepStateOfThisRevisionOnly(projectDir);
    const langgraph = path.join(sourceRoot, '.venv', 'bin', 'langgraph');
    const args = ['dev', '--config', configPath, '--host', host, '--port', port, '--no-reload', '--no-browser'];
    return spawn(langgraph, args, {
      cwd: projectDir,
      stdio: 'inherit',
      env: { LANGGRAPH_CLI_NO_ANALYTICS: '1', ...process.env },
    });
  }

  const child = mode === 'js' ? jsServer() : pythonServer();
  for (const signal of ['SIGTERM', 'SIGINT']) {
    // The data plane signals the whole process group; forwarding covers a signal sent to this process alone.
    process.on(signal, () => child.kill(signal));
  }
  child.on('error', (error) => {
    console.error(`Could not start the LangGraph server: ${error.message}`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => {
    process.exitCode = code ?? (signal ? 128 + (signal === 'SIGTERM' ? 15 : signal === 'SIGINT' ? 2 : 9) : 1);
  });
}

/** The build's step (`schemas <config>`): the graphs' schemas, read once, for every instance to start with. */
async function schemas(configArgument) {
  const { projectDir, config } = readConfig(configArgument);
  const { SCHEMAS_FILE, writeGraphSchemas } = await import('./langgraph/graph-schemas.mjs');
  const target = path.join(path.dirname(fileURLToPath(import.meta.url)), SCHEMAS_FILE);
  let apiPackageJson;
  try {
    apiPackageJson = createRequire(path.join(projectDir, 'package.json')).resolve(
      '@langchain/langgraph-api/package.json',
    );
  } catch {
    fs.rmSync(target, { force: true });
    console.log("@langchain/langgraph-api is not installed: the graphs' schemas are read when first asked for.");
    return;
  }
  const apiVersion = JSON.parse(fs.readFileSync(apiPackageJson, 'utf8')).version;
  const apiDist = path.join(path.dirname(apiPackageJson), 'dist');
  console.log(await writeGraphSchemas({ apiDist, apiVersion, graphs: config.graphs, projectDir, target }));
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === 'schemas' && rest[0]) {
  try {
    await schemas(rest[0]);
  } catch (error) {
    // Never the build's failure: the server reads the schemas itself when they are missing.
    console.log(`The graphs' schemas were not read at build time: ${error?.message ?? error}`);
  }
} else if (mode === 'serve') {
  const [instanceId, optionsText] = rest;
  try {
    // Only the server process loads the PostgreSQL layer (inside the API's tsx, with its packages).
    const { serve } = await import('./langgraph/serve.mjs');
    await serve(instanceId, optionsText);
  } catch (error) {
    // A graph that fails to load, a database out of reach: the process ends, as the in-memory server
    // does, so the supervisor and the health check see it at once (the pool and timers would keep it).
    console.error(error);
    process.exit(1);
  }
} else if ((mode === 'js' || mode === 'python') && rest[0]) {
  launch(mode, rest[0]);
} else {
  console.error('usage: node langgraph-server.mjs js|python|schemas <path of langgraph.json>');
  process.exit(2);
}
