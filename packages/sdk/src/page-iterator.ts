/**
 * Walking a paginated list (`{resources, offset}`, docs/api.md "Lists and pagination") to its end, so
 * no caller writes the offset loop again:
 *
 * ```ts
 * for await (const page of client.deployments.pages({ status: 'READY' })) console.log(page.resources.length);
 * for await (const deployment of client.deployments.all()) console.log(deployment.name);
 * ```
 */
import type { Page } from './api-aliases.ts';

/** The service's largest page: fewer requests for a whole list. */
export const MAX_PAGE_SIZE = 100;

export type PageFetcher<T> = (offset: number, limit: number) => Promise<Page<T>>;

/**
 * Every page from `offset`, in order. A page shorter than `limit` is the last one (no request for an
 * empty page after it); an offset that does not move forward ends the walk rather than loop forever.
 */
export async function* iteratePages<T>(
  fetchPage: PageFetcher<T>,
  options: { offset?: number; limit?: number } = {},
): AsyncGenerator<Page<T>> {
  const limit = options.limit ?? MAX_PAGE_SIZE;
  let offset = options.offset ?? 0;
  for (;;) {
    const page = await fetchPage(offset, limit);
    yield page;
    if (page.resources.length < limit || page.offset <= offset) return;
    offset = page.offset;
  }
}

/** Every item of every page. */
export async function* iterateItems<T>(pages: AsyncIterable<Page<T>>): AsyncGenerator<T> {
  for await (const page of pages) yield* page.resources;
}

/** The whole list in an array (for lists known to be small). */
export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}
