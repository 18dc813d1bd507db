import { SandboxError } from './errors.js';
import { which } from './which.js';

/** The highest descriptor dash (`/bin/sh` on Debian) can name in a redirection: one digit. */
const SH_MAX_FD = 9;
let bash: string | undefined;

/**
 * The shell for a launcher or staging step that opens, moves or closes descriptors up to
 * `highestFd`: `/bin/sh` while they fit one digit (the fast, common case), else bash, which names
 * any descriptor (a run with many binds and per-run files). Without bash such a run is refused
 * (`sandbox_unavailable`), never started with descriptors the shell would misread as commands.
 */
export function shellFor(highestFd: number): string {
  if (highestFd <= SH_MAX_FD) return '/bin/sh';
  bash ??= which('bash', ['/bin', '/usr/bin']);
  if (!bash)
    throw new SandboxError(
      'sandbox_unavailable',
      `this run needs descriptor ${highestFd} in its launcher (many binds and per-run files), which only bash can name, and bash was not found: install bash (apt-get install -y bash), or bind fewer paths; nothing was run`,
    );
  return bash;
}
