/**
 * Errors: every refusal of the server is a {@link LeaseError} carrying the problem document's
 * stable `reason` (`stale`, `expired`, `not_owner`, `cancelled`, `done`, `dead`, ...), its
 * status and, for a stale fence, the fences presented and current.
 */

/** The body of an error answer (`application/problem+json`). */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  reason?: string;
  presented_fence?: number | null;
  current_fence?: number | null;
  [field: string]: unknown;
}

/** A request the server refused, or that did not reach it. */
export class LeaseError extends Error {
  /** The HTTP status (0 when the request got no answer). */
  readonly status: number;
  /**
   * The server's stable reason, or `connection` when no answer came (a write then may or may
   * not have been applied), or `malformed` for an answer this client could not read.
   */
  readonly reason: string;
  /** The problem document as sent, when there was one. */
  readonly problem: Problem | undefined;

  constructor(status: number, reason: string, message: string, problem?: Problem, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'LeaseError';
    this.status = status;
    this.reason = reason;
    this.problem = problem;
  }

  /** Whether the lease this write presented is no longer the job's (a later claim, an expiry,
   * another owner) or the job stopped (cancelled, done, dead, gone): its holder must stop. */
  get leaseLost(): boolean {
    return LOST.has(this.reason);
  }

  /** The error of an answer that was not a success. */
  static fromAnswer(response: Response, body: unknown): LeaseError {
    const problem = isProblem(body) ? body : undefined;
    const reason = problem?.reason ?? `http_${response.status}`;
    const detail = problem?.detail ?? (typeof body === 'string' && body ? body : response.statusText);
    return new LeaseError(
      response.status,
      reason,
      `${response.status} ${reason}: ${detail}`,
      problem,
    );
  }
}

/** The reasons that end a lease for its holder. */
const LOST = new Set(['stale', 'expired', 'not_owner', 'cancelled', 'done', 'dead', 'not_found', 'bad_token']);

function isProblem(body: unknown): body is Problem {
  return typeof body === 'object' && body !== null && 'reason' in body;
}
