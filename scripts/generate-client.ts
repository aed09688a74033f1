/**
 * `npm run generate:client`: writes packages/sdk/src/api-types.ts, the client's types, from the service's own
 * OpenAPI document (what scripts/openapi-document.ts prints, the same as GET /openapi.json serves).
 * test/cli/client-types.test.ts renders the served document with `renderApiTypes` and fails when the
 * committed file differs, so a route schema change cannot ship with stale client types.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import openapiTS, { COMMENT_HEADER, astToString, type OpenAPI3 } from 'openapi-typescript';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const API_TYPES_FILE = path.join(ROOT, 'packages/sdk/src/api-types.ts');

/** The TypeScript source of the types of `document`, exactly as the generator writes it. */
export async function renderApiTypes(document: unknown): Promise<string> {
  // openapi-typescript takes the parsed document as it is; it validates what it reads itself.
  const ast = await openapiTS(document as OpenAPI3);
  return COMMENT_HEADER + astToString(ast);
}

/** The document the service serves, printed by scripts/openapi-document.ts (no database needed). */
async function serviceDocument(): Promise<unknown> {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--import', 'tsx', path.join(ROOT, 'scripts/openapi-document.ts')],
    { cwd: ROOT, maxBuffer: 64 * 1024 * 1024 },
  );
  return JSON.parse(stdout);
}

async function main(): Promise<void> {
  const source = await renderApiTypes(await serviceDocument());
  await fs.writeFile(API_TYPES_FILE, source);
  process.stdout.write(`wrote ${path.relative(ROOT, API_TYPES_FILE)}\n`);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    process.stderr.write(`generate:client failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}
