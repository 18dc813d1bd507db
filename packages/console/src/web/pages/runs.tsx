import { useState } from 'preact/hooks';
import type { CallView, Page } from '../../views.js';
import { get } from '../api.js';
import { count, ms, Status, useLoad } from './common.js';

const SINCE: Record<string, number> = { hour: 3_600_000, day: 86_400_000, week: 7 * 86_400_000 };

export function RunsPage() {
  const [tool, setTool] = useState('');
  const [persona, setPersona] = useState('');
  const [outcome, setOutcome] = useState('');
  const [since, setSince] = useState('');
  const [before, setBefore] = useState<number | undefined>();
  const page = useLoad(
    () =>
      get<Page<CallView>>('calls', {
        tool,
        persona,
        outcome,
        since: since ? Date.now() - (SINCE[since] ?? 0) : undefined,
        before,
        limit: 100,
      }),
    [tool, persona, outcome, since, before],
  );
  const field = (set: (v: string) => void) => (e: Event) => {
    setBefore(undefined);
    set((e.target as HTMLInputElement).value.trim());
  };
  return (
    <section>
      <h1>Runs</h1>
      <div class="filters">
        <input data-testid="filter-tool" placeholder="tool" value={tool} onChange={field(setTool)} />
        <input data-testid="filter-persona" placeholder="persona" value={persona} onChange={field(setPersona)} />
        <select data-testid="filter-outcome" value={outcome} onChange={field(setOutcome)}>
          <option value="">any outcome</option>
          <option value="ok">ok</option>
          <option value="error">any error</option>
        </select>
        <select value={since} onChange={field(setSince)}>
          <option value="">any time</option>
          <option value="hour">last hour</option>
          <option value="day">last day</option>
          <option value="week">last week</option>
        </select>
        {page.value ? <span class="dim">{count(page.value.total)} calls</span> : null}
        <button type="button" disabled={before === undefined} onClick={() => setBefore(undefined)}>
          newest
        </button>
        <button type="button" disabled={!page.value?.next} onClick={() => setBefore(page.value?.next)}>
          older
        </button>
      </div>
      {!page.value ? (
        <Status error={page.error} />
      ) : (
        <table data-testid="runs">
          <thead>
            <tr>
              <th>#</th>
              <th>time</th>
              <th>tool</th>
              <th>persona</th>
              <th>outcome</th>
              <th>duration</th>
              <th>run</th>
            </tr>
          </thead>
          <tbody>
            {page.value.rows.map((c) => (
              <tr key={c.seq} class={c.ok ? '' : 'problem'}>
                <td class="num">{c.seq}</td>
                <td class="time">{c.ts}</td>
                <td>{c.name}</td>
                <td>{c.persona}</td>
                <td class={c.ok ? 'good' : 'bad'}>{c.outcome}</td>
                <td class="num">{ms(c.duration_ms)}</td>
                <td>
                  <code>{c.run_id ?? '–'}</code>
                  {c.cache === 'hit' ? ' (cache hit)' : ''}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
