/** One thing `forge doctor` looked at. */
export interface Check {
  /** `sandbox`, `runtime python3`, `home`, `vault`, `policy`, … */
  name: string;
  ok: boolean;
  /** What was found. */
  detail: string;
  /** What to run or change, when not ok. */
  fix?: string;
  /** Works, but the operator should know (an upstream server that runs unsandboxed). */
  warn?: boolean;
}
