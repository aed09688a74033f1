/**
 * The Slipway client (docs/sdk.md): `import { SlipwayClient } from '@slipway/sdk'`.
 */
export { SlipwayClient, endpointFailure, ok, type SlipwayClientOptions } from './slipway-client.ts';
export { SlipwayError, type ClientErrorCode, type ValidationIssue } from './slipway-error.ts';
export { parseWarnings } from './response-warnings.ts';
export { iteratePages, iterateItems, collect, MAX_PAGE_SIZE, type PageFetcher } from './page-iterator.ts';
export {
  followLog,
  waitForRevision,
  type FollowLogOptions,
  type LogEvent,
  type WaitOptions,
} from './revision-follow.ts';
export { readEventStream, type ServerSentEvent } from './event-stream.ts';
export { createRetryingFetch, retryAfterMs, type RetryOptions, type RetryingFetch } from './retrying-fetch.ts';
export type * from './api-aliases.ts';
export type { paths } from './api-types.ts';
