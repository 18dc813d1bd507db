import { useState } from 'preact/hooks';
import type { DoctorView, OverviewView, StatsView } from '../../views.js';
import { get } from '../api.js';
import { Chart } from './chart.js';
import { count, Status, useLoad } from './common.js';

const PALETTE = ['#c0392b', '#8e44ad', '#d35400', '#16a085', '#2c3e50', '#7f8c8d'];

/** Calls per bucket, latency percentiles and errors by kind, over the last hour or day. */
export function Activity() {
  const [window, setWindow] = useState<'hour' | 'day'>('hour');
  const s = useLoad(() => get<StatsView>('stats', { window }), [window]);
  return (
    <div class="panel">
      <h2>
        Activity over the last{' '}
        <select data-testid="window" value={window} onChange={(e) => setWindow((e.target as HTMLSelectElement).value as 'hour' | 'day')}>
          <option value="hour">hour</option>
          <option value="day">day</option>
        </select>
      </h2>
      {!s.value ? (
        <Status error={s.error} />
      ) : (
        <div class="charts">
          <Chart title="calls" testid="chart-calls" t={s.value.t} series={[{ label: 'calls', values: s.value.calls, stroke: '#2471a3' }]} />
          <Chart
            title="latency (ms)"
            testid="chart-latency"
            t={s.value.t}
            series={[
              { label: 'p50', values: s.value.p50, stroke: '#27ae60' },
              { label: 'p99', values: s.value.p99, stroke: '#e67e22' },
            ]}
          />
          <Chart
            title="errors by kind"
            testid="chart-errors"
            t={s.value.t}
            series={Object.entries(s.value.errors).map(([kind, values], i) => ({
              label: kind,
              values,
              stroke: PALETTE[i % PALETTE.length] as string,
            }))}
          />
        </div>
      )}
    </div>
  );
}

/** The doctor's checks: probed apart (it starts a sandbox), shown when they come. */
function Doctor({ d }: { d: { value?: DoctorView; error?: string } }) {
  return (
    <div class="panel">
      <h2>Checks (forge doctor)</h2>
      {!d.value ? (
        <Status error={d.error} />
      ) : (
        <table data-testid="checks">
          <tbody>
            {d.value.checks.map((c, i) => (
              <tr key={`${c.name}-${i}`} class={c.ok ? '' : 'problem'}>
                <td>{c.ok ? '✓' : '✗'}</td>
                <td>{c.name}</td>
                <td>
                  {c.detail}
                  {c.fix ? <div class="fix">fix: {c.fix}</div> : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

export function OverviewPage() {
  const o = useLoad(() => get<OverviewView>('overview'));
  const d = useLoad(() => get<DoctorView>('doctor'));
  if (!o.value) return <Status error={o.error} />;
  const v = o.value;
  const sandbox = d.value?.sandbox;
  return (
    <section>
      <h1>Overview</h1>
      <div class="cards" data-testid="overview">
        <div class="card">
          <h3>Operator</h3>
          <p>{v.operator.name}</p>
          <p class={v.operator.approver ? 'good' : 'dim'}>
            {v.operator.approver ? 'may approve' : 'not an approver (policy toolsmith.approvers)'}
          </p>
        </div>
        <div class="card">
          <h3>Sandbox</h3>
          {!d.value ? (
            <p class="dim">probing…</p>
          ) : sandbox ? (
            <p>
              uid {sandbox.uid}, gid {sandbox.gid}
              {sandbox.droppedFromRoot ? ' (dropped from root)' : ''}
            </p>
          ) : (
            <p class="bad">unavailable (see the checks below)</p>
          )}
          {sandbox?.limits ? (
            <p class="dim">
              memory {sandbox.limits.memory}; cpu {sandbox.limits.cpu}; processes {sandbox.limits.pids}
            </p>
          ) : null}
        </div>
        <div class="card">
          <h3>Policy</h3>
          <p class={v.policy.ok ? 'good' : 'bad'}>{v.policy.ok ? 'in force' : `not in force: ${v.policy.error ?? ''}`}</p>
          {v.policy.lastReloadError ? (
            <p class="bad" data-testid="reload-error">
              last reload failed (#{v.policy.lastReloadError.seq}, {v.policy.lastReloadError.ts}): {v.policy.lastReloadError.message}
              {v.policy.lastReloadError.kept === 'last_good'
                ? ' (its last good version stays in force)'
                : v.policy.lastReloadError.kept === 'nothing'
                  ? ' (it never was valid: nothing of it is in force)'
                  : ''}
            </p>
          ) : null}
          <p class="dim">{v.policy.files.join(', ') || 'bundle defaults only'}</p>
        </div>
        <div class="card">
          <h3>Audit log</h3>
          <p>
            {count(v.audit.entries)} entries{v.audit.signed ? ', checkpoints signed' : ', checkpoints unsigned'}
          </p>
          <p class="dim">head {v.audit.head.slice(0, 16)}…</p>
          <p class="dim" data-testid="audit-where">
            {v.audit.log}
          </p>
        </div>
        <div class="card">
          <h3>Toolsmith</h3>
          <p class={v.toolsmith.enabled && !v.toolsmith.paused ? 'good' : 'dim'}>
            {!v.toolsmith.enabled ? 'off' : v.toolsmith.paused ? `paused: ${v.toolsmith.pausedWhy ?? ''}` : 'on'}
          </p>
          <p>
            <a href="#/approvals">{v.toolsmith.waiting} waiting for approval</a>
          </p>
        </div>
        <div class="card">
          <h3>Gateway</h3>
          {v.gateway.servers.length === 0 ? <p class="dim">no upstream servers</p> : null}
          {v.gateway.servers.map((s) => (
            <p key={s.name}>
              <a href={`#/gateway/${encodeURIComponent(s.name)}`}>{s.name}</a>: {s.tools} approved
              {s.withheld ? `, ${s.withheld} withheld` : ''} ({s.state})
            </p>
          ))}
        </div>
        <div class="card">
          <h3>Queue and workers</h3>
          {v.queue ? (
            <p>
              {v.queue.pending} pending, {v.queue.claimed} running, {v.queue.done} done, {v.queue.failed} failed
            </p>
          ) : (
            <p class="dim">no queue</p>
          )}
          {v.members.map((m) => (
            <p key={`${m.host}:${m.pid}`} class={m.alive ? '' : 'dim'}>
              {m.alive ? '●' : '○'} {m.kind} {m.name} (pid {m.pid} on {m.host})
              {m.facts && Object.keys(m.facts).length > 0 ? (
                <span class="dim">
                  {' '}
                  {Object.entries(m.facts)
                    .map(([k, x]) => `${k}=${x}`)
                    .join(' ')}
                </span>
              ) : null}
            </p>
          ))}
        </div>
      </div>
      <Activity />
      <Doctor d={d} />
    </section>
  );
}
