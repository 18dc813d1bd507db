import { useState } from 'preact/hooks';
import type { GatewayDiffView, GatewayServerView, GatewayToolView } from '../../views.js';
import { get, post } from '../api.js';
import { Json, Status, useLoad } from './common.js';

/** A changed tool's fields, pinned against listed now. */
function Changed({ d }: { d: GatewayDiffView }) {
  return (
    <div class="diff-fields">
      {d.fields.map((f) => (
        <div key={f}>
          <code>{f}</code>
          <pre class="diff">
            <span class="del">- {JSON.stringify(d.old?.definition[f] ?? null, null, 2)}</span>
            {'\n'}
            <span class="add">+ {JSON.stringify(d.new?.definition[f] ?? null, null, 2)}</span>
          </pre>
        </div>
      ))}
    </div>
  );
}

/** One server: its tools against their pins (the server is started to list them), the changes, approve and unpin. */
function Server({ name, changed, server }: { name: string; changed: () => void; server: GatewayServerView | undefined }) {
  const tools = useLoad(() => get<GatewayToolView[]>(`gateway/${encodeURIComponent(name)}/tools`), [name]);
  const diff = useLoad(() => get<GatewayDiffView[]>(`gateway/${encodeURIComponent(name)}/diff`), [name]);
  const [picked, setPicked] = useState<Record<string, boolean>>({});
  const [done, setDone] = useState<{ ok: boolean; text: string } | undefined>();
  if (!tools.value) return <Status error={tools.error} />;
  const byTool = new Map((diff.value ?? []).map((d) => [d.tool, d]));
  const reload = () => {
    tools.reload();
    diff.reload();
    changed();
    setPicked({});
  };
  const approve = () => {
    // Exactly what is shown: each picked tool with the digest this page listed.
    const expect: Record<string, string> = {};
    for (const t of tools.value ?? []) if (picked[t.tool] && t.digest) expect[t.tool] = t.digest;
    post<{ approved: string[] }>(`gateway/${encodeURIComponent(name)}/approve`, { expect, definition: server?.definitionDigest })
      .then(
        (r) => setDone({ ok: true, text: `pinned ${r.approved.join(', ')}` }),
        (e: Error) => setDone({ ok: false, text: e.message }),
      )
      .finally(reload);
  };
  const unpin = (tool: string) =>
    post<{ removed: string[] }>(`gateway/${encodeURIComponent(name)}/unpin`, { tools: [tool] })
      .then(
        (r) => setDone({ ok: true, text: `unpinned ${r.removed.join(', ')}` }),
        (e: Error) => setDone({ ok: false, text: e.message }),
      )
      .finally(reload);
  const pinnable = (t: GatewayToolView) => t.status === 'new' || t.status === 'changed';
  return (
    <article class="review" data-testid="gateway-server">
      <h2>{name}</h2>
      {server?.definition ? (
        <details open>
          <summary>How it runs (declared in {server.definition.file}; an approval covers this too)</summary>
          <Json value={server.definition} />
        </details>
      ) : null}
      <table data-testid="gateway-tools">
        <thead>
          <tr>
            <th />
            <th>tool</th>
            <th>status</th>
            <th>digest</th>
            <th>description</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {tools.value.map((t) => (
            <tr key={t.tool} data-tool={t.tool} data-status={t.status} class={t.status === 'changed' ? 'problem' : ''}>
              <td>
                {pinnable(t) ? (
                  <input
                    type="checkbox"
                    aria-label={`approve ${t.tool}`}
                    checked={picked[t.tool] === true}
                    onChange={(e) => setPicked({ ...picked, [t.tool]: (e.target as HTMLInputElement).checked })}
                  />
                ) : null}
              </td>
              <td>{t.name}</td>
              <td>{t.status}</td>
              <td>
                <code>{(t.digest ?? t.pinned ?? '').slice(0, 19)}</code>
              </td>
              <td>
                <p class="prose">{t.definition?.description ?? ''}</p>
                {byTool.get(t.tool)?.status === 'changed' ? <Changed d={byTool.get(t.tool) as GatewayDiffView} /> : null}
                {t.status === 'new' && t.definition ? (
                  <details>
                    <summary>definition</summary>
                    <Json value={t.definition} />
                  </details>
                ) : null}
              </td>
              <td>
                {t.status === 'approved' || t.status === 'changed' ? (
                  <button type="button" data-testid={`unpin-${t.tool}`} onClick={() => unpin(t.tool)}>
                    Unpin
                  </button>
                ) : null}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <button
        type="button"
        data-testid="gateway-approve"
        disabled={!server?.definitionDigest || !Object.values(picked).some(Boolean)}
        onClick={approve}
      >
        Approve the selected definitions as shown
      </button>
      {done ? (
        <p class={done.ok ? 'good' : 'bad'} data-testid="gateway-decision">
          {done.text}
        </p>
      ) : null}
    </article>
  );
}

export function GatewayPage({ server }: { server?: string | undefined }) {
  const list = useLoad(() => get<GatewayServerView[]>('gateway'));
  return (
    <section>
      <h1>Gateway</h1>
      {!list.value ? (
        <Status error={list.error} />
      ) : list.value.length === 0 ? (
        <p class="dim">no upstream MCP servers (declare them in gateway.json, or: forge gateway import &lt;file&gt;)</p>
      ) : (
        <table data-testid="gateway-servers">
          <thead>
            <tr>
              <th>server</th>
              <th>transport</th>
              <th>sandbox</th>
              <th>from</th>
              <th>state</th>
              <th>tools</th>
            </tr>
          </thead>
          <tbody>
            {list.value.map((s) => (
              <tr key={s.name} class={s.name === server ? 'selected' : ''}>
                <td>
                  <a href={`#/gateway/${encodeURIComponent(s.name)}`}>{s.name}</a>
                </td>
                <td>{s.transport}</td>
                <td class={s.sandboxed ? '' : 'bad'}>{s.sandboxed ? 'sandboxed' : s.transport === 'http' ? 'remote' : 'UNSANDBOXED'}</td>
                <td>{s.from}</td>
                <td>
                  {s.state}
                  {s.error ? <div class="bad">{s.error}</div> : null}
                </td>
                <td>
                  {s.tools.approved} approved{s.tools.withheld !== undefined ? `, ${s.tools.withheld} withheld` : ''}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {server ? <Server name={server} changed={list.reload} server={list.value?.find((x) => x.name === server)} /> : null}
    </section>
  );
}
