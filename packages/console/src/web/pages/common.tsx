import { useEffect, useState } from 'preact/hooks';

/** Loads `load()` once per change of `deps`; `reload` asks again. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []): { value?: T; error?: string; reload: () => void } {
  const [state, setState] = useState<{ value?: T; error?: string }>({});
  const [n, setN] = useState(0);
  useEffect(() => {
    let live = true;
    load().then(
      (value) => live && setState({ value }),
      (e: Error) => live && setState({ error: e.message }),
    );
    return () => {
      live = false;
    };
  }, [...deps, n]);
  return { ...state, reload: () => setN((x) => x + 1) };
}

/** What a page shows while it loads, or why it could not. */
export function Status({ error }: { error?: string | undefined }) {
  return error ? (
    <p class="bad" data-testid="error">
      {error}
    </p>
  ) : (
    <p class="dim">loading…</p>
  );
}

/** A JSON value as indented text (strings in it are inert already: they came through the API). */
export function Json({ value }: { value: unknown }) {
  return <pre class="json">{JSON.stringify(value, null, 2)}</pre>;
}

/** `1,234`. */
export const count = (n: number) => n.toLocaleString('en-US');

/** `12 ms`, `1.2 s`. */
export const ms = (n: number | null | undefined) =>
  n === null || n === undefined ? '–' : n < 1000 ? `${Math.round(n)} ms` : `${(n / 1000).toFixed(1)} s`;
