import { useState } from 'preact/hooks';
import type { RunView } from '../../services.js';
import type { CallView, Page } from '../../views.js';
import { get } from '../api.js';
import { count, Json, ms, Status, useLoad } from './common.js';

/** An artifact's last bytes, as text (inert, like every answer). */
function Tail({ id, path }: { id: string; path: string }) {
  const t = useLoad(
    () => get<{ size: number; from: number; text: string }>(`runs/${encodeURIComponent(id)}/tail/${encodeURIComponent(path)}`),
    [id, path],
  );
  if (!t.value) return <Status error={t.error} />;
  return (
    <>
      <p class="dim">
        {path}: {count(t.value.size)} bytes{t.value.from > 0 ? `, the last ${count(t.value.size - t.value.from)} shown` : ''}
      </p>
      <pre class="tail" data-testid={`tail-${path}`}>
        {t.value.text}
      </pre>
    </>
  );
}

/** One run: its facts, its stdout and stderr tails, its artifacts to download, the manifest as written. */
function RunDetail({ id }: { id: string }) {
  const r = useLoad(() => get<RunView>(`runs/${encodeURIComponent(id)}`), [id]);
  if (!r.value) return <Status error={r.error} />;
  const m = r.value.manifest;
  const files = r.value.artifacts.filter((a) => a.kind === 'file');
  const streams = files.filter((a) => /(^|\/)(full_)?std(out|err)[^/]*$/.test(a.path));
  const o = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' ? (v as Record<string, unknown>) : {});
  const tool = o(m.tool);
  const sb = o(m.sandbox);
  const enforced = o(sb.enforced);
  const exit = o(m.exit);
  const facts: [string, string][] = [
    ['tool', tool.name ? `${tool.name} v${tool.version ?? '?'} (${tool.scope ?? '?'}, ${tool.runtime ?? '?'})` : ''],
    ['persona', String(m.persona ?? '')],
    ['outcome', m.ok === true ? 'ok' : `failed${m.error ? `: ${JSON.stringify(m.error)}` : ''}`],
    ['duration', ms(typeof m.duration_ms === 'number' ? m.duration_ms : undefined)],
    ['cache', String(m.cache ?? '')],
    [
      'sandbox',
      sb.label
        ? `${sb.label}, ${sb.mode ?? ''}${sb.host_uid !== undefined ? `, host uid ${sb.host_uid}` : ''}; limits by ${Object.entries(
            enforced,
          )
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')}`
        : '',
    ],
    [
      'exit',
      exit.reason
        ? `${exit.reason}${exit.code !== null && exit.code !== undefined ? ` ${exit.code}` : ''}${exit.signal ? ` (${exit.signal})` : ''}`
        : '',
    ],
  ];
  return (
    <article class="review" data-testid="run">
      <h2>
        run <code>{r.value.run_id}</code> {r.value.kind === 'hit' ? '(a cache hit)' : ''}
      </h2>
      <dl>{facts.filter(([, v]) => v !== '').flatMap(([k, v]) => [<dt key={`${k}-t`}>{k}</dt>, <dd key={`${k}-d`}>{v}</dd>])}</dl>
      {typeof m.stderr_tail === 'string' && m.stderr_tail !== '' ? (
        <>
          <h3>stderr (its tail, as the manifest keeps it)</h3>
          <pre class="tail" data-testid="stderr">
            {m.stderr_tail}
          </pre>
        </>
      ) : null}
      {streams.map((a) => (
        <Tail key={a.path} id={id} path={a.path} />
      ))}
      <h3>Artifacts</h3>
      {files.length === 0 ? (
        <p class="dim">none</p>
      ) : (
        <ul data-testid="artifacts">
          {files.map((a) => (
            <li key={a.path}>
              <a href={`/api/runs/${encodeURIComponent(id)}/download/${encodeURIComponent(a.path)}`} download>
                {a.path}
              </a>{' '}
              <span class="dim">{count(Number(a.bytes ?? 0))} bytes</span>
            </li>
          ))}
        </ul>
      )}
      <h3>Manifest</h3>
      <Json value={m} />
    </article>
  );
}

const SINCE: Record<string, number> = { hour: 3_600_000, day: 86_400_000, week: 7 * 86_400_000 };

export function RunsPage({ id }: { id?: string | undefined }) {
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
      {id ? <RunDetail id={id} /> : null}
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
                  {c.run_id ? <a href={`#/runs/${encodeURIComponent(c.run_id)}`}>{c.run_id}</a> : '–'}
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
