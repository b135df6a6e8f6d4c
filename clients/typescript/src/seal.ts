/**
 * Sealed payloads and results, as docs/ENCRYPTION.md defines them: AES-256-GCM under a named
 * key, a random 96-bit nonce, the associated data `lease-sealed:v1:NAME:KIND:JOB`. Keys come
 * from `LEASE_PAYLOAD_KEY` (one key, 32 bytes in base64, named `key-` and 8 hex digits of its
 * SHA-256) or `LEASE_PAYLOAD_KEY_FILE` (`NAME=BASE64` lines: the last seals, any opens).
 * No error message ever holds a key or a plaintext.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';

/** The variable holding one key. */
export const KEY_VAR = 'LEASE_PAYLOAD_KEY';
/** The variable naming a file of keys. */
export const KEY_FILE_VAR = 'LEASE_PAYLOAD_KEY_FILE';

const MAGIC = Buffer.from([0xff, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x01]);
const RESULT_PREFIX = 'lease-sealed:v1:';
const NONCE = 12;
const TAG = 16;
const NAME = /^[A-Za-z0-9._-]{1,64}$/;

/** A key that could not be read, or a value that could not be sealed or opened. */
export class SealError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SealError';
  }
}

type Kind = 'payload' | 'result' | 'checkpoint' | 'progress';

/** What a checkpoint's value is bound to: its job and its name, with a NUL between (neither holds one). */
function checkpointBinding(job: string, name: string): string {
  return `${job}\u0000${name}`;
}

/** The longest sealed progress text (as Rust's `SEALED_PROGRESS_MAX`): the API's bound for any progress. */
const PROGRESS_MAX = 256;

function associated(name: string, kind: Kind, job: string): Buffer {
  return Buffer.from(`lease-sealed:v1:${name}:${kind}:${job}`, 'utf8');
}

function decodeKey(text: string, where: string): Buffer {
  const trimmed = text.trim();
  const bytes = Buffer.from(trimmed, 'base64');
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(trimmed) || bytes.length !== 32 || bytes.toString('base64') !== trimmed) {
    throw new SealError(`${where}: a key must be 32 bytes in standard base64 (44 characters)`);
  }
  return bytes;
}

/** The keys a process seals and opens with: the last seals, any opens. */
export class Keyring {
  private readonly keys: Map<string, Buffer>;
  private readonly sealing: string;

  private constructor(keys: Array<[string, Buffer]>) {
    const last = keys[keys.length - 1];
    if (last === undefined) throw new SealError('a keyring needs a key');
    this.keys = new Map(keys);
    this.sealing = last[0];
  }

  /** One key (32 bytes), named as `LEASE_PAYLOAD_KEY` names it. */
  static single(key: Uint8Array): Keyring {
    if (key.length !== 32) throw new SealError('a key must be 32 bytes');
    const name = `key-${createHash('sha256').update(key).digest('hex').slice(0, 8)}`;
    return new Keyring([[name, Buffer.from(key)]]);
  }

  /** `NAME=BASE64` lines (blank lines and `#` lines skipped); `file` names it in errors. */
  static parse(text: string, file: string): Keyring {
    const keys: Array<[string, Buffer]> = [];
    const seen = new Set<string>();
    text.split('\n').forEach((raw, i) => {
      const line = raw.trim();
      if (line === '' || line.startsWith('#')) return;
      const where = `${file} line ${i + 1}`;
      const eq = line.indexOf('=');
      if (eq < 0) throw new SealError(`${where}: must be NAME=BASE64`);
      const name = line.slice(0, eq).trim();
      if (!NAME.test(name)) {
        throw new SealError(`${where}: a key's name is 1 to 64 of A-Z a-z 0-9 - _ .`);
      }
      if (seen.has(name)) throw new SealError(`${where}: names key ${name} a second time`);
      seen.add(name);
      keys.push([name, decodeKey(line.slice(eq + 1), where)]);
    });
    if (keys.length === 0) throw new SealError(`${file}: holds no key`);
    return new Keyring(keys);
  }

  /** The keys of the environment, or `undefined` when it names none. */
  static fromEnv(env: NodeJS.ProcessEnv = process.env): Keyring | undefined {
    // An empty variable counts as unset, as in Rust's `Keyring::from_env`.
    const one = env[KEY_VAR] || undefined;
    const file = env[KEY_FILE_VAR] || undefined;
    if (one !== undefined && file !== undefined) {
      throw new SealError(`set one of ${KEY_VAR} and ${KEY_FILE_VAR}, not both`);
    }
    if (one !== undefined) return Keyring.single(decodeKey(one, KEY_VAR));
    if (file !== undefined) {
      let text: string;
      try {
        text = readFileSync(file, 'utf8');
      } catch (e) {
        throw new SealError(`${KEY_FILE_VAR}: cannot read ${file}: ${(e as Error).message}`);
      }
      return Keyring.parse(text, file);
    }
    return undefined;
  }

  /** The names of the keys, the sealing one last. */
  get names(): string[] {
    return [...this.keys.keys()];
  }

  /** The name of the key that seals. */
  get sealingKey(): string {
    return this.sealing;
  }

  private seal(kind: Kind, job: string, plain: Uint8Array): { nonce: Buffer; body: Buffer } {
    const key = this.keys.get(this.sealing) as Buffer;
    const nonce = randomBytes(NONCE);
    const cipher = createCipheriv('aes-256-gcm', key, nonce);
    cipher.setAAD(associated(this.sealing, kind, job));
    const body = Buffer.concat([cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
    return { nonce, body };
  }

  /** Job `job`'s payload sealed with the sealing key. */
  sealPayload(job: string, plain: Uint8Array | string): Buffer {
    const bytes = typeof plain === 'string' ? Buffer.from(plain, 'utf8') : plain;
    const { nonce, body } = this.seal('payload', job, bytes);
    const name = Buffer.from(this.sealing, 'ascii');
    return Buffer.concat([MAGIC, Buffer.from([name.length]), name, nonce, body]);
  }

  /** Job `job`'s result sealed with the sealing key, as text. */
  sealResult(job: string, plain: string): string {
    return this.sealText('result', job, Buffer.from(plain, 'utf8'));
  }

  /** Job `job`'s checkpoint `name` sealed (bound to the job and the step), as text. */
  sealCheckpoint(job: string, name: string, value: string): string {
    return this.sealText('checkpoint', checkpointBinding(job, name), Buffer.from(value, 'utf8'));
  }

  /** Job `job`'s progress sealed, cut (at a character's end) to what fits a report once sealed. */
  sealProgress(job: string, text: string): string {
    let bytes = Buffer.from(text, 'utf8');
    if (bytes.length > this.progressRoom) {
      let end = this.progressRoom;
      // Back to the start of a character: UTF-8 continuation bytes are 0b10xxxxxx.
      while (end > 0 && ((bytes[end] as number) & 0xc0) === 0x80) end--;
      bytes = bytes.subarray(0, end);
    }
    return this.sealText('progress', job, bytes);
  }

  /** How many bytes of progress text fit a report once sealed under the sealing key. */
  get progressRoom(): number {
    const envelope = RESULT_PREFIX.length + this.sealing.length + 1;
    return Math.max(0, Math.floor((PROGRESS_MAX - envelope) / 4) * 3 - NONCE - TAG);
  }

  private sealText(kind: Kind, binding: string, plain: Uint8Array): string {
    const { nonce, body } = this.seal(kind, binding, plain);
    return `${RESULT_PREFIX}${this.sealing}:${Buffer.concat([nonce, body]).toString('base64')}`;
  }

  /** @internal `binding` is what the value was sealed for (the job, or a checkpoint's job and step); errors name `job`. */
  open(kind: Kind, job: string, name: string, sealed: Buffer, binding = job): Buffer {
    const key = this.keys.get(name);
    if (key === undefined) {
      throw new SealError(`job ${job}: its ${kind} is sealed with key ${name}, which is not among the keys given`);
    }
    const nonce = sealed.subarray(0, NONCE);
    const tag = sealed.subarray(sealed.length - TAG);
    const decipher = createDecipheriv('aes-256-gcm', key, nonce);
    decipher.setAAD(associated(name, kind, binding));
    decipher.setAuthTag(tag);
    try {
      return Buffer.concat([decipher.update(sealed.subarray(NONCE, sealed.length - TAG)), decipher.final()]);
    } catch {
      throw new SealError(`job ${job}: its ${kind} does not open with key ${name} (another job's, changed, or another key of that name)`);
    }
  }
}

/** The variable that, set to `1` (or `true`, `yes`), requires sealed values. */
export const REQUIRE_VAR = 'LEASE_REQUIRE_SEALED';

/** Whether the environment requires sealed values; a value other than 1/true/yes/0/false/no is refused. */
export function requireSealedFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  const value = (env[REQUIRE_VAR] ?? '').toLowerCase();
  if (['1', 'true', 'yes'].includes(value)) return true;
  if (['', '0', 'false', 'no'].includes(value)) return false;
  throw new SealError(`${REQUIRE_VAR} must be 1, true or yes (or 0, false, no) to say whether sealed values are required`);
}

/** The reserved start of a payload (0xFF "lease"): only a sealed payload may begin with it. */
const PAYLOAD_RESERVED = MAGIC.subarray(0, 6);
/** The reserved start of a result: only a sealed result may begin with it. */
const RESULT_RESERVED = 'lease-sealed:';

/** What a payload or result is, read by its envelope (docs/ENCRYPTION.md), as Rust reads it. */
export type Envelope =
  | { kind: 'plain' }
  | { kind: 'sealed'; key: string; body: Buffer }
  | { kind: 'malformed'; why: string };

/** The envelope a payload's bytes are in. */
export function payloadEnvelope(bytes: Uint8Array): Envelope {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length < PAYLOAD_RESERVED.length || !b.subarray(0, PAYLOAD_RESERVED.length).equals(PAYLOAD_RESERVED)) {
    return { kind: 'plain' };
  }
  if (b.length < MAGIC.length) return { kind: 'malformed', why: 'it has no version' };
  if (b[MAGIC.length - 1] !== MAGIC[MAGIC.length - 1]) {
    return { kind: 'malformed', why: 'its version is not 1, the only one this version reads' };
  }
  if (b.length < MAGIC.length + 1) return { kind: 'malformed', why: 'it has no key name' };
  const n = b[MAGIC.length] as number;
  if (b.length < MAGIC.length + 1 + n) return { kind: 'malformed', why: 'it is cut short in its key name' };
  const key = b.subarray(MAGIC.length + 1, MAGIC.length + 1 + n).toString('latin1');
  if (!NAME.test(key)) return { kind: 'malformed', why: 'its key name is not one (1 to 64 of A-Z a-z 0-9 - _ .)' };
  const body = b.subarray(MAGIC.length + 1 + n);
  if (body.length < NONCE + TAG) return { kind: 'malformed', why: 'it is shorter than a nonce and a tag' };
  return { kind: 'sealed', key, body };
}

/** The envelope a result's text is in (a sealed one's body decoded). */
export function resultEnvelope(text: string): Envelope {
  if (!text.startsWith(RESULT_RESERVED)) return { kind: 'plain' };
  const rest = text.slice(RESULT_RESERVED.length);
  if (!rest.startsWith('v1:')) return { kind: 'malformed', why: 'its version is not v1, the only one this version reads' };
  const colon = rest.indexOf(':', 3);
  if (colon < 0) return { kind: 'malformed', why: 'it has no key name' };
  const key = rest.slice(3, colon);
  if (!NAME.test(key)) return { kind: 'malformed', why: 'its key name is not one (1 to 64 of A-Z a-z 0-9 - _ .)' };
  const b64 = rest.slice(colon + 1);
  if (b64.length === 0 || b64.length % 4 !== 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) {
    return { kind: 'malformed', why: 'its body is not standard base64' };
  }
  const body = Buffer.from(b64, 'base64');
  if (body.length < NONCE + TAG) return { kind: 'malformed', why: 'it is shorter than a nonce and a tag' };
  return { kind: 'sealed', key, body };
}

/** The name of the key a sealed payload names, or `undefined` for one that is not well formed. */
export function sealedPayloadKey(bytes: Uint8Array): string | undefined {
  const envelope = payloadEnvelope(bytes);
  return envelope.kind === 'sealed' ? envelope.key : undefined;
}

/** The name of the key a sealed result names, or `undefined` for one that is not well formed. */
export function sealedResultKey(text: string): string | undefined {
  const envelope = resultEnvelope(text);
  return envelope.kind === 'sealed' ? envelope.key : undefined;
}

function opened(keys: Keyring | undefined, requireSealed: boolean, kind: Kind, job: string, envelope: Envelope, binding = job): Buffer | undefined {
  if (envelope.kind === 'plain') {
    if (requireSealed) {
      throw new SealError(`the ${kind} of job ${job} is not sealed, and sealed values are required (${REQUIRE_VAR}): it is refused`);
    }
    return undefined;
  }
  if (envelope.kind === 'malformed') {
    throw new SealError(`the ${kind} of job ${job} is not a well-formed sealed ${kind}: ${envelope.why}`);
  }
  if (keys === undefined) {
    throw new SealError(`job ${job}: its ${kind} is sealed with key ${envelope.key}, and no key was given (${KEY_VAR} or ${KEY_FILE_VAR})`);
  }
  return keys.open(kind, job, envelope.key, envelope.body, binding);
}

/**
 * Job `job`'s payload opened: a plain payload as it is (refused when `requireSealed`), a sealed
 * one with its key; one that begins with the reserved start but is not well formed is refused.
 */
export function openPayload(keys: Keyring | undefined, job: string, bytes: Uint8Array, requireSealed = false): Buffer {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return opened(keys, requireSealed, 'payload', job, payloadEnvelope(b)) ?? b;
}

/** Job `job`'s result opened: a plain result as it is (refused when `requireSealed`), a sealed one with its key. */
export function openResult(keys: Keyring | undefined, job: string, text: string, requireSealed = false): string {
  return opened(keys, requireSealed, 'result', job, resultEnvelope(text))?.toString('utf8') ?? text;
}

/** Job `job`'s checkpoint `name` opened, as {@link openResult} opens a result. */
export function openCheckpoint(keys: Keyring | undefined, job: string, name: string, value: string, requireSealed = false): string {
  return opened(keys, requireSealed, 'checkpoint', job, resultEnvelope(value), checkpointBinding(job, name))?.toString('utf8') ?? value;
}

/** Job `job`'s progress opened, as {@link openResult} opens a result. */
export function openProgress(keys: Keyring | undefined, job: string, text: string, requireSealed = false): string {
  return opened(keys, requireSealed, 'progress', job, resultEnvelope(text))?.toString('utf8') ?? text;
}
