import { PageTitle } from '../components/page-title.tsx';

export function NotFoundPage() {
  return (
    <>
      <PageTitle title="No such page" />
      <p>
        This address is not a page of the dashboard. <a href="/deployments">See the deployments</a>.
      </p>
    </>
  );
}
