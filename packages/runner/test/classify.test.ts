import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Answer } from '../src/executors/sandbox/answer.js';
import { classify, type NotRunFacts, type RanFacts, RULES, type RunFacts, type SandboxFailure } from '../src/executors/sandbox/classify.js';

// The sandbox run's table of rules, over facts written by hand: no bwrap, no processes, no files.

const answered: Answer = { ok: true, envelope: { ok: true, data: { n: 1 }, meta: { note: 'own' } } };

/** A run that exited 0 and printed a valid ok envelope; each test changes the fact its rule reads. */
function ran(over: Partial<RanFacts> = {}): RanFacts {
  return {
    ran: true,
    cancelled: undefined,
    exit: { reason: 'exit', code: 0, signal: null },
    stdout: { truncated: false, bytes: 40, cap: 1024, fullArtifact: undefined, keptAt: '/runs/r1/artifacts/stdout.bin' },
    timeoutMs: 2000,
    artifacts: { dir: '/runs/r1/artifacts', cap: 4096, full: false },
    ceilings: { output_cap: 16384, artifacts_bytes: 65536 },
    stderr: '',
    secrets: [],
    answer: answered,
    ...over,
  };
}

function notRun(kind: SandboxFailure['kind']): NotRunFacts {
  return { ran: false, error: { kind, message: `the sandbox said ${kind}` } };
}

describe('one rule decides each way a sandboxed run can end', () => {
  it('sandbox_unavailable: the host cannot sandbox; not the tool’s doing', () => {
    expect(classify(notRun('sandbox_unavailable'))).toEqual({
      rule: 'sandbox_unavailable',
      outcome: 'none',
      error: { kind: 'sandbox_unavailable', message: 'the sandbox said sandbox_unavailable' },
    });
  });

  it('bind_denied: the sandbox refused a bind; not the tool’s doing', () => {
    expect(classify(notRun('bind_denied'))).toEqual({
      rule: 'bind_denied',
      outcome: 'none',
      error: { kind: 'bind_denied', message: 'the sandbox said bind_denied' },
    });
  });

  it('sandbox_failed: anything else that kept the sandbox from starting is internal, and a failure', () => {
    expect(classify(notRun('internal'))).toEqual({
      rule: 'sandbox_failed',
      outcome: 'failure',
      error: { kind: 'internal', message: 'the sandbox said internal' },
    });
  });

  it('cancelled: killed after the call was cancelled, whatever it printed', () => {
    const v = classify(ran({ cancelled: 'the client went away', exit: { reason: 'signal', code: null, signal: 'SIGKILL' } }));
    expect(v).toEqual({
      rule: 'cancelled',
      outcome: 'none',
      error: { kind: 'cancelled', message: 'the client went away; the tool was killed' },
    });
  });

  it('stdout_over_cap: cut at the cap, with the counts and where the whole output is', () => {
    const v = classify(
      ran({ stdout: { truncated: true, bytes: 5000, cap: 1024, fullArtifact: '/runs/r1/artifacts/full_stdout.bin', keptAt: '' } }),
    );
    expect(v).toMatchObject({
      rule: 'stdout_over_cap',
      outcome: 'failure',
      meta: {
        stdout_truncated: true,
        stdout_truncated_at_bytes: 1024,
        stdout_total_bytes: 5000,
        stdout_full_artifact: '/runs/r1/artifacts/full_stdout.bin',
      },
      error: { kind: 'resource_limit' },
    });
    expect('error' in v && v.error.message).toMatchInlineSnapshot(
      `"the tool printed 5000 bytes, over its output cap of 1024; the whole output is kept in /runs/r1/artifacts/full_stdout.bin — print less, or raise meta.output_cap (policy ceiling 16384)"`,
    );
    const unspilled = classify(ran({ stdout: { truncated: true, bytes: 5000, cap: 1024, fullArtifact: undefined, keptAt: '' } }));
    expect('meta' in unspilled && unspilled.meta).not.toHaveProperty('stdout_full_artifact');
    expect('error' in unspilled && unspilled.error.message).toContain('kept in no file');
  });

  it('timeout: past the wall-clock limit, with the end of stderr', () => {
    const v = classify(ran({ exit: { reason: 'timeout', code: null, signal: 'SIGKILL' }, stderr: 'still sleeping\n' }));
    expect(v).toEqual({
      rule: 'timeout',
      outcome: 'failure',
      error: { kind: 'timeout', message: 'the tool ran past its 2000 ms wall-clock limit and was killed; stderr ends: still sleeping' },
    });
  });

  it('process_limit: cpu, memory, file size or output cap, named in the error', () => {
    for (const reason of ['cpu', 'memory', 'file_size', 'output_cap'] as const) {
      expect(classify(ran({ exit: { reason, code: null, signal: 'SIGXCPU' } }))).toEqual({
        rule: 'process_limit',
        outcome: 'failure',
        error: { kind: 'resource_limit', message: `the tool hit its ${reason} limit`, extra: { limit: reason } },
      });
    }
  });

  it('artifacts_full: the tool filled its artifacts directory', () => {
    const v = classify(ran({ artifacts: { dir: '/runs/r1/artifacts', cap: 4096, full: true } }));
    expect(v).toMatchObject({
      rule: 'artifacts_full',
      outcome: 'failure',
      error: { kind: 'resource_limit', extra: { limit: 'artifacts_bytes' } },
    });
    expect('error' in v && v.error.message).toMatchInlineSnapshot(
      `"the tool filled its artifacts directory (4096 bytes, policy budget artifacts_bytes); what it wrote up to that is kept in /runs/r1/artifacts — write less, or raise budgets.defaults.artifacts_bytes (ceiling 65536)"`,
    );
  });

  it('output_invalid: stdout is not an envelope; kept, and the message redacted', () => {
    const v = classify(
      ran({
        answer: { ok: false, reason: 'stdout is not one JSON value (it starts "hunter2")' },
        exit: { reason: 'exit', code: 3, signal: null },
        stderr: 'Traceback: hunter2',
        secrets: [['PASSWORD', 'hunter2']],
      }),
    );
    expect(v).toMatchObject({ rule: 'output_invalid', outcome: 'failure', keepStdout: true, error: { kind: 'output_invalid' } });
    expect('error' in v && v.error.message).not.toContain('hunter2');
    expect('error' in v && v.error.message).toContain('the tool exited with code 3; its stdout is kept in /runs/r1/artifacts/stdout.bin');
    const killed = classify(
      ran({ answer: { ok: false, reason: 'nothing printed' }, exit: { reason: 'signal', code: null, signal: 'SIGSEGV' } }),
    );
    expect('error' in killed && killed.error.message).toBe(
      'nothing printed; the tool was killed by SIGSEGV; its stdout is kept in /runs/r1/artifacts/stdout.bin',
    );
  });

  it('output_schema_failed: an ok answer whose data fails the output schema never passes', () => {
    const problems = [{ path: '/n', message: 'must be string' }];
    const v = classify(ran({ answer: { ...answered, outputProblem: { message: 'data/n must be string', problems } } }));
    expect(v).toEqual({
      rule: 'output_schema_failed',
      outcome: 'failure',
      error: { kind: 'output_schema_failed', message: 'data/n must be string', extra: { problems } },
    });
  });

  it('tool_answered: the tool’s ok envelope passes on', () => {
    expect(classify(ran())).toEqual({ rule: 'tool_answered', outcome: 'success', answer: answered.ok && answered.envelope });
  });

  it('tool_failed: the tool’s own ok:false is an answer too, its kind kept', () => {
    const own = { ok: false as const, error: { kind: 'not_found', message: 'no such row' }, meta: {} };
    expect(classify(ran({ answer: { ok: true, envelope: own } }))).toEqual({ rule: 'tool_failed', outcome: 'success', answer: own });
  });

  it('every rule has a test above, and names are unique', () => {
    expect(RULES.map((r) => r.name)).toEqual([
      'sandbox_unavailable',
      'bind_denied',
      'sandbox_failed',
      'cancelled',
      'stdout_over_cap',
      'timeout',
      'process_limit',
      'artifacts_full',
      'output_invalid',
      'output_schema_failed',
      'tool_answered',
      'tool_failed',
    ]);
  });
});

describe('the table over every combination of facts', () => {
  const reasons = ['exit', 'signal', 'timeout', 'cpu', 'memory', 'file_size', 'output_cap'] as const;
  const answers = fc.oneof(
    fc.constant<Answer>({ ok: false, reason: 'not JSON' }),
    fc.constant<Answer>(answered),
    fc.constant<Answer>({ ...answered, outputProblem: { message: 'bad', problems: [] } }),
    fc.constant<Answer>({ ok: true, envelope: { ok: false, error: { kind: 'own', message: 'no' }, meta: {} } }),
  );
  const ranFacts = fc.record({
    cancelled: fc.option(fc.constant('cancelled'), { nil: undefined }),
    reason: fc.constantFrom(...reasons),
    truncated: fc.boolean(),
    spilled: fc.boolean(),
    full: fc.boolean(),
    stderr: fc.constantFrom('', 'oops\n'),
    answer: answers,
  });
  const facts: fc.Arbitrary<RunFacts> = fc.oneof(
    fc.constantFrom<SandboxFailure['kind']>('sandbox_unavailable', 'bind_denied', 'internal').map(notRun),
    ranFacts.map((f) =>
      ran({
        cancelled: f.cancelled,
        exit: { reason: f.reason, code: f.reason === 'exit' ? 1 : null, signal: f.reason === 'exit' ? null : 'SIGKILL' },
        stdout: { truncated: f.truncated, bytes: 2048, cap: 1024, fullArtifact: f.spilled ? '/full' : undefined, keptAt: '/kept' },
        artifacts: { dir: '/a', cap: 4096, full: f.full },
        stderr: f.stderr,
        answer: f.answer,
      }),
    ),
  );

  it('exactly one rule decides (the first that holds), and classification is total', () => {
    fc.assert(
      fc.property(facts, (f) => {
        const deciding = RULES.filter((rule, i) => rule.when(f) && RULES.slice(0, i).every((earlier) => !earlier.when(f)));
        expect(deciding).toHaveLength(1);
        const v = classify(f);
        expect(v.rule).toBe(deciding[0]?.name);
        // Only a tool's parsed answer passes on; everything else is forge's own failure.
        if ('answer' in v) expect(f.ran && f.answer.ok && f.answer.outputProblem === undefined).toBe(true);
        else expect(v.error.message).not.toBe('');
      }),
      { numRuns: 500 },
    );
  });
});
