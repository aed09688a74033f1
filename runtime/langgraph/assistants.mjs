// Assistants and their versions in langgraph.assistants and langgraph.assistant_versions: the
// `assistants` operations of LangChain's server (its in-memory ones, in SQL).
import { assistantOf, authFilterSql, isUuid, sqlCount, storable } from './records.mjs';
import { SCHEMA } from './schema.mjs';

export function createAssistants(ctx) {
  const { HTTPException, handleAuthEvent, isAuthMatching, json, notFound, pool, transaction } = ctx;
  /** WHERE of a search or count; a filter that cannot match (it holds a NUL, say) is `false`. */
  function assistantWhere(query, filters, params) {
    const where = [authFilterSql('metadata', filters, params)];
    if (![query.graph_id, query.name, query.metadata].every(storable)) return 'false';
    if (query.graph_id != null) where.push(`graph_id = $${params.push(query.graph_id)}`);
    if (query.name != null) where.push(`strpos(lower(name), lower($${params.push(query.name)})) > 0`);
    if (query.metadata != null) where.push(`metadata @> $${params.push(JSON.stringify(query.metadata))}::jsonb`);
    return where.join(' and ');
  }
  /** The assistant's row (locked with `client`), or 404 as the in-memory server answers. */
  async function assistantRow(client, assistantId, filters, lock = false) {
    if (!isUuid(assistantId)) throw notFound('Assistant not found');
    const { rows } = await client.query(
      `select * from ${SCHEMA}.assistants where assistant_id = $1${lock ? ' for update' : ''}`,
      [assistantId],
    );
    if (!rows[0] || !isAuthMatching(rows[0].metadata, filters)) throw notFound('Assistant not found');
    return rows[0];
  }

  const assistants = {
    async *search(query, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:search', {
        graph_id: query.graph_id,
        metadata: query.metadata,
        limit: query.limit,
        offset: query.offset,
      });
      const params = [];
      const where = assistantWhere(query, filters, params);
      const sortBy = ['assistant_id', 'created_at', 'updated_at', 'name', 'graph_id'].includes(query.sort_by)
        ? query.sort_by
        : 'created_at';
      const order = query.sort_order === 'asc' ? 'asc' : 'desc';
      const { rows } = await pool.query(
        `select *, count(*) over () as total from ${SCHEMA}.assistants where ${where}
         order by ${sortBy} ${order}, assistant_id limit $${params.push(sqlCount(query.limit, 10))} offset $${params.push(sqlCount(query.offset, 0))}`,
        params,
      );
      for (const row of rows) yield { assistant: assistantOf(row), total: Number(row.total) };
    },
    async get(assistantId, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:read', { assistant_id: assistantId });
      return assistantOf(await assistantRow(pool, assistantId, filters));
    },
    async put(assistantId, values, auth) {
      const [filters, mutable] = await handleAuthEvent(auth, 'assistants:create', {
        assistant_id: assistantId,
        config: values.config,
        context: values.context,
        graph_id: values.graph_id,
        metadata: values.metadata,
        if_exists: values.if_exists,
        name: values.name,
        description: values.description,
      });
      return transaction(async (client) => {
        const name = values.name || values.graph_id;
        const inserted = await client.query(
          `insert into ${SCHEMA}.assistants (assistant_id, graph_id, name, description, config, context, metadata, version)
           values ($1, $2, $3, $4, $5, $6, $7, 1) on conflict (assistant_id) do nothing returning *`,
          [
            assistantId,
            values.graph_id,
            name,
            values.description ?? null,
            json(values.config ?? {}),
            json(values.context ?? {}),
            json(mutable.metadata ?? {}),
          ],
        );
        if (inserted.rows[0]) {
          const row = inserted.rows[0];
          await client.query(
            `insert into ${SCHEMA}.assistant_versions (assistant_id, version, graph_id, name, description, config, context, metadata, created_at)
             values ($1, 1, $2, $3, $4, $5, $6, $7, $8)`,
            [
              assistantId,
              row.graph_id,
              row.name,
              row.description,
              json(row.config),
              json(row.context),
              json(row.metadata),
              row.created_at,
            ],
          );
          return assistantOf(row);
        }
        const { rows } = await client.query(`select * from ${SCHEMA}.assistants where assistant_id = $1`, [
          assistantId,
        ]);
        if (!isAuthMatching(rows[0]?.metadata, filters) || values.if_exists === 'raise')
          throw new HTTPException(409, { message: 'Assistant already exists' });
        return assistantOf(rows[0]);
      });
    },
    async patch(assistantId, values, auth) {
      const [filters, mutable] = await handleAuthEvent(auth, 'assistants:update', {
        assistant_id: assistantId,
        graph_id: values?.graph_id,
        config: values?.config,
        metadata: values?.metadata,
        name: values?.name,
        description: values?.description,
      });
      return transaction(async (client) => {
        const current = await assistantRow(client, assistantId, filters, true);
        const next = {
          graph_id: values?.graph_id ?? current.graph_id,
          config: values?.config ?? current.config,
          context: values?.context ?? current.context,
          name: values?.name ?? current.name,
          description: values?.description ?? current.description,
          metadata: mutable.metadata != null ? { ...current.metadata, ...mutable.metadata } : current.metadata,
        };
        const version = await client.query(
          `select coalesce(max(version), 0) + 1 as version from ${SCHEMA}.assistant_versions where assistant_id = $1`,
          [assistantId],
        );
        const params = [
          assistantId,
          next.graph_id,
          next.name,
          next.description,
          json(next.config),
          json(next.context),
          json(next.metadata),
          version.rows[0].version,
        ];
        await client.query(
          `insert into ${SCHEMA}.assistant_versions (assistant_id, graph_id, name, description, config, context, metadata, version)
           values ($1, $2, $3, $4, $5, $6, $7, $8)`,
          params,
        );
        const updated = await client.query(
          `update ${SCHEMA}.assistants set graph_id = $2, name = $3, description = $4, config = $5, context = $6,
             metadata = $7, version = $8, updated_at = now() where assistant_id = $1 returning *`,
          params,
        );
        return assistantOf(updated.rows[0]);
      });
    },
    async delete(assistantId, deleteThreads, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:delete', { assistant_id: assistantId });
      return transaction(async (client) => {
        await assistantRow(client, assistantId, filters, true);
        await client.query(`delete from ${SCHEMA}.runs where assistant_id = $1`, [assistantId]);
        if (deleteThreads === true)
          await client.query(`delete from ${SCHEMA}.threads where metadata ->> 'assistant_id' = $1`, [assistantId]);
        await client.query(`delete from ${SCHEMA}.assistants where assistant_id = $1`, [assistantId]);
        return [assistantId];
      });
    },
    async setLatest(assistantId, version, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:update', { assistant_id: assistantId, version });
      return transaction(async (client) => {
        await assistantRow(client, assistantId, filters, true);
        const updated = await client.query(
          `update ${SCHEMA}.assistants a set config = v.config, metadata = v.metadata, version = v.version,
             name = v.name, updated_at = now()
           from ${SCHEMA}.assistant_versions v
           where a.assistant_id = $1 and v.assistant_id = $1 and v.version = $2 returning a.*`,
          [assistantId, version],
        );
        if (!updated.rows[0]) throw notFound('Assistant version not found');
        return assistantOf(updated.rows[0]);
      });
    },
    async getVersions(assistantId, query, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:read', { assistant_id: assistantId });
      // No versions: the route answers 404 `Assistant "<id>" not found.`
      if (!isUuid(assistantId) || !storable(query.metadata)) return [];
      const params = [assistantId];
      const where = ['assistant_id = $1', authFilterSql('metadata', filters, params)];
      if (query.metadata != null) where.push(`metadata @> $${params.push(JSON.stringify(query.metadata))}::jsonb`);
      const { rows } = await pool.query(
        `select * from ${SCHEMA}.assistant_versions where ${where.join(' and ')} order by version desc
         limit $${params.push(sqlCount(query.limit, 10))} offset $${params.push(sqlCount(query.offset, 0))}`,
        params,
      );
      return rows.map((row) => {
        const { updated_at: _ignored, ...version } = assistantOf(row);
        return version;
      });
    },
    async count(query, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:search', {
        graph_id: query.graph_id,
        metadata: query.metadata,
        limit: 0,
        offset: 0,
      });
      const params = [];
      const { rows } = await pool.query(
        `select count(*) from ${SCHEMA}.assistants where ${assistantWhere(query, filters, params)}`,
        params,
      );
      return Number(rows[0].count);
    },
  };

  return assistants;
}
