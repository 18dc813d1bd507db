import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import 'uplot/dist/uPlot.min.css';
import './app.css';
import { currentSession, type SessionView } from './api.js';
import { ApprovalsPage } from './pages/approvals.js';
import { AuditPage } from './pages/audit.js';
import { GatewayPage } from './pages/gateway.js';
import { OverviewPage } from './pages/overview.js';
import { PolicyPage } from './pages/policy.js';
import { RunsPage } from './pages/runs.js';
import { ToolsPage } from './pages/tools.js';

const PAGES = [
  ['overview', 'Overview'],
  ['tools', 'Tools'],
  ['runs', 'Runs'],
  ['audit', 'Audit'],
  ['approvals', 'Approvals'],
  ['gateway', 'Gateway'],
  ['policy', 'Policy'],
] as const;

/** The route: `#/<page>/<rest>`. */
function route(): { page: string; rest: string } {
  const [page = 'overview', ...rest] = location.hash.replace(/^#\/?/, '').split('/');
  return { page: page || 'overview', rest: rest.map(decodeURIComponent).join('/') };
}

function App() {
  const [r, setR] = useState(route());
  const [session, setSession] = useState<SessionView | undefined>();
  const [error, setError] = useState<string | undefined>();
  useEffect(() => {
    const on = () => setR(route());
    addEventListener('hashchange', on);
    // The address may have changed between the first render and now (effects run after paint):
    // a change then fired no event this listener heard.
    on();
    currentSession().then(setSession, (e: Error) => setError(e.message));
    return () => removeEventListener('hashchange', on);
  }, []);
  return (
    <div class="shell">
      <header>
        <span class="brand">forge console</span>
        <nav>
          {PAGES.map(([id, label]) => (
            <a key={id} href={`#/${id}`} class={r.page === id ? 'active' : ''}>
              {label}
            </a>
          ))}
        </nav>
        <span class="who" data-testid="operator">
          {session ? `acting as ${session.operator}` : ''}
        </span>
      </header>
      <main>
        {error ? <p class="bad">{error}</p> : null}
        {r.page === 'overview' ? <OverviewPage /> : null}
        {r.page === 'tools' ? <ToolsPage /> : null}
        {r.page === 'runs' ? <RunsPage id={r.rest || undefined} /> : null}
        {r.page === 'audit' ? <AuditPage /> : null}
        {r.page === 'approvals' ? <ApprovalsPage id={r.rest || undefined} /> : null}
        {r.page === 'gateway' ? <GatewayPage server={r.rest || undefined} /> : null}
        {r.page === 'policy' ? <PolicyPage /> : null}
      </main>
    </div>
  );
}

render(<App />, document.getElementById('app') as HTMLElement);
