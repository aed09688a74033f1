/**
 * `slipway` (bin/slipway.mjs; `node dist/src/cli/main.js` when compiled): the command line of
 * @slipway/cli with the service's operator commands (src/cli/cli-program.ts), reporting the version
 * of the service's package.
 */
import fs from 'node:fs';
import { runCli } from '@slipway/cli';
import { buildProgram } from './cli-program.ts';

const packageJson = JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

await runCli({ version: packageJson.version, program: buildProgram });
