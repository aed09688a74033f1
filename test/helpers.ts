/**
 * The old name of the test harness, kept while test/cli/, test/langgraph/ and test/attack/ (owned by
 * others during the current restructuring) still import it. Everything lives in support/harness.ts.
 */
export * from './support/harness.ts';
