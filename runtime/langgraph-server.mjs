// Starts LangChain's open-source LangGraph API server for a langgraph.json project (docs/langgraph.md).
//
// The data plane copies this file into a LangGraph revision's source as .slipway/langgraph-server.mjs
// (src/dataplane/app-config-file.ts) and starts it from the source root:
//
//   node .slipway/langgraph-server.mjs js|python <path of langgraph.json>
//
// with PORT and HOST set. Plain JavaScript with no dependency: it runs inside the app's sandbox, on the
// Node.js that runs the service, before anything of ours is installed there.
//
// - js: the server of the project's @langchain/langgraph-api, started as @langchain/langgraph-cli's
//   `dev` starts it (its spawnServer: tsx, the API's preload hook, its entrypoint and the same JSON
//   options), but without `tsx watch`: a deployed revision's files never change.
// - python: `langgraph dev --no-reload --no-browser` of the venv's langgraph-cli[inmem], in the
//   config's directory, as a user runs it.
//
// Both servers keep threads and runs in memory and snapshot them to `.langgraph_api/` in the project's
// directory. A redeploy copies an older revision's directory, snapshot included: the snapshot is kept
// only for the revision that wrote it, so a restart of the same revision finds its state and a new
// revision starts empty, never with another revision's past.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [mode, configArgument] = process.argv.slice(2);
if ((mode !== 'js' && mode !== 'python') || !configArgument) {
  console.error('usage: node langgraph-server.mjs js|python <path of langgraph.json>');
  process.exit(2);
}
const sourceRoot = process.cwd();
const configPath = path.resolve(sourceRoot, configArgument);
const projectDir = path.dirname(configPath);
const config = JSON.parse(fs.readFileSync(configPath, 'utf8').replace(/^\uFEFF/, ''));
const host = process.env.HOST || '127.0.0.1';
const port = process.env.PORT || '2024';

function keepStateOfThisRevisionOnly() {
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
  const fromApi = createRequire(apiPackageJson);
  // spawnServer runs `<tsx>/dist/cli.mjs`, found from tsx/esm/api, with the API's own tsx.
  const tsxCli = path.resolve(path.dirname(fromApi.resolve('tsx/esm/api')), '../../cli.mjs');
  const options = {
    port: Number.parseInt(port, 10),
    nWorkers: 10,
    host,
    graphs: config.graphs,
    auth: config.auth,
    ui: config.ui,
    ui_config: config.ui_config,
    cwd: projectDir,
    http: config.http,
  };
  const args = [
    tsxCli,
    '--import',
    pathToFileURL(path.join(apiDir, 'dist', 'preload.mjs')).toString(),
    path.join(apiDir, 'dist', 'cli', 'entrypoint.mjs'),
    // The entrypoint reports to a `langgraph dev` parent over a pipe named by this pid; with none
    // listening it goes on without.
    String(process.pid),
    JSON.stringify(options),
  ];
  return spawn(process.execPath, args, {
    cwd: projectDir,
    stdio: 'inherit',
    env: { ...process.env, NODE_ENV: 'development', LANGGRAPH_API_URL: `http://${host}:${port}` },
  });
}

function pythonServer() {
  const langgraph = path.join(sourceRoot, '.venv', 'bin', 'langgraph');
  const args = ['dev', '--config', configPath, '--host', host, '--port', port, '--no-reload', '--no-browser'];
  return spawn(langgraph, args, {
    cwd: projectDir,
    stdio: 'inherit',
    env: { LANGGRAPH_CLI_NO_ANALYTICS: '1', ...process.env },
  });
}

keepStateOfThisRevisionOnly();
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
