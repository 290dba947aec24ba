// Child processes for the e2e tests: `shardlm serve` and `shardlm shard`, started with a
// bounded wait until they are ready and stopped for sure (every child is tracked, so an
// `after` hook can kill whatever a failed test left running).
//
// Goals: no fixed sleeps (poll with deadlines); a child that dies early fails with its log.
// Non-goals: assertions (the *.test.js files), the shape of any response.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
// The fixtures folder (SHARDLM_FIXTURES, or ../shared/fixtures beside the repository) and
// the binary under test (SHARDLM_BIN, or build/shardlm).
export const fixtures =
  process.env.SHARDLM_FIXTURES ?? path.resolve(here, '../../../shared/fixtures');
export const binary = path.resolve(here, process.env.SHARDLM_BIN ?? '../../build/shardlm');

// Whether a test file can run: false, or why it skips (no binary, a missing fixture). Under
// CI=true a missing file is an error instead: CI must never skip.
export function skipReason(name, files) {
  let missing = fs.existsSync(binary) ? null : `no binary at ${binary}`;
  for (const f of files) {
    if (!missing && !fs.existsSync(f)) missing = `missing fixture ${f}`;
  }
  if (missing && process.env.CI === 'true') {
    throw new Error(`e2e: ${missing} (CI=true: fixtures are required)`);
  }
  return missing ? `e2e ${name} skipped: ${missing}` : false;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const children = new Set();

// Spawns `binary args`, collecting stdout + stderr into log(); exited() / exitPromise.
function launch(binary, args) {
  const proc = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const child = { proc, text: '', exited: false };
  const append = (d) => { child.text += d.toString(); };
  proc.stdout.on('data', append);
  proc.stderr.on('data', append);
  child.exitPromise = new Promise((resolve) => {
    proc.on('exit', (code, signal) => {
      child.exited = true;
      children.delete(child);
      resolve({ code, signal });
    });
  });
  children.add(child);
  child.log = () => child.text;
  child.kill = async (signal = 'SIGTERM', graceMs = 5000) => {
    if (child.exited) return;
    proc.kill(signal);
    const timer = sleep(graceMs).then(() => 'timeout');
    if ((await Promise.race([child.exitPromise, timer])) === 'timeout') {
      proc.kill('SIGKILL');
      await child.exitPromise;
    }
  };
  return child;
}

// Polls `ready()` every 50 ms until it returns true, the child exits, or the deadline.
async function waitReady(child, what, ready, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exited) throw new Error(`${what} exited early:\n${child.log()}`);
    if (await ready()) return;
    await sleep(50);
  }
  await child.kill('SIGKILL');
  throw new Error(`${what} not ready after ${timeoutMs} ms:\n${child.log()}`);
}

// `binary ...args(port)` on a free port, ready once GET /health answers 200 (shardlm serve,
// llama-server); child.base is its URL.
export async function startHttp(binary, args, timeoutMs = 60_000) {
  const port = await freePort();
  const argv = args(port);
  const child = launch(binary, argv);
  child.base = `http://127.0.0.1:${port}`;
  await waitReady(child, `${path.basename(binary)} ${argv.join(' ')}`, async () => {
    try {
      const r = await fetch(`${child.base}/health`, { signal: AbortSignal.timeout(2000) });
      return r.ok;
    } catch {
      return false;
    }
  }, timeoutMs);
  return child;
}

// `shardlm serve -m model ...extra` on a free port, ready once GET /health answers 200.
export function startServer(binary, model, extra = [], timeoutMs = 60_000) {
  return startHttp(binary, (port) => ['serve', '-m', model, '--port', String(port), ...extra],
    timeoutMs);
}

// `shardlm shard --listen unix:socketPath --cores cores`, ready once it logs that it listens.
export function startShard(binary, socketPath, cores, timeoutMs = 30_000) {
  return startListening(binary, ['shard'], socketPath, cores, [], timeoutMs);
}

// `shardlm worker --role prefill --listen unix:socketPath --cores cores ...extra`, the same way.
export function startWorker(binary, socketPath, cores, extra = [], timeoutMs = 30_000) {
  return startListening(binary, ['worker', '--role', 'prefill'], socketPath, cores, extra,
    timeoutMs);
}

async function startListening(binary, command, socketPath, cores, extra, timeoutMs) {
  const args = [...command, '--listen', `unix:${socketPath}`, '--cores', String(cores), ...extra];
  const child = launch(binary, args);
  await waitReady(child, `shardlm ${args.join(' ')}`,
    () => child.log().includes(`listening on unix:${socketPath}`), timeoutMs);
  return child;
}

// Kills every child still running (for `after` hooks).
export async function killAll() {
  await Promise.all([...children].map((c) => c.kill('SIGKILL', 2000)));
}

// An `after` hook of a file with a temp folder: kills every child still running, then
// removes `dir` (when the file made one).
export async function cleanUp(dir) {
  await killAll();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
}
