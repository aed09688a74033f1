/**
 * The Kysely table types (src/store/schema.ts) and the migrated schema (migrations/) must agree: the
 * same tables and columns, the same nullability, and for a column typed as a union of strings the same
 * values as its CHECK constraint (migrations/011_state_checks.sql and the OAuth tables'). The types are
 * read with the TypeScript compiler, so a column added to one side only fails here, not in production.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import ts from 'typescript';
import { createTestDatabase, type TestDatabase } from '../support/harness.ts';

interface TypedColumn {
  nullable: boolean;
  /** The values of a column typed as a union of string literals; null for any other type. */
  literals: string[] | null;
}

/** Bookkeeping of the migration runner (src/db/migrate.ts), never read through Kysely. */
const UNTYPED_TABLES = new Set(['slipway_migrations']);

function typedTables(): Map<string, Map<string, TypedColumn>> {
  const file = path.resolve('src/store/schema.ts');
  const program = ts.createProgram([file], {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    allowImportingTsExtensions: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    types: ['node'],
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(file);
  assert.ok(source, 'src/store/schema.ts is part of the program');
  const database = source.statements.find(
    (s): s is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(s) && s.name.text === 'Database',
  );
  assert.ok(database, 'src/store/schema.ts declares interface Database');

  const tables = new Map<string, Map<string, TypedColumn>>();
  for (const table of checker.getPropertiesOfType(checker.getTypeAtLocation(database))) {
    const columns = new Map<string, TypedColumn>();
    for (const column of checker.getPropertiesOfType(checker.getTypeOfSymbolAtLocation(table, database))) {
      let type = checker.getTypeOfSymbolAtLocation(column, database);
      // ColumnType<Select, Insert, Update> (and Generated, Json): what a select reads is what the column holds.
      const selected = type.getProperty('__select__');
      if (selected) type = checker.getTypeOfSymbolAtLocation(selected, database);
      const members = type.isUnion() ? type.types : [type];
      const present = members.filter((m) => !(m.flags & (ts.TypeFlags.Null | ts.TypeFlags.Undefined)));
      const literals = present.filter((m) => m.isStringLiteral()).map((m) => m.value);
      columns.set(column.name, {
        nullable: members.some((m) => (m.flags & ts.TypeFlags.Null) !== 0),
        literals: present.length > 0 && literals.length === present.length ? literals.sort() : null,
      });
    }
    tables.set(table.name, columns);
  }
  return tables;
}

interface DatabaseColumn {
  nullable: boolean;
  /** The values of a one-column CHECK (column in (...)), if it has one. */
  allowed: string[] | null;
}

async function migratedTables(t: TestDatabase): Promise<Map<string, Map<string, DatabaseColumn>>> {
  const columns = await t.pool.query<{ table_name: string; column_name: string; is_nullable: 'YES' | 'NO' }>(
    `select table_name, column_name, is_nullable from information_schema.columns
     where table_schema = 'public' and table_name in (select table_name from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE')`,
  );
  const checks = await t.pool.query<{ table_name: string; column_name: string; definition: string }>(
    `select c.conrelid::regclass::text as table_name, a.attname as column_name, pg_get_constraintdef(c.oid) as definition
     from pg_constraint c join pg_attribute a on a.attrelid = c.conrelid and a.attnum = c.conkey[1]
     where c.contype = 'c' and cardinality(c.conkey) = 1 and c.connamespace = 'public'::regnamespace`,
  );
  const tables = new Map<string, Map<string, DatabaseColumn>>();
  for (const row of columns.rows) {
    if (!tables.has(row.table_name)) tables.set(row.table_name, new Map());
    tables.get(row.table_name)!.set(row.column_name, { nullable: row.is_nullable === 'YES', allowed: null });
  }
  for (const check of checks.rows) {
    // PostgreSQL prints `col in ('a', 'b')` as ((col = ANY (ARRAY['a'::text, 'b'::text]))).
    if (!check.definition.startsWith(`CHECK ((${check.column_name} = ANY (ARRAY[`)) continue;
    const values = [...check.definition.matchAll(/'((?:[^']|'')*)'::text/g)]
      .map((m) => m[1]!.replace(/''/g, "'"))
      .sort();
    const column = tables.get(check.table_name)?.get(check.column_name);
    if (column) column.allowed = values;
  }
  return tables;
}

let t: TestDatabase;
let typed: Map<string, Map<string, TypedColumn>>;
let migrated: Map<string, Map<string, DatabaseColumn>>;

before(async () => {
  t = await createTestDatabase();
  typed = typedTables();
  migrated = await migratedTables(t);
});
after(() => t.drop());

test('every table of the migrated schema has a table type, and every table type a table', () => {
  const inDatabase = [...migrated.keys()].filter((name) => !UNTYPED_TABLES.has(name)).sort();
  assert.deepEqual([...typed.keys()].sort(), inDatabase);
});

test('each table type has exactly the columns of its table, with the same nullability', () => {
  for (const [table, columns] of typed) {
    const actual = migrated.get(table);
    if (!actual) continue; // reported by the test above
    assert.deepEqual([...columns.keys()].sort(), [...actual.keys()].sort(), `columns of ${table}`);
    for (const [name, column] of columns) {
      assert.equal(
        column.nullable,
        actual.get(name)?.nullable,
        `${table}.${name}: typed ${column.nullable ? 'nullable' : 'not null'}, migrated ${actual.get(name)?.nullable ? 'nullable' : 'not null'}`,
      );
    }
  }
});

test('a column typed as a union of strings has a CHECK with the same values, and a CHECKed column that union', () => {
  for (const [table, columns] of typed) {
    for (const [name, column] of columns) {
      const allowed = migrated.get(table)?.get(name)?.allowed ?? null;
      if (column.literals === null && allowed === null) continue;
      assert.deepEqual(
        column.literals,
        allowed,
        `${table}.${name}: typed ${JSON.stringify(column.literals)}, CHECK allows ${JSON.stringify(allowed)}`,
      );
    }
  }
});
