/**
 * EXPLAIN ANALYZE of the statements one read request sends: the plan shape, the pages it touches
 * (the work that must not grow with the workspace), and any sequential scan of a big table.
 */
import type pg from 'pg';
import type { CapturedStatement } from './load-protocol.ts';
import type { PlanSummary } from './report.ts';

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  'Rows Removed by Filter'?: number;
  'Parent Relationship'?: string;
  Plans?: PlanNode[];
}

// Tables that grow with use; a scan of a table of a few rows (api_keys, workspaces) is the right plan.
const BIG_TABLES = new Set(['deployments', 'revisions', 'events', 'tracing_projects', 'listeners', 'deployment_tags']);

function describe(node: PlanNode, depth: number, lines: string[], seqScans: string[]): void {
  const target = [
    node['Index Name'] ? `using ${node['Index Name']}` : '',
    node['Relation Name'] ? `on ${node['Relation Name']}` : '',
  ]
    .filter(Boolean)
    .join(' ');
  const removed = node['Rows Removed by Filter'] ? `, ${node['Rows Removed by Filter']} removed by filter` : '';
  const loops = node['Actual Loops'] > 1 ? ` x${node['Actual Loops']} loops` : '';
  const subplan = node['Parent Relationship'] === 'SubPlan' ? 'subquery: ' : '';
  lines.push(
    `${'  '.repeat(depth)}${subplan}${node['Node Type']}${target ? ` ${target}` : ''} (rows ${node['Actual Rows']}${loops}${removed})`,
  );
  if (node['Node Type'] === 'Seq Scan' && node['Relation Name'] && BIG_TABLES.has(node['Relation Name']))
    seqScans.push(node['Relation Name']);
  for (const child of node.Plans ?? []) describe(child, depth + 1, lines, seqScans);
}

export async function explainStatements(pool: pg.Pool, statements: CapturedStatement[]): Promise<PlanSummary> {
  const lines: string[] = [];
  const seqScans: string[] = [];
  let pages = 0;
  for (const statement of statements) {
    if (!/^\s*select\b/i.test(statement.sql)) continue;
    const result = await pool.query<{ 'QUERY PLAN': { Plan: PlanNode; 'Execution Time': number }[] }>(
      `explain (analyze, buffers, format json) ${statement.sql}`,
      statement.parameters,
    );
    const root = result.rows[0]!['QUERY PLAN'][0]!;
    if (lines.length > 0) lines.push('');
    describe(root.Plan, 0, lines, seqScans);
    pages += root.Plan['Shared Hit Blocks'] + root.Plan['Shared Read Blocks'];
  }
  return { text: lines.join('\n'), pages, seqScans };
}
