/**
 * examples/langgraph-js as the data plane's build leaves it, for the files that run its LangGraph server
 * through the launcher without the data plane (test/langgraph/protocols, launcher-postgres and
 * in-memory-parity): its own packages (`npm ci`), the packages a deployment's build adds to a project
 * that brings none of them (src/domain/langgraph-config.ts), and the launcher as .slipway/.
 *
 * The install (from the npm registry, a minute or so of both cores) is made once per run of the suite
 * (test/support/made-once.ts); each file gets a project of its own with a copy of it (hard links where
 * the file system allows, so a copy is quick), to add its own files to. Nothing writes into an installed
 * package: the servers write their state to the project's directory or their database.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import {
  A2A_SDK_VERSION,
  LANGGRAPH_JS_SERVER_VERSION,
  LANGGRAPH_POSTGRES_VERSION,
  MCP_SDK_VERSION,
} from '../../src/domain/langgraph-config.ts';
import { madeOncePerRun } from './made-once.ts';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
export const LANGGRAPH_EXAMPLE = path.join(ROOT, 'examples/langgraph-js');
const RUNTIME = path.join(ROOT, 'runtime');

/** LangChain's MCP adapters, as another team's graph would load a deployed graph's tools (protocols' use-tools). */
export const MCP_ADAPTERS_VERSION = '1.1.4';

/** What the install adds to the example's own packages: a deployment's build's, and the MCP adapters. */
const ADDED = [
  `@langchain/langgraph-api@${LANGGRAPH_JS_SERVER_VERSION}`,
  `@langchain/langgraph-checkpoint-postgres@${LANGGRAPH_POSTGRES_VERSION}`,
  `@modelcontextprotocol/sdk@${MCP_SDK_VERSION}`,
  `@a2a-js/sdk@${A2A_SDK_VERSION}`,
  // Not a deployment's: protocols' other team loads the deployed graphs' tools with it. Unused by the rest.
  `@langchain/mcp-adapters@${MCP_ADAPTERS_VERSION}`,
];

/** How long a file waits for another's install, in seconds: a hang guard. */
const INSTALL_WAIT_SECONDS = 480;

/** How long the whole install may take, in seconds: within what the other files wait for it. */
const INSTALL_SECONDS = 420;

/** One npm step, ending by `deadline`; its failure says whether time ran out, and npm's last words. */
async function npm(dir: string, args: string[], deadline: number): Promise<void> {
  try {
    await run('npm', args, { cwd: dir, timeout: Math.max(1, deadline - Date.now()), maxBuffer: 16 * 1024 * 1024 });
  } catch (error) {
    const failed = error as { killed?: boolean; code?: unknown; stderr?: string };
    const why = failed.killed
      ? `stopped when the install's ${INSTALL_SECONDS} s ran out (a busy machine, or a slow registry)`
      : `exit code ${String(failed.code)}`;
    const said = (failed.stderr ?? '').trim().split('\n').slice(-15).join('\n');
    throw new Error(`npm ${args.join(' ')}: ${why}${said ? `; npm said:\n${said}` : ''}`, { cause: error });
  }
}

async function install(dir: string): Promise<void> {
  for (const name of ['package.json', 'package-lock.json'])
    await fs.copyFile(path.join(LANGGRAPH_EXAMPLE, name), path.join(dir, name));
  const deadline = Date.now() + INSTALL_SECONDS * 1000;
  await npm(dir, ['ci', '--no-audit', '--no-fund'], deadline);
  await npm(dir, ['install', '--no-save', '--no-audit', '--no-fund', ...ADDED], deadline);
}

/**
 * A new project directory (under the system's temporary directory, named from `prefix`) holding the
 * example without its node_modules, the launcher as .slipway/, and a copy of the run's install. The
 * caller removes it, and the directories added to `scratch` (the install, when no run shares one).
 */
export async function langgraphExampleProject(prefix: string, scratch: string[]): Promise<string> {
  const installed = await madeOncePerRun(
    {
      name: 'langgraph-example',
      what: "the LangGraph example's install",
      waitSeconds: INSTALL_WAIT_SECONDS,
      make: install,
    },
    scratch,
  );
  const project = await fs.mkdtemp(path.join(os.tmpdir(), prefix));
  await fs.cp(LANGGRAPH_EXAMPLE, project, { recursive: true, filter: (from) => !from.includes('node_modules') });
  await fs.cp(RUNTIME, path.join(project, '.slipway'), { recursive: true });
  const from = path.join(installed, 'node_modules');
  const to = path.join(project, 'node_modules');
  // Hard links where both are on one file system; a copy where not.
  await run('cp', ['-al', from, to]).catch(async () => {
    await fs.rm(to, { recursive: true, force: true });
    await run('cp', ['-a', from, to]);
  });
  return project;
}
