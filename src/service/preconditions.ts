/**
 * A precondition of a write (If-Match, docs/api.md "Conditional requests"): a check of the resource as
 * it is now, which the service runs inside the write's own transaction, right after it has locked the
 * resource's row and before it changes anything. So no other writer can change the resource between
 * the check and the write: a writer that got the lock first has committed, and the check sees its
 * change. It throws (412 `precondition_failed`) to refuse the write; the transaction then rolls back.
 */
import type { Db } from '../store/schema.ts';

export type Precondition = (tx: Db) => Promise<void>;

/** What a write takes besides its input. */
export interface WriteConditions {
  precondition?: Precondition;
}
