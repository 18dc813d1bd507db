// The example tools the demo forges: the repository's examples/ (tool.json + main.py), bundled
// into the CLI so that `forge demo` needs nothing but itself.
import csvImpl from '../../../examples/csv_stats/main.py';
import csvSpec from '../../../examples/csv_stats/tool.json' with { type: 'json' };
import fibImpl from '../../../examples/fib/main.py';
import fibSpec from '../../../examples/fib/tool.json' with { type: 'json' };

export const FIB = { ...fibSpec, impl: fibImpl };
export const CSV_STATS = { ...csvSpec, impl: csvImpl };
