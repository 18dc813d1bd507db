import type { StatsView, ToolView } from '../../views.js';
import { get } from '../api.js';
import { count, Json, ms, Status, useLoad } from './common.js';

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
                  <details>
                    <summary>{t.name}</summary>
                    <p class="prose">{t.description}</p>
                    <p class="dim">
                      {t.runtime ?? ''} {t.digest ?? ''}
                    </p>
                    {t.input_schema ? <Json value={t.input_schema} /> : null}
                  </details>
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
