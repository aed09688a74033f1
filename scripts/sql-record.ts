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
 * What the cover promises: every statement that one of the pass's files ran on the embedded server runs
 * at least once on the other, in a test that asserts what comes of it. What it does not: the same
 * statement with every value or in every order (a race that one server's timing shows and the other's
 * hides), statements that failed (pg_stat_statements keeps only those that ended), DDL and other
 * utility commands (not tracked: they name databases and roles made per test, and the migrations run on
 * both servers in any case), and what runs in an app's own database or the maintenance database. For
 * the last two, a file that makes databases beyond the harness's clones (its own, or apps' with their
 * roles and grants: the record sees none of it) runs in every cover (coverOfTier). A record the server
 * dropped statements from makes no cover at all: every file runs.
 *
 * The files it reads and writes:
 * - the databases file: a JSON line `{"database": oid, "file": path}` per database a test file cloned
 *   (test/support/harness.ts writes it while the record is on, `SLIPWAY_TEST_SQL_DATABASES`);
 * - the record: `{"files": {path: {"seconds": n, "statements": [...]}}}`.
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
  for (const { dbid, query } of rows) {
    const file = fileOf.get(dbid);
    if (file === undefined) continue;
    let set = byFile.get(file);
    if (!set) byFile.set(file, (set = new Set()));
    set.add(normalizeStatement(query));
  }
  const files: SqlRecord['files'] = {};
  for (const file of [...new Set(fileOf.values())].sort())
    files[file] = { seconds: seconds.get(file), statements: [...(byFile.get(file) ?? [])].sort() };
  return { record: { files, dropped }, dropped };
}

export interface Cover {
  /** The files to run: every forced one, and the fewest others that run what they do not. */
  files: string[];
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
 * every statement any candidate ran: greedy, the most new statements per second first (the set cover
 * problem; greedy is within a logarithmic factor of the best, and the suite's files differ enough in
 * cost and reach that it keeps the expensive ones out).
 */
export function coverOf(record: SqlRecord, candidates: readonly string[], forced: readonly string[]): Cover {
  const entry = (file: string) => record.files[path.normalize(file)];
  const sum = (files: Iterable<string>) => [...files].reduce((total, file) => total + (entry(file)?.seconds ?? 0), 0);
  const everyFile = new Set([...candidates, ...forced]);
  // Statements the server dropped may have been the only ones of some file: which, the record cannot say.
  if ((record.dropped ?? 0) > 0)
    return {
      files: [...everyFile].sort(),
      unrecorded: candidates.filter((file) => entry(file) === undefined),
      statements: new Set(candidates.flatMap((file) => entry(file)?.statements ?? [])).size,
      seconds: { all: sum(everyFile), chosen: sum(everyFile) },
      incomplete: true,
    };
  const cost = (file: string) => Math.max(entry(file)?.seconds ?? 1, 0.1);
  const unrecorded = candidates.filter((file) => entry(file) === undefined);
  const chosen = new Set<string>([...forced, ...unrecorded]);
  const covered = new Set<string>();
  for (const file of chosen) for (const s of entry(file)?.statements ?? []) covered.add(s);
  const all = new Set<string>(covered);
  for (const file of candidates) for (const s of entry(file)?.statements ?? []) all.add(s);
  const left = candidates.filter((file) => !chosen.has(file));
  for (;;) {
    let best: string | undefined;
    let bestValue = 0;
    for (const file of left) {
      if (chosen.has(file)) continue;
      const fresh = (entry(file)?.statements ?? []).filter((s) => !covered.has(s)).length;
      const value = fresh / cost(file);
      if (fresh > 0 && (value > bestValue || (value === bestValue && best !== undefined && file < best))) {
        best = file;
        bestValue = value;
      }
    }
    if (best === undefined) break;
    chosen.add(best);
    for (const s of entry(best)!.statements) covered.add(s);
  }
  return {
    files: [...chosen].sort(),
    unrecorded,
    statements: all.size,
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
): Promise<Cover & { ownDatabases: string[] }> {
  const own = await Promise.all(
    candidates.map(async (file) => (OWN_DATABASES.test(await textWithHelpers(file)) ? [file] : [])),
  );
  const ownDatabases = own.flat();
  return { ...coverOf(record, candidates, [...forced, ...ownDatabases]), ownDatabases };
}
