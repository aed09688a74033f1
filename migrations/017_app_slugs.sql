-- The app's slug: the DNS label of its stable URL (`<slug>.<apps domain>`, docs/app-urls.md). Until now
-- the data plane derived it as `<name>-<first 8 hex digits of the id>` each time it served the app, so
-- two workspaces' `agent` whose ids began with the same 32 bits got one slug, and whichever was served
-- last took the other's URL. The slug is now chosen once, when the deployment is stored, and kept
-- unique: the short form when it is free, else `<name>-<first 16 hex digits>` (60 random bits).

-- The slug of a name and an id with `digits` hex digits of the id; the name is cut so that the whole
-- slug stays a DNS label (63 characters) and folded into one defensively (names are labels already).
create function app_slug_of(name text, id uuid, digits int) returns text
language sql immutable strict
as $$
  select coalesce(
           nullif(regexp_replace(left(regexp_replace(lower(name), '[^a-z0-9-]+', '-', 'g'), 62 - digits),
                                 '^-+|-+$', '', 'g'), ''),
           'app')
         || '-' || left(replace(id::text, '-', ''), digits)
$$;

alter table deployments add column app_slug text;

-- Existing deployments keep the URL they have; of two that shared one, the older keeps it.
with ranked as (
  select id,
         app_slug_of(name, id, 8) as short_slug,
         app_slug_of(name, id, 16) as long_slug,
         row_number() over (partition by app_slug_of(name, id, 8) order by created_at, id) as n
  from deployments
)
update deployments d
set app_slug = case when r.n = 1 then r.short_slug else r.long_slug end
from ranked r
where r.id = d.id;

alter table deployments alter column app_slug set not null;
create unique index deployments_app_slug on deployments (app_slug);

-- Every new deployment gets its slug here, whoever inserts it. Inserts of the same short slug wait for
-- each other (a transaction-scoped advisory lock), so the check and the insert cannot interleave.
create function deployments_assign_app_slug() returns trigger
language plpgsql
as $$
declare
  short_slug text := app_slug_of(new.name, new.id, 8);
begin
  perform pg_advisory_xact_lock(hashtextextended('slipway.app_slug:' || short_slug, 0));
  if exists (select 1 from deployments where app_slug = short_slug) then
    new.app_slug := app_slug_of(new.name, new.id, 16);
  else
    new.app_slug := short_slug;
  end if;
  return new;
end
$$;

create trigger deployments_app_slug before insert on deployments
for each row execute function deployments_assign_app_slug();
