/**
 * A page's heading. It takes the focus when the page opens, so keyboard and screen-reader users start
 * at the new page instead of the link they followed, and it names the tab.
 */
import type { ComponentChildren } from 'preact';
import { useEffect, useRef } from 'preact/hooks';

export function PageTitle({ title, children }: { title: string; children?: ComponentChildren }) {
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    document.title = `${title} · Slipway`;
    heading.current?.focus({ preventScroll: true });
  }, [title]);
  return (
    <div class="page-title">
      <h1 ref={heading} tabIndex={-1}>
        {title}
      </h1>
      {children}
    </div>
  );
}
