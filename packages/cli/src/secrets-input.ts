/**
 * Secrets given on the command line (`--secret NAME=VALUE`) or in a dotenv file (`--secrets-file`),
 * checked here so a typo is reported before anything is uploaded.
 */
import fs from 'node:fs/promises';
import { CliError, EXIT } from './cli-errors.ts';

export interface SecretInput {
  name: string;
  value: string;
}

/** The service's rule for secret names (environment variable names). */
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function parseSecretFlag(flag: string): SecretInput {
  const at = flag.indexOf('=');
  const name = at === -1 ? flag : flag.slice(0, at);
  if (at === -1) throw new CliError(`--secret ${flag}: expected NAME=VALUE`, EXIT.usage);
  if (!NAME.test(name))
    throw new CliError(
      `--secret ${name}: a secret name is letters, digits and _, not starting with a digit`,
      EXIT.usage,
    );
  return { name, value: flag.slice(at + 1) };
}

/**
 * A dotenv file: `NAME=value` lines, optional `export `, `#` comments, values in single quotes (as
 * they are) or double quotes (with \n, \t, \", \\ escapes, and spanning lines, for PEM keys).
 */
export function parseDotenv(text: string, file: string): SecretInput[] {
  const secrets: SecretInput[] = [];
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '' || line.startsWith('#')) continue;
    const match = /^(?:export\s+)?([^=\s]+)\s*=\s*(.*)$/.exec(line);
    if (!match) throw new CliError(`${file}:${i + 1}: expected NAME=VALUE`, EXIT.usage);
    const name = match[1]!;
    if (!NAME.test(name))
      throw new CliError(
        `${file}:${i + 1}: ${name} is not a valid secret name (letters, digits and _, not starting with a digit)`,
        EXIT.usage,
      );
    let value = match[2]!;
    if (value.startsWith('"')) {
      const first = i;
      let raw = value.slice(1);
      let close = closingQuote(raw);
      while (close === -1) {
        if (++i >= lines.length)
          throw new CliError(`${file}:${first + 1}: the quoted value of ${name} is never closed`, EXIT.usage);
        // The next line as it is: indentation inside a multi-line value (a PEM key) is part of it.
        raw += `\n${lines[i]}`;
        close = closingQuote(raw);
      }
      afterQuote(raw.slice(close + 1), `${file}:${i + 1}`, name);
      value = raw
        .slice(0, close)
        .replace(/\\(["\\nrt])/g, (_all, c: string) => ({ n: '\n', r: '\r', t: '\t' })[c as 'n' | 'r' | 't'] ?? c);
    } else if (value.startsWith("'")) {
      const end = value.indexOf("'", 1);
      if (end === -1) throw new CliError(`${file}:${i + 1}: the quoted value of ${name} is never closed`, EXIT.usage);
      afterQuote(value.slice(end + 1), `${file}:${i + 1}`, name);
      value = value.slice(1, end);
    } else {
      value = value.replace(/\s+#.*$/, '').trim();
    }
    secrets.push({ name, value });
  }
  return secrets;
}

/** Where the first double quote not escaped by a backslash is, or -1. */
function closingQuote(text: string): number {
  for (let k = 0; k < text.length; k++) {
    if (text[k] === '\\') k++;
    else if (text[k] === '"') return k;
  }
  return -1;
}

/** After a closing quote only a comment may follow: anything else is a quote closed too early. */
function afterQuote(rest: string, where: string, name: string): void {
  if (!/^\s*(#.*)?$/.test(rest))
    throw new CliError(`${where}: unexpected text after the quoted value of ${name}: ${rest.trim()}`, EXIT.usage);
}

/** The secrets of the flags and the file; a flag wins over the file for the same name. */
export async function readSecrets(flags: string[], file: string | undefined): Promise<SecretInput[]> {
  const byName = new Map<string, string>();
  if (file !== undefined) {
    const text = await fs.readFile(file, 'utf8').catch((error: NodeJS.ErrnoException) => {
      throw new CliError(
        `--secrets-file ${file}: ${error.code === 'ENOENT' ? 'no such file' : error.message}`,
        EXIT.usage,
      );
    });
    for (const secret of parseDotenv(text, file)) byName.set(secret.name, secret.value);
  }
  for (const flag of flags) {
    const secret = parseSecretFlag(flag);
    byName.set(secret.name, secret.value);
  }
  return [...byName].map(([name, value]) => ({ name, value }));
}
