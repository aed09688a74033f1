-- Why an endpoint's split is not served (docs/listener.md, "Endpoints"): a listener's cluster may have no
-- Gateway API, no Gateway configured, or a Gateway that refuses the route; the data plane's last word on
-- it, in plain words, shown with the endpoint's split. Null while served, or before anything was said.
alter table deployment_endpoints add column split_not_served_reason text;
