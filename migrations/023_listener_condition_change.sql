-- Which in-place change an agent's `update_failed` condition is about (the heartbeat's optional
-- `change`, docs/listener-protocol.md#heartbeat): a second refused change while the first is still told
-- has the same reason and only another message, and must still be a new `deployment.update_failed`.
alter table listener_deployment_conditions add column change text;
