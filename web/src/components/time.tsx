/** A moment in the reader's time zone; the exact UTC time is in the element for copying and tooltips. */

const format = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

export function Time({ iso }: { iso: string | null | undefined }) {
  if (!iso) return <span class="muted">never</span>;
  return (
    <time dateTime={iso} title={iso}>
      {format.format(new Date(iso))}
    </time>
  );
}
