// The graphs' JSON schemas (input, output, state, config), read from their TypeScript types once, when
// the revision is built, rather than at every start of every instance.
//
// LangChain's server reads a graph's schemas with the TypeScript compiler (its `getStaticGraphSchema`:
// a whole program over the graph and the type declarations of @langchain/core, zod and the rest), about
// ten CPU-seconds for the example project. It does so the first time they are asked for, and MCP's tool
// list and A2A's agent card ask for them, so every instance paid for it again when it started (the
// PostgreSQL layer warms them), on a host where a redeploy or a scale-up starts several at once. The
// build runs `node .slipway/langgraph-server.mjs schemas <config>`, which writes what the same function
// returns to .slipway/langgraph-schemas.json; an instance puts it in the server's own cache before it
// serves. The file is part of the sealed build, so it always describes the files the instance runs.
//
// What it does not change: a graph whose schemas cannot be read at build time (no exported symbol, a type
// the compiler cannot follow) is left to the server, which tries again when they are first asked for, as
// before; the in-memory server (no database) is LangChain's own entrypoint and reads them on request.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

/** The file, beside the launcher in .slipway/. */
export const SCHEMAS_FILE = 'langgraph-schemas.json';
const FORMAT = 1;

/**
 * The graphs of a langgraph.json's `graphs` as LangChain's server resolves them (`path:export`, a path
 * relative to the config's directory; an object form's `path`): id -> { spec, sourceFile, exportSymbol }.
 * A spec without an export names the module's default, which the schema reader cannot be given.
 */
export function graphSpecs(graphs, projectDir) {
  const specs = new Map();
  for (const [id, raw] of Object.entries(graphs ?? {})) {
    const spec = typeof raw === 'string' ? raw : raw && typeof raw === 'object' ? raw.path : null;
    if (typeof spec !== 'string') continue;
    const [file, exportSymbol] = spec.split(':', 2);
    if (!file || !exportSymbol) continue;
    specs.set(id, { spec, sourceFile: path.resolve(projectDir, file), exportSymbol });
  }
  return specs;
}

/**
 * Reads the graphs' schemas with the server's own reader (`apiDist`: the project's
 * @langchain/langgraph-api/dist) and writes them to `target`. Whatever happens, the build goes on: the
 * server reads what is missing itself. Returns a line for the build log.
 */
export async function writeGraphSchemas({ apiDist, apiVersion, graphs, projectDir, target }) {
  // What an archive brought under that name is not this build's.
  fs.rmSync(target, { force: true });
  const specs = graphSpecs(graphs, projectDir);
  if (specs.size === 0) return 'No graph names an export: their schemas are read when first asked for.';
  const { getStaticGraphSchema } = await import(pathToFileURL(path.join(apiDist, 'graph', 'parser', 'index.mjs')).href);
  // The reader prints every diagnostic of its whole-program check (the type declarations of the packages
  // included), none of which stops it: counted, not copied into the build log.
  let diagnostics = 0;
  const { log, warn } = console;
  console.log = console.warn = () => (diagnostics += 1);
  const read = (some) =>
    getStaticGraphSchema(
      Object.fromEntries(some.map(([id, { sourceFile, exportSymbol }]) => [id, { sourceFile, exportSymbol }])),
      { mainThread: true },
    );
  const found = {};
  const failures = [];
  try {
    // All in one program; when one graph stops the reader (a module it cannot type, such as plain
    // JavaScript), each alone, as the server reads them: the others are not lost with it.
    Object.assign(
      found,
      await read([...specs]).catch(async () => {
        const each = {};
        for (const entry of specs)
          Object.assign(
            each,
            await read([entry]).catch((error) => void failures.push([entry[0], error?.message ?? String(error)])),
          );
        return each;
      }),
    );
  } finally {
    Object.assign(console, { log, warn });
  }
  const entries = {};
  for (const [id, { spec }] of specs) {
    const schema = found[id];
    if (schema && typeof schema === 'object' && Object.keys(schema).length > 0) entries[id] = { spec, schema };
  }
  // A graph the reader failed on is named with its spec: an instance does not try it again as it starts.
  const unreadable = Object.fromEntries(failures.map(([id]) => [id, specs.get(id).spec]));
  fs.writeFileSync(target, JSON.stringify({ format: FORMAT, api: apiVersion, graphs: entries, unreadable }));
  const ids = Object.keys(entries);
  const missing = [...specs.keys()].filter((id) => !ids.includes(id));
  return [
    `Graph schemas read at build time: ${ids.length > 0 ? ids.join(', ') : 'none'}`,
    missing.length > 0 ? `; left to the server: ${missing.join(', ')}` : '',
    failures.length > 0 ? ` (${failures.map(([id, message]) => `${id}: ${message}`).join('; ')})` : '',
    diagnostics > 0 ? ` (${diagnostics} TypeScript diagnostics of the reader's check, which do not stop it)` : '',
  ].join('');
}

/**
 * What the build read of these graphs: `schemas`, for the server's cache (`GRAPH_SCHEMA` of its
 * graph/load.mjs), and `unreadable`, the graphs the reader failed on; only for graphs whose spec is still
 * the same, read by the same server version. Nothing when the file is missing or unreadable (a build from
 * before it existed).
 */
export function builtGraphSchemas(file, graphs, projectDir, apiVersion) {
  const built = { schemas: new Map(), unreadable: new Set() };
  let stored;
  try {
    stored = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch {
    return built;
  }
  if (stored?.format !== FORMAT || stored.api !== apiVersion || typeof stored.graphs !== 'object') return built;
  for (const [id, { spec }] of graphSpecs(graphs, projectDir)) {
    const entry = stored.graphs?.[id];
    if (entry?.spec === spec && entry.schema && typeof entry.schema === 'object') built.schemas.set(id, entry.schema);
    else if (stored.unreadable?.[id] === spec) built.unreadable.add(id);
  }
  return built;
}
