import { useEffect, useRef, useState } from 'preact/hooks';
import type { AuditFilesView, EntriesPage, EntryView, Page } from '../../views.js';
import { follow, get, rawBytes, rawStream } from '../api.js';
import { inertText } from '../inert.js';
import { type Verdict, verifyLog } from '../verify.js';
import { count, Status } from './common.js';

interface Checked {
  verdict?: Verdict;
  error?: string;
  ms?: number;
  at?: string;
}

/** Verifies the whole log in this page: its files' bytes from the server, every hash and signature checked here. */
async function verifyHere(publicKey: string): Promise<{ verdict: Verdict; ms: number }> {
  const files = await get<AuditFilesView>('audit/files');
  const t0 = performance.now();
  // A file the listing does not name does not exist (the checkpoints of a log never checkpointed).
  const listed = (name: string) => files.names.includes(name);
  const verdict = await verifyLog(
    {
      base: files.base,
      names: files.names,
      read: (name) => (listed(name) ? rawBytes(name) : Promise.resolve(undefined)),
      stream: (name) => (listed(name) ? rawStream(name) : Promise.resolve(undefined)),
    },
    publicKey.trim() ? { publicKey: publicKey.trim() } : {},
  );
  return { verdict, ms: performance.now() - t0 };
}

function VerdictLine({ c }: { c: Checked }) {
  if (c.error)
    return (
      <p class="verdict bad" data-testid="verdict" data-ok="error">
        could not verify: {c.error}
      </p>
    );
  const v = c.verdict;
  if (!v)
    return (
      <p class="verdict dim" data-testid="verdict" data-ok="pending">
        verifying in this page…
      </p>
    );
  const rate = c.ms && c.ms > 0 ? Math.round((v.entries / c.ms) * 1000) : 0;
  const cps = `${v.checkpoints.used} checkpoint(s) used${v.checkpoints.ignored ? `, ${v.checkpoints.ignored} of other keys ignored` : ''}; ${count(v.checkpoints.not_yet_checkpointed)} entr${v.checkpoints.not_yet_checkpointed === 1 ? 'y' : 'ies'} not yet checkpointed`;
  if (v.ok)
    return (
      <p class="verdict good" data-testid="verdict" data-ok="true" data-entries={v.entries} data-ms={Math.round(c.ms ?? 0)}>
        ✓ {count(v.entries)} entries verified in this page in {(c.ms ?? 0).toFixed(0)} ms ({count(rate)} entries/s); head{' '}
        {v.head.slice(0, 16)}…; {cps}
      </p>
    );
  const b = v.first_bad;
  return (
    <p class="verdict bad" data-testid="verdict" data-ok="false" data-seq={b?.seq} data-reason={b?.reason}>
      ✗ the log does not verify: entry #{b?.seq} ({b?.file} line {b?.line}): {b?.reason}. {count(v.entries)} entries before it verified in{' '}
      {(c.ms ?? 0).toFixed(0)} ms; {cps}
    </p>
  );
}

export function AuditPage() {
  const [page, setPage] = useState<Page<EntryView> | undefined>();
  const [before, setBefore] = useState<number | undefined>();
  const [type, setType] = useState('');
  const [error, setError] = useState<string | undefined>();
  const [checked, setChecked] = useState<Checked>({});
  const [key, setKey] = useState('');
  const [live, setLive] = useState<EntryView[]>([]);
  const keyRef = useRef('');
  keyRef.current = key;

  const verify = () => {
    setChecked({});
    verifyHere(keyRef.current).then(
      ({ verdict, ms }) => setChecked({ verdict, ms, at: new Date().toISOString() }),
      (e: Error) => setChecked({ error: inertText(e.message) }),
    );
  };

  const [keyRead, setKeyRead] = useState(false);
  useEffect(() => {
    get<AuditFilesView>('audit/files').then(
      (f) => {
        if (f.publicKey) setKey(f.publicKey);
        keyRef.current = f.publicKey ?? '';
        setKeyRead(true);
      },
      (e: Error) => setChecked({ error: e.message }),
    );
  }, []);

  // The live tail: entries appended after the newest the first page showed, by any process (so
  // none is missed while the stream connects); each batch is verified again.
  const [since, setSince] = useState<number | undefined>();
  useEffect(() => {
    if (since === undefined) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const stop = follow<EntryView>(`audit/events?after=${since}`, 'entry', (e) => {
      setLive((l) => (l.some((x) => x.seq === e.seq) ? l : [e, ...l].slice(0, 200)));
      clearTimeout(timer);
      timer = setTimeout(verify, 500);
    });
    return () => {
      stop();
      clearTimeout(timer);
    };
  }, [since]);

  // The first verification starts once the entries are shown (and the configured key is known):
  // reading and hashing the whole log must not hold up the page's first paint.
  const started = useRef(false);
  useEffect(() => {
    if (started.current || !keyRead || !page) return;
    started.current = true;
    verify();
  }, [keyRead, page]);

  useEffect(() => {
    setPage(undefined);
    get<EntriesPage>('audit/entries', { before, limit: 100, type: type || undefined }).then(
      (p) => {
        setPage(p);
        setSince((s) => s ?? p.newest);
      },
      (e: Error) => setError(e.message),
    );
  }, [before, type]);

  const bad = checked.verdict?.first_bad?.seq;
  const state = (seq: number) =>
    !checked.verdict ? 'unchecked' : bad === undefined ? 'ok' : seq < bad ? 'ok' : seq === bad ? 'bad' : 'unverified';
  const rows =
    before === undefined ? [...live.filter((e) => !page?.rows.some((r) => r.seq === e.seq)), ...(page?.rows ?? [])] : (page?.rows ?? []);

  return (
    <section>
      <h1>Audit log</h1>
      <div class="panel">
        <VerdictLine c={checked} />
        <details>
          <summary>Public key (checkpoints must be signed by it)</summary>
          <textarea
            data-testid="public-key"
            rows={4}
            placeholder="-----BEGIN PUBLIC KEY----- … (empty: every checkpoint counts, none needs a signature)"
            value={key}
            onInput={(e) => setKey((e.target as HTMLTextAreaElement).value)}
          />
        </details>
        <button type="button" data-testid="verify" onClick={verify}>
          Verify again
        </button>
      </div>
      <div class="filters">
        <label>
          type{' '}
          <input
            data-testid="type-filter"
            value={type}
            placeholder="forge.called, or a prefix like toolsmith."
            onChange={(e) => {
              setBefore(undefined);
              setType((e.target as HTMLInputElement).value.trim());
            }}
          />
        </label>
        {page ? (
          <span class="dim">
            {count(page.total)} entr{page.total === 1 ? 'y' : 'ies'}
          </span>
        ) : null}
        <button type="button" disabled={before === undefined} onClick={() => setBefore(undefined)}>
          newest
        </button>
        <button type="button" disabled={!page?.next} onClick={() => setBefore(page?.next)}>
          older
        </button>
      </div>
      {!page ? <Status error={error} /> : null}
      <table class="entries" data-testid="entries">
        <thead>
          <tr>
            <th>#</th>
            <th>time</th>
            <th>type</th>
            <th>entry</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((e) => (
            <tr key={e.seq} data-seq={e.seq} data-state={state(e.seq)} class={`entry ${state(e.seq)}`}>
              <td class="num">{e.seq}</td>
              <td class="time">{e.ts}</td>
              <td>{e.type}</td>
              <td class="line">
                {state(e.seq) === 'bad' ? <strong class="bad">{checked.verdict?.first_bad?.reason}: </strong> : null}
                <code>{e.text}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
