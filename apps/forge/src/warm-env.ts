import { EnvironmentError } from './args.js';

/**
 * The warm sandboxes' settings from the environment (README, Configuration): `FORGE_WARM` (`on`
 * or `off`; also 1/0, true/false) and `FORGE_WARM_POOL_MIB` (a whole number of MiB). Throws
 * `EnvironmentError` naming the variable, its value and what it takes.
 */
export function warmFromEnv(env: NodeJS.ProcessEnv): { warm?: false | { poolBytes: number } } {
  const flag = env.FORGE_WARM?.trim().toLowerCase() ?? '';
  if (['off', '0', 'false'].includes(flag)) return { warm: false };
  if (!['', 'on', '1', 'true'].includes(flag)) {
    throw new EnvironmentError(
      `FORGE_WARM=${JSON.stringify(env.FORGE_WARM)} is neither on nor off; set it to off to start every call cold, or unset it`,
    );
  }
  const mib = env.FORGE_WARM_POOL_MIB?.trim();
  if (!mib) return {};
  const n = Number(mib);
  if (!/^\d+$/.test(mib) || !Number.isSafeInteger(n * (1 << 20))) {
    throw new EnvironmentError(
      `FORGE_WARM_POOL_MIB=${JSON.stringify(mib)} is not a whole number of MiB; give one such as 64, or unset it for the default`,
    );
  }
  return { warm: { poolBytes: n * (1 << 20) } };
}
