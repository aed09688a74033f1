/**
 * Which SQL each test file runs, and the fewest files that together run all of it.
 *
 * CI runs the suite's SQL twice: once on the embedded server (`npm test`), and again on the operator's
 * kind of server (DATABASE_URL: another major version). Most of the second pass repeats what matters
 * there, for it is the same statements with other values. So the first pass records the statements
 * each file's database ran (`npm test -- --record-sql FILE`: PostgreSQL's own pg_stat_statements, which
 * keeps each statement once with its constants taken out), and the second runs only a cover of them
 * (`--cover-sql FILE`): the fewest files, the cheapest first, that between them run every statement any
 * of the pass's files ran.
 *
 * Most statements need not even run for that: the other server prepares each one the record kept
 * (`PREPARE`, in a migrated database: it parses the statement and resolves every name, type, function and
 * operator in it, and plans it, without running it; preparedStatements), and the cover is then made of
 * the statements it did not accept: those that name what only a test made (a table of its own, another
 * schema), whose parameters it cannot type without the values (`select $1`), or that it refuses. What a
 * prepared statement is not checked for: what happens only when it runs (a value the other version's
 * input functions read otherwise, a jsonpath or regular expression given as a value, a lock it waits for).
 *
 * What the cover promises: every statement that one of the pass's files ran on the embedded server is
 * prepared on the other, or runs at least once there in a test that asserts what comes of it. What it
 * does not: the same statement with every value or in every order (a race that one server's timing
 * shows and the other's hides), statements that failed (pg_stat_statements keeps only those that ended),
 * DDL and other utility commands (not tracked: they name databases and roles made per test, and the
 * migrations run on both servers in any case), and what runs in an app's own database or the
 * maintenance database. For the last two, a file that makes databases beyond the harness's clones (its own, or apps' with their
 * roles and grants: the record sees none of it) runs in every cover (coverOfTier). A record the server
 * dropped statements from makes no cover at all: every file runs.
 *
 * The files it reads and writes:
 * - the databases file: a JSON line `{"database": oid, "file": path}` per database a test file cloned
 *   (test/support/harness.ts writes it while the record is on, `SLIPWAY_TEST_SQL_DATABASES`);
 * - the record: `{"files": {path: {"seconds": n, "statements": [...]}}, "texts": {statement: text}}`,
 *   `texts` a statement's text as the server kept it (its values `$1`, `$2`, ...), for PREPARE.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { withClient } from '../src/db/admin-client.ts';
import { textWithHelpers } from './test-tiers.ts';

/** What the embedded server needs for the record (scripts/scratch-server.ts passes them as `-c`). */
export const RECORD_SETTINGS: Readonly<Record<string, string>> = {
  shared_preload_libraries: 'pg_stat_statements',
  // Each statement is kept once per database, and every test file has its own: the default 5,000
  // would drop the least used ones while the suite runs.
  'pg_stat_statements.max': '200000',
  'pg_stat_statements.track': 'top',
  'pg_stat_statements.track_utility': 'off',
};

/** The environment variable that tells the harness where to write the databases it clones. */
export const DATABASES_ENV = 'SLIPWAY_TEST_SQL_DATABASES';

export interface SqlRecord {
  files: Record<string, { seconds?: number; statements: string[] }>;
  /**
   * How many times pg_stat_statements dropped statements to make room (pg_stat_statements_info.dealloc):
   * more than none, and the record lacks statements without saying whose, so no cover is made of it.
   */
  dropped?: number;
  /** Each statement (normalizeStatement's) as the server kept it, parameters numbered: one of them, if several. */
  texts?: Record<string, string>;
}

/**
 * One statement however many values it was given: pg_stat_statements takes constants out (`$1`), but
 * keeps a list of them at its length (`in ($1, $2, $3)`, a multi-row insert's rows), which would make
 * each length a statement of its own. Only those two lists are shortened: a function's arguments and a
 * row's width are the statement's own, and two statements that differ in them are two
 * (`current_setting($1)` fails on a server that lacks the setting; `current_setting($1, $2)`, with
 * missing_ok, gives null there).
 */
export function normalizeStatement(query: string): string {
  let text = query.replace(/\s+/g, ' ').trim().replace(/\$\d+/g, '$');
  // IN's (or NOT IN's) list of values, at any length: one value.
  text = text.replace(/\b(in) ?\( ?\$(?: ?, ?\$)* ?\)/gi, (_, word: string) => `${word} ($)`);
  // VALUES' rows, as many as were given, when all are alike: one row.
  text = text.replace(/\b(values) ?(\([^()]*\))(?: ?, ?\2)+/gi, (_, word: string, row: string) => `${word} ${row}`);
  return text;
}

/** Reads the server's statements into a record, by the file whose database ran each. */
export async function readRecord(
  adminUrl: string,
  databasesFile: string,
  seconds: ReadonlyMap<string, number>,
): Promise<{ record: SqlRecord; dropped: number }> {
  const lines = (await fs.readFile(databasesFile, 'utf8').catch(() => '')).split('\n').filter((l) => l !== '');
  const fileOf = new Map<number, string>();
  for (const line of lines) {
    const entry = JSON.parse(line) as { database: number; file: string };
    fileOf.set(entry.database, entry.file);
  }
  const { rows, dropped } = await withClient(adminUrl, async (c) => {
    await c.query('create extension if not exists pg_stat_statements');
    const statements = await c.query<{ dbid: number; query: string }>(
      'select dbid::int as dbid, query from pg_stat_statements where query is not null',
    );
    const info = await c.query<{ dealloc: string }>('select dealloc from pg_stat_statements_info');
    return { rows: statements.rows, dropped: Number(info.rows[0]?.dealloc ?? 0) };
  });
  const byFile = new Map<string, Set<string>>();
  const texts = new Map<string, string>();
  for (const { dbid, query } of rows) {
    const file = fileOf.get(dbid);
    if (file === undefined) continue;
    let set = byFile.get(file);
    if (!set) byFile.set(file, (set = new Set()));
    const statement = normalizeStatement(query);
    set.add(statement);
    // The shortest of a statement's texts (the fewest values in a list): any of them is the statement.
    const kept = texts.get(statement);
    if (kept === undefined || query.length < kept.length || (query.length === kept.length && query < kept))
      texts.set(statement, query);
  }
  const files: SqlRecord['files'] = {};
  for (const file of [...new Set(fileOf.values())].sort())
    files[file] = { seconds: seconds.get(file), statements: [...(byFile.get(file) ?? [])].sort() };
  const sortedTexts = Object.fromEntries([...texts].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  return { record: { files, dropped, texts: sortedTexts }, dropped };
}

/**
 * A statement's text with its typed literals of intervals (`interval '5 minutes'`, which the server kept
 * as `interval $1`, a syntax error as it is) written as the casts they are (`$1::interval`).
 */
function preparable(text: string): string {
  return text.replace(/\binterval (\$\d+)/gi, '$1::interval');
}

/**
 * Which of a record's statements the server at `url` (a database with the schema the statements ran on)
 * prepares: `PREPARE` parses each, resolves its names, types, functions and operators and plans it,
 * without running it. The others, with the first line of why: what it cannot judge so (a table a test made
 * itself, a parameter it cannot type without its value) and what it refuses.
 */
export async function preparedStatements(
  url: string,
  record: SqlRecord,
): Promise<{ accepted: Set<string>; refused: Map<string, string> }> {
  const accepted = new Set<string>();
  const refused = new Map<string, string>();
  await withClient(url, async (c) => {
    for (const [statement, text] of Object.entries(record.texts ?? {})) {
      try {
        await c.query(`prepare slipway_record_check as ${preparable(text)}`);
        await c.query('deallocate slipway_record_check');
        accepted.add(statement);
      } catch (error) {
        refused.set(statement, (error instanceof Error ? error.message : String(error)).split('\n')[0]!);
      }
    }
  });
  return { accepted, refused };
}

export interface Cover {
  /** The files to run: every forced one, and the fewest others that run what they do not. */
  files: string[];
  /** How many of the candidates' statements were settled without running them (prepared on the server). */
  settled: number;
  /** Candidates the record has nothing of (new, or their database was never cloned): run, to be safe. */
  unrecorded: string[];
  /** How many distinct statements the candidates ran, and how many the chosen files run. */
  statements: number;
  /** The candidates' recorded seconds, all of them and the chosen ones'. */
  seconds: { all: number; chosen: number };
  /** Whether the server dropped statements from the record (SqlRecord.dropped): then every file runs. */
  incomplete: boolean;
}

/**
 * The cheapest files (by their recorded seconds; 1 for a file without) that, with the forced ones, run
 * every statement any candidate ran but those `settled` already (prepared on the server): greedy, the most new statements per second first (the set cover
 * problem; greedy is within a logarithmic factor of the best, and the suite's files differ enough in
 * cost and reach that it keeps the expensive ones out).
 */
export function coverOf(
  record: SqlRecord,
  candidates: readonly string[],
  forced: readonly string[],
  settled: ReadonlySet<string> = new Set(),
): Cover {
  const entry = (file: string) => record.files[path.normalize(file)];
  const unsettled = (file: string) => (entry(file)?.statements ?? []).filter((s) => !settled.has(s));
  const sum = (files: Iterable<string>) => [...files].reduce((total, file) => total + (entry(file)?.seconds ?? 0), 0);
  const everyFile = new Set([...candidates, ...forced]);
  // Statements the server dropped may have been the only ones of some file: which, the record cannot say.
  if ((record.dropped ?? 0) > 0)
    return {
      files: [...everyFile].sort(),
      unrecorded: candidates.filter((file) => entry(file) === undefined),
      statements: new Set(candidates.flatMap((file) => entry(file)?.statements ?? [])).size,
      settled: 0,
      seconds: { all: sum(everyFile), chosen: sum(everyFile) },
      incomplete: true,
    };
  const cost = (file: string) => Math.max(entry(file)?.seconds ?? 1, 0.1);
  const unrecorded = candidates.filter((file) => entry(file) === undefined);
  const chosen = new Set<string>([...forced, ...unrecorded]);
  const covered = new Set<string>();
  for (const file of chosen) for (const s of unsettled(file)) covered.add(s);
  const all = new Set<string>();
  for (const file of [...chosen, ...candidates]) for (const s of entry(file)?.statements ?? []) all.add(s);
  const left = candidates.filter((file) => !chosen.has(file));
  for (;;) {
    let best: string | undefined;
    let bestValue = 0;
    for (const file of left) {
      if (chosen.has(file)) continue;
      const fresh = unsettled(file).filter((s) => !covered.has(s)).length;
      const value = fresh / cost(file);
      if (fresh > 0 && (value > bestValue || (value === bestValue && best !== undefined && file < best))) {
        best = file;
        bestValue = value;
      }
    }
    if (best === undefined) break;
    chosen.add(best);
    for (const s of unsettled(best)) covered.add(s);
  }
  return {
    files: [...chosen].sort(),
    unrecorded,
    statements: all.size,
    settled: [...all].filter((s) => settled.has(s)).length,
    seconds: { all: sum(everyFile), chosen: sum(chosen) },
    incomplete: false,
  };
}

/**
 * What makes databases on the test server beyond the harness's clones of the template, whose SQL the
 * record never sees: the admin URL itself, with which a file makes databases of its own (an older schema
 * to upgrade, a dump to restore into); and the modules that make apps' databases (createAppDatabase, and
 * the provisioning and the restore that call it), whose roles, grants and databases are made from the
 * maintenance database by statements that differ with the server's version (PostgreSQL 16's grant
 * options) and are utility commands besides.
 */
const OWN_DATABASES =
  /\bSLIPWAY_TEST_ADMIN_URL\b|\bcreateAppDatabase\b|\/dataplane\/app-(?:database|provisioning)\.ts['"]|\/ops\/restore\.ts['"]/;

/**
 * The cover of a tier's files (coverOf), with every candidate that makes databases the record cannot see
 * (it or a test/ module it imports matches OWN_DATABASES) forced in: the record has the statements of its
 * clones only, so what it ran in those other databases would otherwise run on no server but the first.
 */
export async function coverOfTier(
  record: SqlRecord,
  candidates: readonly string[],
  forced: readonly string[],
  settled: ReadonlySet<string> = new Set(),
): Promise<Cover & { ownDatabases: string[] }> {
  const own = await Promise.all(
    candidates.map(async (file) => (OWN_DATABASES.test(await textWithHelpers(file)) ? [file] : [])),
  );
  const ownDatabases = own.flat();
  return { ...coverOf(record, candidates, [...forced, ...ownDatabases], settled), ownDatabases };
}
