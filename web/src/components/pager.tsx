/** Previous and next page of a list; the API has no total, so "next" is offered when the page was full. */

export function Pager({
  offset,
  shown,
  limit,
  onOffset,
}: {
  offset: number;
  shown: number;
  limit: number;
  onOffset: (offset: number) => void;
}) {
  if (offset === 0 && shown < limit) return null;
  return (
    <nav class="pager" aria-label="Pages">
      <button type="button" disabled={offset === 0} onClick={() => onOffset(Math.max(0, offset - limit))}>
        Newer
      </button>
      <span class="muted">{shown === 0 ? 'No more' : `${offset + 1}–${offset + shown}`}</span>
      <button type="button" disabled={shown < limit} onClick={() => onOffset(offset + limit)}>
        Older
      </button>
    </nav>
  );
}
