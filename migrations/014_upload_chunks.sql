-- Source uploads live in the database, not in a replica's data directory: an upload received by any
-- api replica is there for the worker on another machine. The bytes of upload `upload_id`, in order of
-- `seq` (0, 1, ...), about 1 MiB each; written in one transaction with the source_uploads row, so an
-- upload is there whole or not at all, and gone with its row. An upload made before this migration has
-- no chunks: its file is still in the data directory of the replica that received it.
create table upload_chunks (
  upload_id uuid not null references source_uploads (id) on delete cascade,
  seq integer not null check (seq >= 0),
  data bytea not null,
  primary key (upload_id, seq)
);
-- The bytes are gzip already: compressing them again would only cost time.
alter table upload_chunks alter column data set storage external;
