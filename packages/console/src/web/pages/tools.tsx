import { useState } from 'preact/hooks';
import type { StatsView, ToolView } from '../../views.js';
import { get } from '../api.js';
import { Chart } from './chart.js';
import { count, Json, ms, Status, useLoad } from './common.js';

/** One tool's calls and latency over the last day, aggregated by the server. */
function ToolChart({ name }: { name: string }) {
  const s = useLoad(() => get<StatsView>('stats', { window: 'day', tool: name }), [name]);
  if (!s.value) return <Status error={s.error} />;
  return (
    <div class="charts">
      <Chart
        title="calls (24 h)"
        testid={`tool-calls-${name}`}
        t={s.value.t}
        series={[{ label: 'calls', values: s.value.calls, stroke: '#2471a3' }]}
      />
      <Chart
        title="latency (ms)"
        testid={`tool-latency-${name}`}
        t={s.value.t}
        series={[
          { label: 'p50', values: s.value.p50, stroke: '#27ae60' },
          { label: 'p99', values: s.value.p99, stroke: '#e67e22' },
        ]}
      />
    </div>
  );
}

/** A tool's details: its description, runtime, digest, input schema and charts, loaded when opened. */
function Details({ t }: { t: ToolView }) {
  const [open, setOpen] = useState(false);
  return (
    <details onToggle={(e) => setOpen((e.target as HTMLDetailsElement).open)}>
      <summary>{t.name}</summary>
      <p class="prose">{t.description}</p>
      <p class="dim">
        {t.runtime ?? ''} {t.digest ?? ''}
      </p>
      {open ? <ToolChart name={t.name} /> : null}
      {t.input_schema ? <Json value={t.input_schema} /> : null}
    </details>
  );
}

export function ToolsPage() {
  const tools = useLoad(() => get<ToolView[]>('tools'));
  const stats = useLoad(() => get<StatsView>('stats', { window: 'day' }));
  if (!tools.value) return <Status error={tools.error} />;
  const by = new Map((stats.value?.tools ?? []).map((t) => [t.name, t]));
  return (
    <section>
      <h1>Tools</h1>
      <table data-testid="tools">
        <thead>
          <tr>
            <th>tool</th>
            <th>version</th>
            <th>scope</th>
            <th>forged by</th>
            <th>calls (24 h)</th>
            <th>errors</th>
            <th>p50</th>
            <th>p99</th>
          </tr>
        </thead>
        <tbody>
          {tools.value.map((t) => {
            const s = by.get(t.name);
            return (
              <tr key={t.name}>
                <td>
                  <Details t={t} />
                </td>
                <td>{t.version ?? '–'}</td>
                <td>{t.source ?? t.scope ?? ''}</td>
                <td>{t.created_by ?? ''}</td>
                <td class="num">{count(s?.calls ?? 0)}</td>
                <td class="num">{count(s?.errors ?? 0)}</td>
                <td class="num">{ms(s?.p50_ms)}</td>
                <td class="num">{ms(s?.p99_ms)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </section>
  );
}
