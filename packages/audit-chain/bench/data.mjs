// The benchmark's entry: about 500 bytes once written as a line (a realistic forge.called record).
export function entryData(i) {
  return {
    name: 'code.csv_filter',
    persona: 'analyst',
    session: 'sess-7f3a9c',
    task: `task-${i % 97}`,
    ok: i % 11 !== 0,
    run_id: `run-${i.toString(36).padStart(8, '0')}`,
    duration_ms: i % 1000,
    cache: i % 3 === 0 ? 'hit' : 'miss',
    input_digest: `sha256:${'3b'.repeat(32)}`,
    sandbox: 'bwrap',
    note: 'n'.repeat(12),
  };
}

/** The same record as a plain JSON line, for the no-hash, no-lock baseline. */
export function plainLine(i) {
  return `${JSON.stringify({ seq: i + 1, ts: new Date().toISOString(), type: 'forge.called', data: entryData(i) })}\n`;
}
