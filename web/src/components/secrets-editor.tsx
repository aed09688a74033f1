/** Secret rows for a new deployment: names are environment variable names; values are write-only. */
import type { Secret } from '../api/types.ts';

export interface SecretRow extends Secret {
  key: number;
}

const SECRET_NAME = '^[A-Za-z_][A-Za-z0-9_]{0,254}$';

export function SecretsEditor({ rows, onChange }: { rows: SecretRow[]; onChange: (rows: SecretRow[]) => void }) {
  const update = (key: number, change: Partial<Secret>) =>
    onChange(rows.map((row) => (row.key === key ? { ...row, ...change } : row)));
  return (
    <fieldset class="secrets">
      <legend>Secrets</legend>
      <p class="help">Given to the app as environment variables. Values are stored encrypted and never shown again.</p>
      {rows.map((row, i) => (
        <div class="secret-row" key={row.key}>
          <label>
            <span>Name {i + 1}</span>
            <input
              value={row.name}
              pattern={SECRET_NAME}
              required
              autocomplete="off"
              spellcheck={false}
              onInput={(event) => update(row.key, { name: event.currentTarget.value })}
            />
          </label>
          <label>
            <span>Value {i + 1}</span>
            <input
              type="password"
              value={row.value}
              autocomplete="new-password"
              onInput={(event) => update(row.key, { value: event.currentTarget.value })}
            />
          </label>
          <button
            type="button"
            aria-label={`Remove secret ${i + 1}${row.name ? ` (${row.name})` : ''}`}
            onClick={() => onChange(rows.filter((r) => r.key !== row.key))}
          >
            Remove
          </button>
        </div>
      ))}
      <button
        type="button"
        onClick={() => onChange([...rows, { key: Math.max(0, ...rows.map((r) => r.key)) + 1, name: '', value: '' }])}
      >
        Add secret
      </button>
    </fieldset>
  );
}
