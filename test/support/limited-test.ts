/**
 * node:test's `test`, with the suite's per-test limit (`PER_TEST` from support/wait.ts) unless the test gives
 * its own `timeout`. A test file that can wait imports `test` from here instead of node:test, so a hang fails
 * that test by name within `TEST_SECONDS`, not the whole file at the runner's file limit. Like every limit in
 * the suite it is a hang guard, not a timing assertion.
 *
 * Node's runner takes a test's location from the frame that called its `test`, so a failure made here names
 * this module as its location; the failing test's name and its file (the runner's per-file test) say where
 * it is. Node 20 has no other way to give every test of a file a default timeout.
 */
import { test as nodeTest, type TestContext, type TestOptions } from 'node:test';
import { PER_TEST } from './wait.ts';

type TestBody = (t: TestContext) => void | Promise<void>;

export function test(name: string, fn: TestBody): Promise<void>;
export function test(name: string, options: TestOptions, fn: TestBody): Promise<void>;
export function test(name: string, options: TestOptions | TestBody, fn?: TestBody): Promise<void> {
  return typeof options === 'function'
    ? nodeTest(name, PER_TEST, options)
    : nodeTest(name, { ...PER_TEST, ...options }, fn);
}
