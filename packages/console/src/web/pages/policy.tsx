import { useState } from 'preact/hooks';
import type { PolicyView } from '../../views.js';
import { get } from '../api.js';
import { Status, useLoad } from './common.js';

/** One rule: its value and the file it came from. */
function Rule({ name, value, from }: { name: string; value: unknown; from: string | undefined }) {
  return (
    <tr>
      <td>
        <code>{name}</code>
      </td>
      <td>
        <pre class="json">{value === undefined ? '(none)' : JSON.stringify(value, null, 2)}</pre>
      </td>
      <td class="dim">{from ?? 'bundle defaults'}</td>
    </tr>
  );
}

/** What applies to one persona, each rule with its origin (its own entry, else the `*` entry where the policy has one). */
function PersonaRules({ v, persona }: { v: PolicyView; persona: string }) {
  const e = v.effective as Record<string, Record<string, unknown> | unknown[] | undefined>;
  const entry = (key: string) => {
    const map = (e[key] ?? {}) as Record<string, unknown>;
    if (persona in map) return { name: `${key}.${persona}`, value: map[persona], from: v.origin[`${key}.${persona}`] };
    if ('*' in map) return { name: `${key}.*`, value: map['*'], from: v.origin[`${key}.*`] };
    return { name: `${key}.${persona}`, value: undefined, from: v.origin[key] };
  };
  const smith = (e.toolsmith ?? {}) as { mode?: Record<string, unknown>; approvers?: string[] };
  const mode = persona in (smith.mode ?? {}) ? smith.mode?.[persona] : smith.mode?.['*'];
  const rows = [
    entry('persona_namespaces'),
    { name: 'operator_personas', value: ((e.operator_personas ?? []) as string[]).includes(persona), from: v.origin.operator_personas },
    entry('persona_sandbox_overrides'),
    entry('persona_secret_allow'),
    { name: 'toolsmith.mode', value: mode ?? 'direct', from: v.origin['toolsmith.mode'] },
    { name: 'toolsmith.approvers', value: (smith.approvers ?? []).includes(persona), from: v.origin['toolsmith.approvers'] },
  ];
  return (
    <table data-testid="persona-rules">
      <tbody>
        {rows.map((r) => (
          <Rule key={r.name} name={r.name} value={r.value} from={r.from} />
        ))}
      </tbody>
    </table>
  );
}

export function PolicyPage() {
  const p = useLoad(() => get<PolicyView>('policy'));
  const [persona, setPersona] = useState('');
  if (!p.value) return <Status error={p.error} />;
  const v = p.value;
  return (
    <section>
      <h1>Policy</h1>
      <table data-testid="policy-files">
        <tbody>
          {v.files.map((f) => (
            <tr key={f.file} class={f.status === 'invalid' ? 'problem' : ''}>
              <td>{f.role}</td>
              <td>
                <code>{f.file}</code>
              </td>
              <td class={f.status === 'invalid' ? 'bad' : f.status === 'ok' ? 'good' : 'dim'}>
                {f.status}
                {f.problem
                  ? `: ${f.problem.line ?? ''}${f.problem.column !== undefined ? `:${f.problem.column}` : ''} ${f.problem.message}`
                  : ''}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <div class="filters">
        <label>
          rules for{' '}
          <select data-testid="persona" value={persona} onChange={(e) => setPersona((e.target as HTMLSelectElement).value)}>
            <option value="">every persona (the whole policy)</option>
            {v.personas.map((x) => (
              <option key={x} value={x}>
                persona {x}
              </option>
            ))}
          </select>
        </label>
        <input placeholder="another persona" onChange={(e) => setPersona((e.target as HTMLInputElement).value.trim())} />
      </div>
      {persona ? (
        <PersonaRules v={v} persona={persona} />
      ) : (
        <table data-testid="policy-rules">
          <tbody>
            {Object.entries(v.effective).map(([k, value]) => (
              <Rule key={k} name={k} value={value} from={v.origin[k]} />
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
