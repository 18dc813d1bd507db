import { useState } from 'preact/hooks';
import type { DecisionView, ReviewView } from '../../services.js';
import type { ProposalView } from '../../views.js';
import { get, post } from '../api.js';
import { Json, Status, useLoad } from './common.js';

/** A line diff, each line classed by its first character (added, removed, context). */
function Diff({ text }: { text: string }) {
  if (!text) return <p class="dim">no live version to compare with: this would be the first</p>;
  return (
    <pre class="diff" data-testid="diff">
      {text.split('\n').map((l, i) => (
        <span key={i} class={l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : ''}>
          {l}
          {'\n'}
        </span>
      ))}
    </pre>
  );
}

function Review({ id }: { id: string }) {
  const r = useLoad(() => get<ReviewView>(`proposals/${encodeURIComponent(id)}`), [id]);
  const [reason, setReason] = useState('');
  const [done, setDone] = useState<{ ok: boolean; text: string } | undefined>();
  const [busy, setBusy] = useState(false);
  if (!r.value) return <Status error={r.error} />;
  const { proposal: p, active, impl_diff, gap_history } = r.value;
  const decide = (what: 'approve' | 'reject') => {
    setBusy(true);
    post<DecisionView>(`proposals/${encodeURIComponent(id)}/${what}`, what === 'reject' ? { reason } : {})
      .then(
        (d) =>
          setDone({
            ok: true,
            text: d.tool ? `approved: ${d.tool.name} v${d.tool.version} is live (${d.tool.digest.slice(0, 19)}…)` : `${d.state}: ${d.name}`,
          }),
        (e: Error) => setDone({ ok: false, text: e.message }),
      )
      .finally(() => {
        setBusy(false);
        r.reload();
      });
  };
  const open = p.state === 'validated' || p.state === 'pending' || p.state === 'failed';
  return (
    <article class="review" data-testid="review">
      <h2>
        {p.name} <span class={`state ${p.state}`}>{p.state}</span>
      </h2>
      <dl>
        <dt>proposal</dt>
        <dd>{p.id}</dd>
        <dt>capability</dt>
        <dd>{p.capability}</dd>
        <dt>proposed by</dt>
        <dd>
          persona {p.persona} at {p.created_at}
        </dd>
        <dt>runtime</dt>
        <dd>{p.spec.runtime ?? '–'}</dd>
        <dt>replaces</dt>
        <dd>{active ? `v${active.version} (${active.digest.slice(0, 19)}…, ${active.state})` : 'nothing: a new tool'}</dd>
      </dl>
      <h3>Description</h3>
      <p class="prose" data-testid="description">
        {p.spec.description ?? ''}
      </p>
      <h3>Implementation</h3>
      <pre class="impl" data-testid="impl">
        {p.spec.impl ?? ''}
      </pre>
      <h3>Against the live version</h3>
      <Diff text={impl_diff} />
      <h3>Input schema</h3>
      <Json value={p.spec.input_schema} />
      {p.spec.output_schema ? (
        <>
          <h3>Output schema</h3>
          <Json value={p.spec.output_schema} />
        </>
      ) : null}
      <h3>Validation</h3>
      {p.validation ? <Json value={p.validation} /> : <p class="dim">not validated yet</p>}
      <h3>The gap it answers</h3>
      {gap_history.length === 0 ? (
        <p class="dim">no recorded gap</p>
      ) : (
        <ul>
          {gap_history.map((g) => (
            <li key={g.at + g.persona}>
              {g.at}: persona {g.persona} ({g.source}){g.description ? `: ${g.description}` : ''}
            </li>
          ))}
        </ul>
      )}
      <h3>History</h3>
      <Json value={p.history} />
      {open ? (
        <div class="decide">
          <button type="button" data-testid="approve" disabled={busy || p.state !== 'validated'} onClick={() => decide('approve')}>
            Approve
          </button>
          <textarea
            data-testid="reason"
            rows={2}
            placeholder="why it is rejected (the proposer sees it)"
            value={reason}
            onInput={(e) => setReason((e.target as HTMLTextAreaElement).value)}
          />
          <button type="button" data-testid="reject" disabled={busy || reason.trim() === ''} onClick={() => decide('reject')}>
            Reject
          </button>
        </div>
      ) : null}
      {done ? (
        <p class={done.ok ? 'good' : 'bad'} data-testid="decision">
          {done.text}
        </p>
      ) : null}
    </article>
  );
}

export function ApprovalsPage({ id }: { id?: string | undefined }) {
  const list = useLoad(() => get<ProposalView[]>('proposals'), [id]);
  return (
    <section>
      <h1>Approvals</h1>
      {!list.value ? (
        <Status error={list.error} />
      ) : list.value.length === 0 ? (
        <p class="dim">no proposals</p>
      ) : (
        <table data-testid="proposals">
          <thead>
            <tr>
              <th>state</th>
              <th>tool</th>
              <th>capability</th>
              <th>persona</th>
              <th>proposed</th>
            </tr>
          </thead>
          <tbody>
            {list.value.map((p) => (
              <tr key={p.id} class={p.id === id ? 'selected' : ''}>
                <td>
                  <span class={`state ${p.state}`}>{p.state}</span>
                </td>
                <td>
                  <a href={`#/approvals/${encodeURIComponent(p.id)}`}>{p.name}</a>
                </td>
                <td>{p.capability}</td>
                <td>{p.persona}</td>
                <td class="time">{p.created_at}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {id ? <Review id={id} /> : null}
    </section>
  );
}
