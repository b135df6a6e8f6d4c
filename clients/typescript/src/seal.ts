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

type Kind = 'payload' | 'result';

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
    const { nonce, body } = this.seal('result', job, Buffer.from(plain, 'utf8'));
    return `${RESULT_PREFIX}${this.sealing}:${Buffer.concat([nonce, body]).toString('base64')}`;
  }

  /** @internal */
  open(kind: Kind, job: string, name: string, sealed: Buffer): Buffer {
    const key = this.keys.get(name);
    if (key === undefined) {
      throw new SealError(`job ${job}: its ${kind} is sealed with key ${name}, which is not among the keys given`);
    }
    const nonce = sealed.subarray(0, NONCE);
    const tag = sealed.subarray(sealed.length - TAG);
    const decipher = createDecipheriv('aes-256-gcm', key, nonce);
    decipher.setAAD(associated(name, kind, job));
    decipher.setAuthTag(tag);
    try {
      return Buffer.concat([decipher.update(sealed.subarray(NONCE, sealed.length - TAG)), decipher.final()]);
    } catch {
      throw new SealError(`job ${job}: its ${kind} does not open with key ${name} (another job's, changed, or another key of that name)`);
    }
  }
}

/** The name of the key a sealed payload names, or `undefined` for a plain payload. */
export function sealedPayloadKey(bytes: Uint8Array): string | undefined {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length < MAGIC.length + 1 || !b.subarray(0, MAGIC.length).equals(MAGIC)) return undefined;
  const n = b[MAGIC.length] as number;
  const name = b.subarray(MAGIC.length + 1, MAGIC.length + 1 + n).toString('latin1');
  if (n < 1 || !NAME.test(name) || b.length < MAGIC.length + 1 + n + NONCE + TAG) return undefined;
  return name;
}

/** Job `job`'s payload opened: a plain payload as it is, a sealed one with its key. */
export function openPayload(keys: Keyring | undefined, job: string, bytes: Uint8Array): Buffer {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const name = sealedPayloadKey(b);
  if (name === undefined) return b;
  if (keys === undefined) {
    throw new SealError(`job ${job}: its payload is sealed with key ${name}, and no key was given (${KEY_VAR} or ${KEY_FILE_VAR})`);
  }
  return keys.open('payload', job, name, b.subarray(MAGIC.length + 1 + name.length));
}

/** The name of the key a sealed result names, or `undefined` for a plain result. */
export function sealedResultKey(text: string): string | undefined {
  if (!text.startsWith(RESULT_PREFIX)) return undefined;
  const name = text.slice(RESULT_PREFIX.length).split(':', 1)[0] ?? '';
  return NAME.test(name) ? name : undefined;
}

/** Job `job`'s result opened: a plain result as it is, a sealed one with its key. */
export function openResult(keys: Keyring | undefined, job: string, text: string): string {
  const name = sealedResultKey(text);
  if (name === undefined) return text;
  if (keys === undefined) {
    throw new SealError(`job ${job}: its result is sealed with key ${name}, and no key was given (${KEY_VAR} or ${KEY_FILE_VAR})`);
  }
  const b64 = text.slice(RESULT_PREFIX.length + name.length + 1);
  const sealed = Buffer.from(b64, 'base64');
  if (sealed.length < NONCE + TAG || sealed.toString('base64') !== b64) {
    throw new SealError(`job ${job}: its result is not a well-formed sealed value`);
  }
  return keys.open('result', job, name, sealed).toString('utf8');
}
